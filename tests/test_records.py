"""Records that disagree (attnprof.analysis.records): a capture record (status.json) is checked against its folder,
its trace and env.json, and every record (status.json, env.json, calibration.json) that cannot be read or lacks
a key gives one error naming the file and the key.

The handed cases (tests/fixtures/cases/c7*.status.json.gz, copied unchanged from the issue's case set) go through
scripts/extract.py as the extract rule runs it; the other inputs are the committed H200 captures
(tests/fixtures/h200) with one field changed."""
import gzip
import json
import runpy
import shutil
import types
from pathlib import Path

import pandas as pd
import pytest

from attnprof.analysis.records import (
    ENV_CHECK_KEYS,
    STATUS_KEYS,
    RecordError,
    check_capture_record,
    cuda_of_runtime,
    cuda_of_torch,
    load_calibration,
    load_env,
    load_record,
    load_status,
    trace_schema_problem,
)
from attnprof.analysis.trace import TraceError, device_properties, events_frame, load_trace

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "fixtures" / "cases"
H200 = ROOT / "tests" / "fixtures" / "h200"
BEYOND = ROOT / "tests" / "fixtures" / "h200_beyond"
STUDY = "b8_h16_s1024_d64_bf16_causal"
TABLES = ("kernels", "forwards", "launches", "ops", "backwards", "kernels_backward", "ops_backward", "recipe", "recipe_backward")
#: env.json of the run the H200 fixtures come from (the keys the records are checked against, and the report's)
H200_ENV = {"run": "x", "device": "cuda", "gpu_name": "NVIDIA H200", "torch": "2.11.0+cu130", "cuda_build": "13.0",
            "cudnn": 91900, "driver": "580.159.04", "python": "3.12.3", "snakemake": "9.27.1",
            "config": {"profiler": {"range_name": "attn_fwd", "warmup_calls": 3, "schedule": {"wait": 1, "warmup": 2, "active": 10}},
                       "timing": {"repeats": 50, "input_sets": 4}}}


