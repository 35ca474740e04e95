"""The optional hardware-counter stage (attnprof.measure.counters, attnprof.findings.counters) on a CPU:
skip paths (no ncu, no permission, CPU run), parsing of ncu CSVs captured on an H200, and the
join of measured counters with a trace kernel table."""

import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from attnprof.measure.counters import measure, parse_raw_csv, permission_message
from attnprof.findings.counters import counter_findings, load_counter_findings

NCU_FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
STUDY = {"batch": 8, "heads": 16, "seq_len": 1024, "head_dim": 64, "dtype": "bf16", "causal": True}
#: ncu's message when the driver withholds the counters (Nsight Compute, ERR_NVGPUCTRPERM)
PERM = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on "
        "the target device 0. For instructions on enabling permissions and to get more information see "
        "https://developer.nvidia.com/ERR_NVGPUCTRPERM")


def spec(variant="sdpa_flash", device="cuda"):
    return {"variant": variant, "shape": STUDY, "device": device, "seed": 0, "warmup_calls": 3, "forwards": 1}


def fake_ncu(tmp_path: Path, body: str) -> Path:
    """An executable ``ncu`` in its own folder running ``body`` (bash)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "ncu"
    exe.write_text("#!/bin/bash\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_no_ncu_on_path_is_skipped_with_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no ncu
    out = tmp_path / "c.csv"
    rec = measure(spec(), out)
    assert rec["status"] == "skipped"
    assert "ncu (Nsight Compute) not found on PATH" in rec["reason"]
    assert pd.read_csv(out).empty and "kernel" in pd.read_csv(out).columns


def test_cpu_run_is_skipped(tmp_path):
    rec = measure(spec(device="cpu"), tmp_path / "c.csv")
    assert rec["status"] == "skipped" and "CUDA GPU" in rec["reason"]


def test_not_permitted_is_skipped_with_ncus_message(tmp_path, monkeypatch):
    body = f'case "$1" in --version) echo "Version 2025.3.1.0";; --query-metrics) echo "sm__warps_active  Counter  # of warps";;\n' \
           f'*) echo "==PROF== Connected to process 1"; echo "{PERM}"; exit 1;; esac'
    monkeypatch.setenv("PATH", f"{fake_ncu(tmp_path, body)}{os.pathsep}{os.environ['PATH']}")
    rec = measure(spec(), tmp_path / "c.csv", timeout_s=30)
    assert rec["status"] == "skipped"
    assert "ERR_NVGPUCTRPERM - The user does not have permission" in rec["reason"]
    assert pd.read_csv(tmp_path / "c.csv").empty


def test_ncu_failure_is_failed_with_its_error(tmp_path, monkeypatch):
    body = 'case "$1" in --version) echo "Version X";; --query-metrics) ;; *) echo "==ERROR== Failed to profile kernel" >&2; exit 3;; esac'
    monkeypatch.setenv("PATH", f"{fake_ncu(tmp_path, body)}{os.pathsep}{os.environ['PATH']}")
    rec = measure(spec(), tmp_path / "c.csv", timeout_s=30)
    assert rec["status"] == "failed" and "Failed to profile kernel" in rec["reason"]


def test_permission_message_is_nculine():
    assert permission_message("==PROF== x\n" + PERM + "\n") == PERM
    assert permission_message("==PROF== all fine") is None


def test_parse_ncu_csv_of_the_fused_kernels():
    """tests/fixtures/ncu/*.csv: ``ncu --import --csv --page raw --print-units base`` of the study shape
    on an H200 (Nsight Compute 2025.3.1, torch 2.11.0+cu130), device-attribute columns trimmed;
    expected values read off the files."""
    flash, units = parse_raw_csv((NCU_FIXTURES / "sdpa_flash.csv").read_text())
    assert len(flash) == 1
    row = flash.iloc[0]
    assert row["kernel"].startswith("void flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4")
    assert (row["grid"], row["block"]) == ("8x8x16", "128x1x1")
    assert row["achieved_occupancy_pct"] == 11.89 and row["theoretical_occupancy_pct"] == 12.5
    assert row["sm_throughput_pct"] == 39.71 and row["dram_throughput_pct"] == 14.13 and row["tensor_pipe_pct"] == 38.59
    assert row["duration_ns"] == 91776 and row["registers_per_thread"] == 255  # "91,776": thousands separators
    assert row["tensor_gmma_inst"] == 0 and row["tensor_hmma_inst"] == 4718592  # sm80 code: mma.sync, no wgmma
    assert units["achieved_occupancy_pct"] == "%" and units["duration_ns"] == "ns" and units["tensor_gmma_inst"] == "inst"
    cudnn = parse_raw_csv((NCU_FIXTURES / "sdpa_cudnn.csv").read_text())[0].iloc[0]
    assert cudnn["kernel"].startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma")
    assert (cudnn["grid"], cudnn["block"]) == ("132x1x1", "384x1x1")
    assert cudnn["achieved_occupancy_pct"] == 14.09 and cudnn["theoretical_occupancy_pct"] == 18.75
    assert cudnn["tensor_pipe_pct"] == 40.4 and cudnn["tensor_gmma_inst"] == 442368
    assert cudnn["sm_throughput_pct"] == 40.32 and cudnn["dram_throughput_pct"] == 21.61


def test_parse_ncu_csv_of_naive_keeps_one_row_per_kernel():
    naive, _ = parse_raw_csv((NCU_FIXTURES / "naive.csv").read_text())
    assert list(naive["id"]) == [0, 1, 2, 3, 4]  # the 5 kernels of one forward (the trace: 5 kernels + memcpy + memset)
    assert list(naive["achieved_occupancy_pct"]) == [14.39, 82.33, 92.58, 59.51, 14.57]
    assert list(naive["theoretical_occupancy_pct"]) == [18.75, 100, 100, 62.5, 18.75]
    assert list(naive["grid"]) == ["2x66x1", "131072x1x1", "262144x1x1", "32768x1x1", "2x66x1"]
    assert "device__attribute_architecture" not in naive.columns  # only the metrics asked for


def test_measure_with_a_fake_ncu_writes_the_table(tmp_path, monkeypatch):
    """The whole of measure() without a GPU: a fake ncu lists the metrics, 'profiles' (writes the
    report file named by --export) and, on --import, prints the H200 CSV."""
    fixture = NCU_FIXTURES / "sdpa_cudnn.csv"
    body = f"""case "$1" in
  --version) echo "Version 2025.3.1.0";;
  --query-metrics) printf 'sm__pipe_tensor_cycles_active  Counter cycle x\nsm__inst_executed_pipe_tensor_op_gmma Counter inst x\n';;
  --import) cat {fixture};;
  *) while [ "$1" != "--export" ]; do shift; done; touch "$2.ncu-rep"; echo "==PROF== Disconnected";;
esac"""
    monkeypatch.setenv("PATH", f"{fake_ncu(tmp_path, body)}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "sdpa_cudnn.csv"
    rec = measure(spec("sdpa_cudnn"), out, timeout_s=30)
    assert rec["status"] == "ok" and rec["kernels"] == 1, rec
    assert rec["metrics"]["tensor_pipe_pct"] == "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
    assert "tensor_hmma_inst" not in rec["metrics"]  # not listed by this ncu's --query-metrics
    assert "--clock-control none" in rec["command"] and "--nvtx-include attnprof_counters/" in rec["command"]
    table = pd.read_csv(out)
    assert list(table.columns[:6]) == ["variant", "shape_key", "id", "kernel", "grid", "block"]
    assert table.loc[0, "achieved_occupancy_pct"] == 14.09 and table.loc[0, "shape_key"] == "b8_h16_s1024_d64_bf16_causal"


def test_finding_on_the_h200_counters_and_trace(tmp_path):
    """The ncu fixtures joined with the H200 traces' kernel tables (tests/fixtures/h200): cuDNN's
    kernel shows 0 % in the trace (cuLaunchKernelEx) and 14.09 % achieved under ncu; ncu's shortened
    names (flash_fwd_kernel, <unnamed>::softmax_warp_forward) find their trace kernels."""
    from conftest import fixture_status, fixture_trace

    from attnprof.analysis.tables import analyse_trace, kernel_table
    from attnprof.analysis.trace import device_properties

    found = {}
    for v in ("sdpa_flash", "sdpa_cudnn", "naive"):
        trace = fixture_trace(v)
        kernels = kernel_table(analyse_trace(trace, "attn_fwd"), v, fixture_status(v)["shape_key"])
        counters, _ = parse_raw_csv((NCU_FIXTURES / f"{v}.csv").read_text())
        found[v] = counter_findings(v, counters, kernels, device_properties(trace), {"status": "ok"})
    cudnn = found["sdpa_cudnn"][0]
    assert cudnn["launch_api"] == "cuLaunchKernelEx" and cudnn["trace_est_occupancy_pct"] == 0
    assert cudnn["achieved_occupancy_pct"] == 14.09 and cudnn["artefact"]
    assert cudnn["launch_limit_pct"] == cudnn["theoretical_occupancy_pct"] == 18.75  # the trace's limit, confirmed by ncu
    flash = found["sdpa_flash"][0]
    assert flash["label"] == "pytorch_flash::flash_fwd_kernel" and flash["launch_api"] == "cudaLaunchKernel"
    assert flash["trace_est_occupancy_pct"] == 13 and flash["achieved_occupancy_pct"] == 11.89 and not flash["artefact"]
    assert flash["launch_limit_pct"] == 12.5 == flash["theoretical_occupancy_pct"]
    naive = found["naive"]
    assert all(f["launch_api"] for f in naive)  # all 5 matched
    assert [f["trace_est_occupancy_pct"] for f in naive] == [0, 100, 100, 63, 0]
    assert [f["artefact"] for f in naive] == [True, False, False, False, True]


def hand_counters() -> pd.DataFrame:
    return pd.DataFrame([
        {"variant": "naive", "shape_key": "k", "id": 0, "kernel": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",
         "grid": "2x66x1", "block": "384x1x1", "achieved_occupancy_pct": 18.6, "theoretical_occupancy_pct": 18.75,
         "sm_throughput_pct": 60.0, "dram_throughput_pct": 20.0, "tensor_pipe_pct": 55.0, "tensor_gmma_inst": 1000.0, "duration_ns": 100000.0},
        {"variant": "naive", "shape_key": "k", "id": 1,
         "kernel": "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>"
                   "(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",
         "grid": "32768x1x1", "block": "32x4x1", "achieved_occupancy_pct": 55.0, "theoretical_occupancy_pct": 62.5,
         "sm_throughput_pct": 30.0, "dram_throughput_pct": 85.0, "tensor_pipe_pct": 0.0, "duration_ns": 200000.0},
        {"variant": "naive", "shape_key": "k", "id": 2, "kernel": "some_kernel_not_in_the_trace",
         "grid": "1x1x1", "block": "32x1x1", "achieved_occupancy_pct": 1.0, "theoretical_occupancy_pct": 50.0,
         "sm_throughput_pct": 0.1, "dram_throughput_pct": 0.1, "tensor_pipe_pct": 0.0, "duration_ns": 1000.0},
    ])


def hand_kernels() -> pd.DataFrame:
    return pd.DataFrame([
        {"variant": "naive", "kernel": "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, "
                                       "false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",
         "category": "kernel", "device": 0, "grid": "32768x1x1", "block": "32x4x1", "registers_per_thread": 48.0,
         "shared_memory_bytes": 0.0, "est_occupancy_pct": 63.0, "launch_api": "cudaLaunchKernel"},
        {"variant": "naive", "kernel": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "category": "kernel", "device": 0,
         "grid": "2x66x1", "block": "384x1x1", "registers_per_thread": 168.0, "shared_memory_bytes": 213188.0,
         "est_occupancy_pct": 0.0, "launch_api": "cuLaunchKernelEx"},
        {"variant": "naive", "kernel": "Memcpy DtoD (Device -> Device)", "category": "memcpy", "device": 0, "grid": None,
         "block": None, "registers_per_thread": None, "shared_memory_bytes": None, "est_occupancy_pct": None,
         "launch_api": "cudaMemcpyAsync"},
    ])


#: the H200's deviceProperties as Kineto writes them (the fields theoretical_occupancy reads)
H200_PROPS = [{"id": 0, "regsPerMultiprocessor": 65536, "maxThreadsPerMultiprocessor": 2048, "warpSize": 32,
               "sharedMemPerMultiprocessor": 233472}]


def test_finding_joins_counters_with_the_trace_kernels():
    found = counter_findings("naive", hand_counters(), hand_kernels(), H200_PROPS, {"status": "ok"})
    assert [f["label"] for f in found] == ["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",
                                           "softmax_warp_forward", "some_kernel_not_in_the_trace"]
    nvjet, softmax, lost = found
    # cuLaunchKernelEx: the trace says 0 %, ncu saw 18.6 % achieved: an artefact
    assert nvjet["trace_est_occupancy_pct"] == 0.0 and nvjet["launch_api"] == "cuLaunchKernelEx"
    assert nvjet["achieved_occupancy_pct"] == 18.6 and nvjet["theoretical_occupancy_pct"] == 18.75
    assert nvjet["artefact"] and "artefact" in nvjet["text"]
    # 168 registers x 384 threads: 12 warps of 168*32 -> 5376 regs each; 65536 // (5376*12) = 1 block, 12 of 64 warps;
    # shared memory 233472 // 213188 = 1 block: 18.75 %
    assert nvjet["launch_limit_pct"] == 18.75
    assert nvjet["tensor_pipe_pct"] == 55.0 and "(wgmma)" in nvjet["text"] and nvjet["sm_throughput_pct"] == 60.0 and nvjet["dram_throughput_pct"] == 20.0
    # softmax: 48 regs -> 1536 per warp x 4 warps: 10 blocks by registers, 16 by warps: 40 of 64 warps = 62.5 %
    assert softmax["trace_est_occupancy_pct"] == 63.0 and softmax["launch_limit_pct"] == 62.5 and not softmax["artefact"]
    assert lost["launch_api"] is None and "not in the trace's kernel table" in lost["text"]


def test_finding_when_not_measured_says_why():
    found = counter_findings("sdpa_flash", pd.DataFrame(), pd.DataFrame(), [], {"status": "skipped", "reason": "ncu not found"})
    assert len(found) == 1 and "skipped: ncu not found" in found[0]["text"]


def test_load_counter_findings_reads_the_result_set(tmp_path):
    """Each status file's own (shape, variant) rows of the run's kernel table are matched: the same
    kernels at another shape (another estimate) and another variant's rows are not used."""
    c = tmp_path / "counters" / "k"
    c.mkdir(parents=True)
    hand_counters().to_csv(c / "naive.csv", index=False)
    (c / "naive.json").write_text(json.dumps({"status": "ok", "reason": ""}))
    (c / "sdpa_flash.json").write_text(json.dumps({"status": "skipped", "reason": "ncu not found"}))
    mine = hand_kernels().assign(shape_key="k")
    other_shape = mine.assign(shape_key="k2", est_occupancy_pct=[11.0, 22.0, None])
    other_variant = mine.assign(variant="sdpa_math", est_occupancy_pct=[33.0, 44.0, None])
    kernels = pd.concat([other_shape, other_variant, mine], ignore_index=True)
    found = load_counter_findings([c / "sdpa_flash.json", c / "naive.json"], kernels, H200_PROPS, ["naive", "sdpa_flash"])
    assert list(found) == ["k"]
    naive, flash = found["k"][:3], found["k"][3:]  # the order of the variants given, not of the paths
    # counters rows: nvjet (trace 0 %, ncu 18.6 %: the artefact), softmax (trace 63 %), one not in the trace
    assert [f["trace_est_occupancy_pct"] for f in naive] == [0.0, 63.0, None]
    assert naive[0]["artefact"] and not naive[1]["artefact"] and naive[1]["launch_limit_pct"] == 62.5
    assert len(flash) == 1 and "skipped: ncu not found" in flash[0]["text"]


def test_a_damaged_counters_status_names_its_file(tmp_path):
    c = tmp_path / "counters" / "k"
    c.mkdir(parents=True)
    (c / "naive.json").write_text('{"status": ok, "reason": ""}')  # not JSON: ok unquoted
    with pytest.raises(ValueError, match=r"naive\.json: not JSON"):
        load_counter_findings([c / "naive.json"], hand_kernels(), H200_PROPS, ["naive"])
    (c / "naive.json").write_text('{"status": "ok", "rea')  # cut short: an interrupted write
    with pytest.raises(ValueError, match=r"naive\.json: truncated.*--forcerun measure_counters"):
        load_counter_findings([c / "naive.json"], hand_kernels(), H200_PROPS, ["naive"])


def test_flex_kernel_zero_estimate_is_contradicted_by_ncu():
    """FlexAttention's Triton kernel on the H200 (beyond example): launched with cuLaunchKernel, the
    trace estimates 0 % occupancy; ncu measured about 12 % achieved of 12.5 % theoretical (the CSV's
    own cells; 12.02 % and 11.91 % in two captures), so the finding marks the trace's 0 % as wrong there."""
    import gzip
    import json

    from attnprof.analysis.backward import analyse_passes
    from attnprof.analysis.tables import kernel_table

    root = Path(__file__).resolve().parents[1]
    counters = pd.read_csv(root / "examples/nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56-beyond/counters/"
                           "b8_h16_s1024_d64_bf16_causal/flex_attention.csv", dtype={"grid": str, "block": str})
    capture = root / "tests/fixtures/h200_beyond/b8_h16_s1024_d64_bf16_causal/flex_attention"
    fwd, _ = analyse_passes(json.load(gzip.open(capture / "trace.json.gz")), "attn_fwd", expect_gpu=True)
    (flex,) = counter_findings("flex_attention", counters, kernel_table(fwd, "flex_attention", "s"), H200_PROPS, {"status": "ok"})
    assert flex["launch_api"] == "cuLaunchKernel" and flex["trace_est_occupancy_pct"] == 0
    import csv

    with open(root / "examples/nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56-beyond/counters/"
              "b8_h16_s1024_d64_bf16_causal/flex_attention.csv", newline="") as fh:  # the CSV's own cells, read by csv
        (cells,) = [r for r in csv.DictReader(fh) if r["kernel"].startswith("triton_tem_fused_flex_attention")]
    assert flex["achieved_occupancy_pct"] == float(cells["achieved_occupancy_pct"]) > 0
    assert flex["theoretical_occupancy_pct"] == float(cells["theoretical_occupancy_pct"]) == 12.5  # 255 regs, 128 threads
    assert flex["artefact"] and "launched with cuLaunchKernel" in flex["text"]


def test_broken_ncu_output_is_a_reason_not_a_crash_nor_a_number():
    import csv
    import io

    text = (NCU_FIXTURES / "sdpa_flash.csv").read_text()
    # a trailing ncu message is not a kernel
    table, _ = parse_raw_csv(text + '==WARNING== Backing up device memory in system memory.\n')
    assert len(table) == 1
    # no Kernel Name column, or no rows at all: ValueError naming it (measure records 'failed' with it)
    header, units, row = list(csv.reader(io.StringIO(text)))
    i = header.index("Kernel Name")
    drop = io.StringIO()
    csv.writer(drop, quoting=csv.QUOTE_ALL).writerows([r[:i] + r[i + 1:] for r in (header, units, row)])
    with pytest.raises(ValueError, match="Kernel Name"):
        parse_raw_csv(drop.getvalue())
    with pytest.raises(ValueError, match="no units row"):
        parse_raw_csv(text.splitlines()[0] + "\n")
    # a percentage outside 0..100, and a decimal comma, are not readings
    j = header.index("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    for bad in ("250", "inf", "-5", "1.234,5"):
        r = list(row)
        r[j] = bad
        out = io.StringIO()
        csv.writer(out, quoting=csv.QUOTE_ALL).writerows([header, units, r])
        value = parse_raw_csv(out.getvalue())[0]["sm_throughput_pct"].iloc[0]
        assert value != value, bad  # NaN
