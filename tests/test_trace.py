"""Extraction on real H200 traces (tests/fixtures/h200) and synthetic edge cases."""
import pandas as pd
import pytest

from attnprof.analysis.tables import analyse_trace, forward_table, kernel_table
from attnprof.analysis.trace import TraceError, kernel_label, load_trace, short_kernel_name


def by_variant(h200, v):
    return h200["summary"].set_index("variant").loc[v]


def test_every_forward_of_naive_has_five_kernels_a_memcpy_and_a_memset(h200):
    fw = h200["forwards"]["naive"]
    assert len(fw) == 10  # schedule active=10
    assert set(fw["kernels"]) == {5} and set(fw["memcpy"]) == {1} and set(fw["memset"]) == {1}
    assert (fw["unattributed_gpu_events"] == 0).all()


def test_inplace_removes_the_memcpy(h200):
    assert by_variant(h200, "naive")["memcpy_per_forward"] == 1
    assert by_variant(h200, "naive_inplace")["memcpy_per_forward"] == 0
    k = h200["kernels"]
    memcpy = k[(k["variant"] == "naive") & (k["category"] == "memcpy")].iloc[0]
    assert memcpy["kernel"].startswith("Memcpy DtoD") and memcpy["op"] == "aten::copy_"


@pytest.mark.parametrize("variant,kernels", [("sdpa_math", 20), ("sdpa_efficient", 1), ("sdpa_flash", 1), ("sdpa_cudnn", 1), ("sdpa_auto", 1)])
def test_kernel_counts_per_forward(h200, variant, kernels):
    assert by_variant(h200, variant)["kernels_per_forward"] == kernels


def test_device_time_is_sum_of_event_durations_per_forward(h200):
    trace = h200["traces"]["sdpa_flash"]
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    fw = h200["forwards"]["sdpa_flash"]
    assert sorted(fw["device_us"]) == pytest.approx(sorted(e["dur"] for e in kernels))


def test_launch_metadata_and_api_come_from_the_trace(h200):
    k = h200["kernels"].set_index("variant")
    flash = k.loc["sdpa_flash"]
    assert flash["registers_per_thread"] == 255 and flash["est_occupancy_pct"] == 13
    assert flash["block"] == "128x1x1" and flash["launch_api"] == "cudaLaunchKernel"
    cudnn = k.loc[["sdpa_cudnn"]]
    main = cudnn[cudnn["category"] == "kernel"].iloc[0]
    assert main["launch_api"] == "cuLaunchKernelEx" and main["est_occupancy_pct"] == 0


def test_calls_are_counted_per_forward_not_divided(h200):
    k = h200["kernels"]
    math = k[k["variant"] == "sdpa_math"]
    assert (math["calls_min"] == math["calls_max"]).all()
    assert math["calls_per_forward"].sum() == 20