def gunzip_json(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def place(tmp_path: Path, variant: str, status: dict | bytes, trace: dict | Path | None = None, shape: str = STUDY,
          repeat: int = 1) -> Path:
    """A capture folder results/x/captures/<shape>/<variant>/r<repeat>/ under ``tmp_path`` holding ``status`` (a
    record, or the bytes of a status.json) and ``trace`` (a trace file, a trace dict; default: the H200 fixture of
    ``variant``); returns the status.json path."""
    folder = tmp_path / "results" / "x" / "captures" / shape / variant / f"r{repeat}"
    folder.mkdir(parents=True, exist_ok=True)
    trace = H200 / variant / "trace.json.gz" if trace is None else trace
    if isinstance(trace, Path):
        shutil.copy(trace, folder / "trace.json.gz")
    else:
        (folder / "trace.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode()))
    (folder / "status.json").write_bytes(status if isinstance(status, bytes) else json.dumps(status).encode())
    return folder / "status.json"


def sm_for(status_path: Path, **inputs) -> types.SimpleNamespace:
    """What Snakemake hands scripts/extract.py for the capture of ``status_path``."""
    folder = status_path.parent
    tables = Path(str(folder).replace("/captures/", "/tables/"))
    tables.mkdir(parents=True, exist_ok=True)
    return types.SimpleNamespace(
        input=types.SimpleNamespace(trace=str(folder / "trace.json.gz"), status=str(status_path), **inputs),
        output=types.SimpleNamespace(**{k: str(tables / f"{k}.csv") for k in TABLES}, device=str(tables / "device.json")),
        log=[str(folder / "extract.log")], params=types.SimpleNamespace(range_name="attn_fwd"),
        wildcards=types.SimpleNamespace(variant=folder.parent.name, shape=folder.parents[1].name, repeat=folder.name[1:]))


def extract(status_path: Path) -> types.SimpleNamespace:
    sm = sm_for(status_path)
    runpy.run_path(str(ROOT / "scripts" / "extract.py"), init_globals={"snakemake": sm})
    return sm


def rel(path: Path, tmp_path: Path) -> str:
    return str(path.relative_to(tmp_path))


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The result set's paths relative, as Snakemake gives them (the working directory is the workflow's)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- the handed cases ---------------------------------------------------------------------------------------

def test_a_flash_record_in_cudnns_folder_refuses_that_capture(in_tmp):
    """c7b: sdpa_flash's record beside cuDNN's trace. Before: two sdpa_flash rows, none for sdpa_cudnn, the
    headline verdict flipped. Now extract refuses the capture, naming the record, the field and both variants."""
    status = place(in_tmp, "sdpa_cudnn", gzip.decompress((CASES / "c7b_flash_status_in_cudnn_folder.status.json.gz").read_bytes()))
    with pytest.raises(RecordError) as err:
        extract(status.relative_to(in_tmp))
    assert str(err.value).startswith(f"results/x/captures/{STUDY}/sdpa_cudnn/r1/status.json says variant 'sdpa_flash' "
                                     "but lies in the folder of 'sdpa_cudnn'")
    assert not list((in_tmp / "results" / "x" / "tables").rglob("*.csv"))  # nothing published


def test_a_truncated_record_names_its_file_not_a_json_error(in_tmp):
    """c7c: a status.json cut short. Before: a bare JSONDecodeError, no file named."""
    status = place(in_tmp, "sdpa_flash", gzip.decompress((CASES / "c7c_truncated.status.json.gz").read_bytes()))
    with pytest.raises(RecordError) as err:
        extract(status.relative_to(in_tmp))
    message = str(err.value)
    assert message.startswith(f"results/x/captures/{STUDY}/sdpa_flash/r1/status.json: truncated")
    assert "interrupted write" in message and "JSONDecodeError" not in message and "Expecting" not in message
    assert not isinstance(err.value, json.JSONDecodeError)


def test_the_committed_captures_pass_the_checks_and_are_extracted(in_tmp):
    status = place(in_tmp, "sdpa_cudnn", gzip.decompress((H200 / "sdpa_cudnn" / "status.json.gz").read_bytes()))
    sm = extract(status.relative_to(in_tmp))
    assert len(pd.read_csv(sm.output.forwards)) == 10 and len(pd.read_csv(sm.output.kernels)) > 0


@pytest.mark.parametrize("folder", sorted(p.parent for p in [*H200.glob("*/status.json.gz"), *BEYOND.glob("*/*/status.json.gz")]))
def test_every_committed_record_agrees_with_its_trace_and_its_environment(folder):
    status, trace = gunzip_json(folder / "status.json.gz"), load_trace(folder / "trace.json.gz")
    check_capture_record(status, folder / "status.json.gz", device_properties(trace), H200_ENV,
                         trace_meta={"cuda_runtime_version": trace.get("cuda_runtime_version")}, trace_categories=events_frame(trace)["cat"].value_counts().to_dict())
    assert trace_schema_problem(events_frame(trace)["cat"].value_counts().to_dict(), expect_gpu=True) is None


# --- a record against its folder ------------------------------------------------------------------------------

def test_a_record_naming_another_shape_is_refused(in_tmp):
    record = gunzip_json(H200 / "naive" / "status.json.gz")
    other = "b8_h16_s2048_d64_bf16_causal"
    status = place(in_tmp, "naive", {**record, "shape_key": other, "seq_len": 2048})
    with pytest.raises(RecordError, match=f"says shape_key '{other}' but lies in the folder of shape '{STUDY}'"):
        extract(status.relative_to(in_tmp))
    # the key edited to the folder's, the fields left: the fields make another shape
    status = place(in_tmp, "naive", {**record, "seq_len": 2048})
    with pytest.raises(RecordError, match=f"says shape_key '{STUDY}' but its own shape fields .*seq_len 2048.* make "
                                          f"'{other}'"):
        extract(status.relative_to(in_tmp))


def test_a_record_naming_another_repeat_is_refused(tmp_path):
    record = gunzip_json(H200 / "naive" / "status.json.gz")
    status = place(tmp_path, "naive", {**record, "repeat": 2}, repeat=3)
    with pytest.raises(RecordError, match=r"r3/status.json says repeat 2 but lies in the folder of repeat 3"):
        check_capture_record({**record, "repeat": 2}, status, None)
    check_capture_record({**record, "repeat": 3}, status, None)
    # a record made before repeats (format 1, no repeat key) is read with its folder's repeat: nothing to refuse
    status = place(tmp_path, "naive", record, repeat=3)
    assert "repeat" not in record and load_status(status)["repeat"] == 3
    check_capture_record(load_status(status), status, None)


# --- a record against its trace ------------------------------------------------------------------------------------

def test_a_trace_from_another_gpu_is_refused(in_tmp):
    trace = gunzip_json(H200 / "sdpa_flash" / "trace.json.gz")
    trace["deviceProperties"][0]["name"] = "NVIDIA H100 80GB HBM3"
    status = place(in_tmp, "sdpa_flash", gunzip_json(H200 / "sdpa_flash" / "status.json.gz"), trace)
    with pytest.raises(RecordError) as err:
        extract(status.relative_to(in_tmp))
    assert str(err.value).startswith(
        f"results/x/captures/{STUDY}/sdpa_flash/r1/status.json says device_name 'NVIDIA H200' but its trace "
        f"results/x/captures/{STUDY}/sdpa_flash/r1/trace.json.gz was recorded on 'NVIDIA H100 80GB HBM3' (deviceProperties name)")


def test_a_trace_from_another_cuda_build_is_refused(in_tmp):
    trace = gunzip_json(H200 / "naive" / "trace.json.gz")
    assert trace["cuda_runtime_version"] == 13000  # torch 2.11.0+cu130: CUDA 13.0
    trace["cuda_runtime_version"] = 12080
    status = place(in_tmp, "naive", gunzip_json(H200 / "naive" / "status.json.gz"), trace)
    with pytest.raises(RecordError, match=r"status.json says torch_version '2.11.0\+cu130' \(CUDA 13.0\) but its trace "
                                          r"\S+trace.json.gz was recorded with CUDA runtime 12.8 \(cuda_runtime_version 12080\)"):
        extract(status.relative_to(in_tmp))


def test_cuda_versions_are_read_as_torch_and_cuda_write_them():
    assert cuda_of_torch("2.11.0+cu130") == (13, 0) and cuda_of_torch("2.7.1+cu128") == (12, 8)
    assert cuda_of_torch("2.13.0+cpu") == (0, 0) and cuda_of_torch("2.5.0") is None and cuda_of_torch(None) is None
    assert cuda_of_runtime(13000) == (13, 0) and cuda_of_runtime(12080) == (12, 8) and cuda_of_runtime("13000") is None


def test_a_gpu_trace_under_a_cpu_record_and_a_cpu_trace_under_a_gpu_record_are_refused(tmp_path):
    gpu_record = {**gunzip_json(H200 / "naive" / "status.json.gz"), "repeat": 1}  # in the current format, r1's
    cpu_record = {**gpu_record, "device": "cpu", "device_name": "x86_64", "torch_version": "2.11.0+cu130"}
    status = place(tmp_path, "naive", cpu_record)
    with pytest.raises(RecordError, match=r"says device 'cpu' but its trace \S+ holds 70 GPU events"):
        check_capture_record(cpu_record, status, [], trace_path=status.with_name("trace.json.gz"),
                             trace_meta={}, trace_categories={"cpu_op": 390, "kernel": 50, "gpu_memcpy": 10, "gpu_memset": 10})
    with pytest.raises(RecordError, match="says device 'cuda' but its trace .* a CPU capture's trace"):
        check_capture_record(gpu_record, status, [], trace_meta={}, trace_categories={"cpu_op": 390, "user_annotation": 20})
    # a GPU capture that did not run left an empty placeholder trace: nothing to compare
    check_capture_record({**gpu_record, "status": "unsupported"}, status, [], trace_meta={}, trace_categories={})


def test_a_trace_in_an_unknown_schema_says_so_instead_of_no_gpu_activity(in_tmp):
    """Categories renamed (a Kineto that names them otherwise): not 'no GPU activity recorded', not '0 of 10
    forwards are in the trace', but the schema named, with the categories it has."""
    trace = gunzip_json(H200 / "naive" / "trace.json.gz")
    for event in trace["traceEvents"]:
        if event.get("cat"):
            event["cat"] = event["cat"].title().replace("_", "")  # cpu_op -> CpuOp, kernel -> Kernel
    status = place(in_tmp, "naive", gunzip_json(H200 / "naive" / "status.json.gz"), trace)
    with pytest.raises(TraceError, match=r"trace.json.gz: a trace in a schema attnprof does not know: none of its \d+ "
                                         r"complete events is in a category attnprof reads .*CpuOp \(390\)"):
        extract(status.relative_to(in_tmp))
    # the CPU side as known, the GPU side renamed: its GPU events are not missing, they are unread
    trace = gunzip_json(H200 / "naive" / "trace.json.gz")
    for event in trace["traceEvents"]:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            event["cat"] = "gpu_" + event["cat"].removeprefix("gpu_") + "_activity"
    status = place(in_tmp, "naive", gunzip_json(H200 / "naive" / "status.json.gz"), trace)
    with pytest.raises(TraceError, match=r"no events in the GPU categories .* but 70 in categories it does not know"):
        extract(status.relative_to(in_tmp))
    # no traceEvents at all: load_trace says so
    status = place(in_tmp, "naive", gunzip_json(H200 / "naive" / "status.json.gz"), {"events": [], "deviceProperties": []})
    with pytest.raises(TraceError, match="not a Chrome trace"):
        extract(status.relative_to(in_tmp))
    assert trace_schema_problem({}, expect_gpu=True) is None  # a placeholder trace is empty, not unknown


# --- a record against env.json (rule summarize) ---------------------------------------------------------------------

def summarize(tmp_path: Path, statuses: list[Path]) -> types.SimpleNamespace:
    run = tmp_path / "results" / "x"
    tables = [Path(str(p.parent).replace("/captures/", "/tables/")) for p in statuses]
    sm = types.SimpleNamespace(
        input=types.SimpleNamespace(status=[str(p) for p in statuses], forwards=[str(t / "forwards.csv") for t in tables],
                                    backwards=[str(t / "backwards.csv") for t in tables],
                                    kernels=[str(t / "kernels.csv") for t in tables],
                                    # the profiler's control (rule summarize's control.csv): none in these cases
                                    control_status=[], control_forwards=[], control_ops=[],
                                    # the result set's env.json, a declared input of rule summarize (relative, as given)
                                    env=str((run / "env.json").relative_to(tmp_path))),
        output=types.SimpleNamespace(summary=str(run / "summary.csv"), repeats=str(run / "repeats.csv"),
                                     kernels=str(run / "kernels.csv"), control=str(run / "control.csv")),
        log=[str(run / "summarize.log")], params=types.SimpleNamespace(confidence=0.95), wildcards=types.SimpleNamespace(run="x"))
    runpy.run_path(str(ROOT / "scripts" / "summarize.py"), init_globals={"snakemake": sm})
    return sm


def test_summarize_refuses_a_capture_from_another_torch_build_or_gpu(in_tmp):
    status = place(in_tmp, "naive", gunzip_json(H200 / "naive" / "status.json.gz")).relative_to(in_tmp)
    extract(status)
    env = in_tmp / "results" / "x" / "env.json"
    env.write_text(json.dumps(H200_ENV))
    sm = summarize(in_tmp, [status])
    assert list(pd.read_csv(sm.output.summary)["variant"]) == ["naive"]
    env.write_text(json.dumps({**H200_ENV, "torch": "2.12.0+cu130"}))
    with pytest.raises(RecordError) as err:
        summarize(in_tmp, [status])
    assert str(err.value).startswith(f"results/x/captures/{STUDY}/naive/r1/status.json says torch_version '2.11.0+cu130' "
                                     "but results/x/env.json says torch '2.12.0+cu130'")
    env.write_text(json.dumps({**H200_ENV, "gpu_name": "NVIDIA H100 80GB HBM3"}))
    with pytest.raises(RecordError, match="says device_name 'NVIDIA H200' but results/x/env.json says gpu_name "
                                          "'NVIDIA H100 80GB HBM3'"):
        summarize(in_tmp, [status])
    env.write_text(json.dumps({**H200_ENV, "device": "cpu", "gpu_name": None}))
    with pytest.raises(RecordError, match="says device 'cuda' but results/x/env.json says device 'cpu'"):
        summarize(in_tmp, [status])
    env.write_text(json.dumps({k: v for k, v in H200_ENV.items() if k != "torch"}))
    with pytest.raises(RecordError, match=r"^results/x/env.json: no key 'torch'$"):
        summarize(in_tmp, [status])


def test_the_environment_check_compares_only_what_both_sides_recorded():
    record = gunzip_json(H200 / "naive" / "status.json.gz")
    # a capture process that died (attnprof.runtime.isolation.crash_record: the current format names its repeat)
    dead = {**{k: record[k] for k in ("variant", "shape_key", "device", "status")}, "repeat": 1}
    check_capture_record(dead, f"results/x/captures/{STUDY}/naive/r1/status.json", None, H200_ENV)
    cpu = {**record, "device": "cpu", "device_name": "x86_64", "torch_version": "2.13.0+cpu"}
    check_capture_record(cpu, "status.json", None, {"device": "cpu", "gpu_name": None, "torch": "2.13.0+cpu"})


# --- unreadable and incomplete records ------------------------------------------------------------------------------

@pytest.mark.parametrize("content,cause", [
    (b'{"variant": "naive", "shape_key": "s", "dev', "truncated: the JSON ends after"),
    (b'{"variant": "naive", "shape_key": ', "truncated"),
    (b"", "empty file"),
    (b"<html>not a record</html>", "not JSON (Expecting value: line 1 column 1)"),
    (b'{"variant": "naive",, }', "not JSON"),
    (b"[1, 2]", "not a record (a JSON list, not an object)"),
    (b'{"variant": "na\xffive"}', "not JSON (not UTF-8 text"),
])
def test_a_record_that_cannot_be_read_names_the_file_and_the_cause(tmp_path, content, cause):
    path = tmp_path / "status.json"
    path.write_bytes(content)
    with pytest.raises(RecordError) as err:
        load_record(path, STATUS_KEYS)
    assert str(err.value).startswith(f"{path}: {cause}")


def test_a_record_without_a_key_names_the_file_and_the_key(tmp_path):
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"variant": "naive", "shape_key": STUDY, "status": "ok"}))
    with pytest.raises(RecordError, match=r"status.json: no key 'device'$"):
        load_record(path, STATUS_KEYS)
    path.write_text("{}")
    with pytest.raises(RecordError, match=r"status.json: no keys 'variant', 'shape_key', 'device', 'status'$"):
        load_record(path, STATUS_KEYS)
    with pytest.raises(RecordError, match=r"missing.json: no such file"):
        load_record(tmp_path / "missing.json")
    gz = tmp_path / "status.json.gz"
    gz.write_bytes(gzip.compress(b'{"variant": "naive"}')[:-12])
    with pytest.raises(RecordError, match=r"status.json.gz: truncated: the gzip stream ends early"):
        load_record(gz)


def test_env_json_without_a_key_the_report_states_is_named(tmp_path):
    path = tmp_path / "env.json"
    path.write_text(json.dumps({k: v for k, v in H200_ENV.items() if k != "driver"}))
    with pytest.raises(RecordError, match=r"env.json: no key 'driver'$"):  # the report's GPU line states it
        load_env(path)
    path.write_text(json.dumps({**H200_ENV, "config": {"profiler": H200_ENV["config"]["profiler"]}}))
    with pytest.raises(RecordError, match=r"env.json: no key 'config.timing'$"):
        load_env(path)
    path.write_text(json.dumps({k: v for k, v in H200_ENV.items() if k != "gpu_name"}))
    with pytest.raises(RecordError, match=r"env.json: no key 'gpu_name'$"):
        load_env(path, ENV_CHECK_KEYS)
    path.write_text(json.dumps(H200_ENV)[:-40])
    with pytest.raises(RecordError, match=r"env.json: truncated"):
        load_env(path)
    assert load_env(ROOT / "tests/fixtures/cpu_repeats/cpu-aa-a/env.json")["device"] == "cpu"  # a real CPU run's


def test_calibration_json_without_a_key_is_named(tmp_path):
    path = tmp_path / "calibration.json"
    measured = {"device": "cuda", "gemm_tflops_bf16": 772.6, "gemm_tflops_fp16": 749.2, "copy_tb_per_s": 4.17,
                "copy_bytes": 2 << 30, "gemm_n": 8192, "method": "median of CUDA-event timings"}
    path.write_text(json.dumps(measured))
    assert load_calibration(path) == measured
    path.write_text(json.dumps({k: v for k, v in measured.items() if k != "copy_tb_per_s"}))
    with pytest.raises(RecordError, match=r"calibration.json: no key 'copy_tb_per_s'$"):
        load_calibration(path)
    path.write_text(json.dumps({"device": "cpu", "skipped": "no GPU"}))
    assert load_calibration(path)["skipped"] == "no GPU"
    path.write_text(json.dumps({"skipped": "no GPU"}))
    with pytest.raises(RecordError, match=r"calibration.json: no key 'device'$"):
        load_calibration(path)
    path.write_text("not json")
    with pytest.raises(RecordError, match=r"calibration.json: not JSON"):
        load_calibration(path)