def test_short_names_and_labels():
    flash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false>, true>(pytorch_flash::Flash_fwd_params)"
    assert short_kernel_name(flash) == "pytorch_flash::flash_fwd_kernel"
    softmax = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, float, 10>(c10::BFloat16*, int)"
    assert short_kernel_name(softmax) == "softmax_warp_forward"
    mul = ("void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
           "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, ...)")
    assert kernel_label(mul) == "vectorized_elementwise_kernel [MulFunctor<float>]"
    assert kernel_label("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD"


def _synthetic(events):
    return {"traceEvents": events}


def _range(ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": "attn_fwd", "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}


def test_cpu_only_trace_has_forwards_but_no_device_events():
    frames = analyse_trace(_synthetic([_range(0, 10), _range(20, 12),
                                       {"ph": "X", "cat": "cpu_op", "name": "aten::bmm", "pid": 1, "tid": 1, "ts": 1, "dur": 3, "args": {"External id": 5}}]),
                           "attn_fwd")
    fw = forward_table(frames, "naive", "s")
    assert list(fw["cpu_us"]) == [10, 12] and (fw["kernels"] == 0).all() and (fw["device_us"] == 0).all()
    assert kernel_table(frames, "naive", "s").empty


def test_kernel_missing_launch_metadata_and_launch_outside_forwards():
    events = [
        _range(0, 10),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "k<a&b>", "pid": 0, "tid": 7, "ts": 5, "dur": 4, "args": {"correlation": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 50, "dur": 1, "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "stray", "pid": 0, "tid": 7, "ts": 52, "dur": 4, "args": {"correlation": 9}},
    ]
    frames = analyse_trace(_synthetic(events), "attn_fwd")
    kt = kernel_table(frames, "v", "s")
    assert list(kt["kernel"]) == ["k<a&b>"]
    assert pd.isna(kt.loc[0, "registers_per_thread"]) and kt.loc[0, "grid"] is None
    fw = forward_table(frames, "v", "s")
    assert fw.loc[0, "kernels"] == 1 and fw.loc[0, "unattributed_gpu_events"] == 1


def test_unreadable_trace_raises(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError):
        load_trace(bad)
    (tmp_path / "u.json").write_text("[]")
    with pytest.raises(TraceError):
        load_trace(tmp_path / "u.json")


# --- the fast reader (issue 10): the same events, frames and errors as json.loads ---------------

import copy  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
from pathlib import Path  # noqa: E402

from attnprof.analysis.tables import launch_api_table, op_table  # noqa: E402
from attnprof.analysis.trace import GPU_ARG_KEYS, Trace, events_frame  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES_H200 = ROOT / "tests" / "fixtures" / "h200"
H200_TRACES = sorted(FIXTURES_H200.glob("*/trace.json.gz"))
CASE_TRACES = [p for p in sorted((ROOT / "tests" / "fixtures" / "cases").glob("*.json.gz"))
               if not p.name.startswith("b12") and not p.name.endswith(".status.json.gz")]  # records, not traces


def _largest_per_variant(paths):
    """Of the committed examples' traces (99), each example's largest per variant (the most events):
    every variant and every example's kinds of events, at a third of the time of all of them."""
    best = {}
    for p in paths:
        key = (p.parts[-5], p.parts[-2])  # example, variant
        if key not in best or p.stat().st_size > best[key].stat().st_size:
            best[key] = p
    return sorted(best.values())


EXAMPLE_TRACES = _largest_per_variant(ROOT.glob("examples/*/captures/*/*/trace.json.gz"))


def _json(path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _frames_and_tables(trace):
    out = {}
    for expect in (True, False):
        frames = analyse_trace(trace, "attn_fwd", expect_gpu=expect)
        out.update({(name, expect): f for name, f in frames.items()})
        for table in (kernel_table, forward_table, launch_api_table, op_table):
            out[(table.__name__, expect)] = table(frames, "v", "s")
    return out


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        pd.testing.assert_frame_equal(a[key], b[key], check_exact=True, obj=str(key))


@pytest.mark.parametrize("path", H200_TRACES + CASE_TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fast_reader_holds_every_complete_event_as_the_json_has_it(path):
    """The columns against a plain-Python reading of the JSON, sharing no code with attnprof."""
    trace = load_trace(path)
    assert isinstance(trace, Trace)  # the fast reader took the file
    frame = events_frame(trace)
    want = []
    for e in _json(path)["traceEvents"]:
        if e.get("ph") != "X":
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        gpu = tuple(args.get(k) for k in GPU_ARG_KEYS) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") else None
        want.append((e["name"], e["cat"], float(e["ts"]), float(e["dur"]), e["pid"], e["tid"], args.get("correlation"),
                     args.get("External id"), gpu))
    got = [(r.name, r.cat, r.ts, r.dur, r.pid, r.tid, None if pd.isna(r.correlation) else int(r.correlation),
            None if pd.isna(r.external_id) else int(r.external_id), r.gpu_args) for r in frame.itertuples(index=False)]
    assert got == want
    assert [type(v) for row in got for v in row[4:6]] == [type(v) for row in want for v in row[4:6]]


@pytest.mark.parametrize("path", H200_TRACES + CASE_TRACES + EXAMPLE_TRACES,
                         ids=lambda p: "/".join(p.parts[-3:-1]) if p.name == "trace.json.gz" else p.name)
def test_fast_reader_gives_the_frames_and_tables_of_json_loads(path):
    """Every frame of analyse_trace and every table, from load_trace's columns and from the
    dicts json.load gives (dtypes, values, order, index): identical."""
    fast = load_trace(path)
    assert isinstance(fast, Trace)
    _assert_same(_frames_and_tables(fast), _frames_and_tables(_json(path)))


def test_loaded_trace_is_the_json_object():
    path = FIXTURES_H200 / "naive" / "trace.json.gz"
    ref = _json(path)
    trace = load_trace(path)
    assert list(trace) == list(ref) and len(trace) == len(ref) and "traceEvents" in trace
    assert trace.get("deviceProperties") == ref["deviceProperties"] and trace["schemaVersion"] == ref["schemaVersion"]
    assert trace == ref and ref == trace and not (trace != ref)
    assert json.dumps(trace) == json.dumps(ref) and dict(trace) == ref and {**trace} == ref
    assert pickle.loads(pickle.dumps(load_trace(path))) == ref and copy.deepcopy(load_trace(path)) == ref
    assert load_trace(path).get("traceEvents") == ref["traceEvents"] and dict(load_trace(path).items()) == ref
    # once the list has been handed out it is what counts: a change to it shows in the tables
    trace = load_trace(path)
    before = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "v", "s")
    memset = next(e for e in trace["traceEvents"] if e.get("cat") == "gpu_memset")
    trace["traceEvents"].remove(memset)
    after = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "v", "s")
    assert before["complete"].all() and after["complete"].sum() == len(after) - 1
    replaced = load_trace(path)
    replaced["traceEvents"] = []
    assert analyse_trace(replaced, "attn_fwd")["ranges"].empty


def _naive_text(cat="kernel", **edits) -> str:
    """The naive fixture's JSON with fields of its first event of category ``cat`` replaced
    (``args_<key>``: a key of its args), as json.dumps writes it."""
    trace = _json(FIXTURES_H200 / "naive" / "trace.json.gz")
    event = next(e for e in trace["traceEvents"] if e.get("cat") == cat)
    for key, value in edits.items():
        if key.startswith("args_"):
            event["args"][key[5:].replace("_", " ")] = value
        else:
            event[key] = value
    return json.dumps(trace)


@pytest.mark.parametrize("text", [
    _naive_text(dur=float("nan")),                     # NaN literal: not JSON, but json.loads reads it
    _naive_text(ts="5103853337216.943"),               # a number as a string
    _naive_text(note="k\ud800"),                       # a lone surrogate, in a field the tables do not read
    _naive_text(name=7),                               # a name that is not a string
    _naive_text(args_correlation=175.0),               # a fractional-looking id
    _naive_text(args_correlation=2**60),               # an id beyond float64's exact integers
    _naive_text(args_correlation=True),
    _naive_text("cpu_op", args=[1, 2]),                # args that are not an object
], ids=["nan", "string_ts", "lone_surrogate", "int_name", "float_id", "huge_id", "bool_id", "list_args"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_files_the_fast_reader_does_not_take_read_as_json_loads_reads_them(tmp_path, text, suffix):
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(gzip.compress(text.encode()) if suffix == ".json.gz" else text.encode())
    trace = load_trace(path)
    assert not isinstance(trace, Trace) and trace == json.loads(text)  # the same dict: the same tables
    if suffix == ".json":
        _frames_and_tables(trace)  # and the tables read its odd values without an error


@pytest.mark.parametrize("content,cause", [
    (b'{"traceEvents": [{"ph": "X", "skipped": "caf\xe9"}]}', "not UTF-8"),  # in a field the fast reader skips
    (b'{"traceEvents": [{"ph": "X", "skipped": "a\x01b"}]}', "not valid JSON"),  # raw control character
    (b'\xef\xbb\xbf{"traceEvents": []}', "not valid JSON"),  # a byte-order mark
    (b'{"traceEvents": [{"ph": "X", "args": {"x": ' + b"[" * 100000 + b"]" * 100000 + b"}}]}", "JSON nested too deeply"),
    (b'{"traceEvents": [{"ph": "X"}, 3, "x"]}', "2 of 3 events are not JSON objects"),
    (b'{"traceEvents": {"ph": "X"}}', "no traceEvents list"),
    (b'[{"traceEvents": []}]', "no traceEvents list"),
    (b'{"traceEvents": [{"ph": "X"}]', "truncated trace: the JSON ends early"),
], ids=["utf8_in_skipped_field", "control_char", "bom", "deep", "not_objects", "events_not_list", "top_not_object", "cut"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_unreadable_text_is_a_trace_error_naming_file_and_cause(tmp_path, content, cause, suffix):
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(gzip.compress(content) if suffix == ".json.gz" else content)
    with pytest.raises(TraceError, match=cause) as err:
        load_trace(path)
    assert str(err.value).startswith(f"{path}: ")
