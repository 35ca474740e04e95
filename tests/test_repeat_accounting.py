"""Every repeat accounted for (issue 32 item 8): a repeat whose trace has impossible GPU times, a copy of another
repeat, a missing round, a host draw its own timed calls contradict. Inputs: the committed H200 example's three
captures of naive at the study shape, with repeat 2's trace replaced by the damaged ones of
tests/fixtures/damaged_repeats (every GPU event's dur NaN; the softmax kernel's dur 0 in every forward), and
hand-made rows. Expected values: the two undamaged repeats' device times, counted from their traces by
test_trust.independent_forwards (another code path)."""
import json
import statistics
from pathlib import Path

import pytest

from attnprof.analysis.tables import analyse_trace, combine_repeats, forward_table, summary_row
from attnprof.analysis.trace import load_trace
from test_trust import independent_forwards

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56"
STUDY = "b8_h16_s1024_d64_bf16_causal"
DAMAGED = ROOT / "tests" / "fixtures" / "damaged_repeats"


def _row(k: int, trace_path: Path | None = None) -> dict:
    cap = EXAMPLE / "captures" / STUDY / "naive" / f"r{k}"
    status = json.loads((cap / "status.json").read_text())
    path = trace_path or cap / "trace.json.gz"
    fw = forward_table(analyse_trace(load_trace(path), status["range_name"], expect_gpu=True), "naive", STUDY)
    row = summary_row(status, fw, str(path))
    return {**row, "repeat": k, "started_at": status.get("capture_started_at") or status.get("started_at")}


def _independent_ms(k: int) -> float:
    import gzip

    with gzip.open(EXAMPLE / "captures" / STUDY / "naive" / f"r{k}" / "trace.json.gz", "rt") as fh:
        forwards = independent_forwards(json.load(fh))
    return statistics.median(f["device_us"] for f in forwards) / 1e3


@pytest.mark.parametrize("damaged", ["naive_r2_dur_nan_all.json.gz", "naive_r2_dur_zero_softmax.json.gz"])
def test_a_repeat_with_impossible_times_is_named_never_silently_left_out(damaged):
    rows = [_row(1), _row(2, DAMAGED / damaged), _row(3)]
    out = combine_repeats(rows, expected=3)
    # the time is of the two sound repeats (their median: the mean of two), and the row says so
    ms = [_independent_ms(1), _independent_ms(3)]
    assert out["device_ms_per_forward"] == pytest.approx(statistics.median(ms), rel=1e-6)
    assert "repeat 2: no device_ms_per_forward" in out["repeats_note"] and "2 of 3 repeats" in out["repeats_note"]
    # the damaged repeat's trace note reaches the row (and so the trace_quality finding and page 1)
    assert out["trace_note"].startswith("repeat 2: ") and "impossible times" in out["trace_note"]
    assert out["bad_time_events"] > 0


def test_a_copied_repeat_is_counted_once_and_a_missing_round_is_named():
    r1, r3 = _row(1), _row(3)
    copy = {**r1, "repeat": 2}  # repeat 2's folder is a copy of repeat 1's: same capture start, same trace
    out = combine_repeats([r1, copy, r3], expected=3)
    assert "repeat 2 is a copy of repeat 1" in out["repeats_note"] and out["repeats_ok"] == 2
    assert out["device_ms_per_forward"] == pytest.approx(statistics.median([_independent_ms(1), _independent_ms(3)]), rel=1e-6)
    out = combine_repeats([r1, r3], expected=3)  # repeat 2 deleted
    assert "repeat 2 of 3 missing" in out["repeats_note"] and out["repeats"] == 2


def test_a_host_draw_its_timed_calls_contradict_is_named_not_averaged():
    base = {"variant": "v", "shape_key": "s", "status": "ok", "device": "cpu", "timed_ms_median": 0.056}
    rows = [{**base, "repeat": 1, "cpu_ms_per_forward": 0.064}, {**base, "repeat": 2, "cpu_ms_per_forward": 7.62},
            {**base, "repeat": 3, "cpu_ms_per_forward": 0.09}]
    out = combine_repeats(rows)
    assert out["cpu_ms_per_forward"] == pytest.approx((0.064 + 0.09) / 2)
    assert "repeat 2: cpu_ms_per_forward 7.62 ms against 0.056 ms" in out["repeats_note"]
    # host times: the floor and the highest capture, never a parametric interval below the floor
    assert (out["cpu_ms_run_lo"], out["cpu_ms_run_hi"]) == (0.064, 0.09)


def test_page_1_and_the_row_name_the_repeat_that_was_not_counted():
    import pandas as pd

    from attnprof.findings.brief import brief_notes

    out = combine_repeats([_row(1), _row(2, DAMAGED / "naive_r2_dur_nan_all.json.gz"), _row(3)], expected=3)
    summary = pd.DataFrame([out])
    shapes = [{"findings": [{"rule": "trace_quality", "kind": "warning"}]}]
    notes = " ".join(brief_notes(None, shapes, summary))
    assert "Not every repeat was counted in 1 row (naive at b8_h16_s1024_d64_bf16_causal: repeat 2: no device_ms" in notes
    assert "Every capture's trace was complete" not in notes and "1 captures have an incomplete trace" in notes
    # a row that did not run has no time to count repeats of: its status says why, not this note (the H200 example's
    # sdpa_math at seq_len 16384, out of memory in every repeat)
    oom = {**out, "variant": "sdpa_math", "status": "out_of_memory", "repeats_note": "repeat 1 out_of_memory: CUDA out of memory"}
    notes = " ".join(brief_notes(None, shapes, pd.DataFrame([out, oom])))
    assert "Not every repeat was counted in 1 row (naive at" in notes and "sdpa_math" not in notes
    template = (ROOT / "report" / "report.html.j2").read_text()
    assert "repeats: {{ r.repeats_note }}" in template


def test_the_pool_counts_what_the_row_counts_a_copy_once():
    """repeat_noise takes the repeats combine_repeats counts: a copied repeat (same started_at) would add a zero
    deviation and narrow the interval; it enters once. Two cells are too few for a prior (stats.MIN_PRIOR_ROWS), so
    each keeps its own variance: expected, the sample variance of the cell's three distinct repeats by numpy."""
    import numpy as np

    from attnprof.analysis.tables import repeat_noise

    def rows(shape, values, copy=False):
        out = [{"variant": "v", "shape_key": shape, "status": "ok", "repeat": k + 1, "started_at": 100.0 * k,
                "device_ms_per_forward": m} for k, m in enumerate(values)]
        return out + ([{**out[0], "repeat": len(out) + 1}] if copy else [])

    a, b = [1.0, 1.02, 0.99], [2.0, 2.06, 1.97]
    noise = repeat_noise({("v", "s1"): rows("s1", a, copy=True), ("v", "s2"): rows("s2", b)})
    got = noise[("v", "s1")]["device_ms_per_forward"]
    assert got.df == 2 and got.sd == pytest.approx(np.std(np.log(a), ddof=1), rel=1e-12)


def test_a_row_that_did_not_run_says_how_each_repeat_ended_once():
    """A row whose repeats all ran out of memory (the H200 example's sdpa_math at seq_len 16384) carries PyTorch's
    reason once, in its own reason; its repeats note says how the repeats ended, never the reason three times more
    (a CPU report printed each unsupported cell's reason four times, cut mid-sentence). Mixed ends are each named."""
    reason = "OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 GiB. GPU 0 has a total capacity of 139.80 GiB"
    base = {"variant": "sdpa_math", "shape_key": "s16384", "status": "out_of_memory", "reason": reason}
    out = combine_repeats([{**base, "repeat": k, "started_at": k} for k in (1, 2, 3)], expected=3)
    assert out["reason"] == reason and out["repeats_note"] == "all 3 repeats out_of_memory"
    mixed = combine_repeats([{**base, "repeat": 1, "started_at": 1, "status": "failed"},
                             {**base, "repeat": 2, "started_at": 2, "status": "ok"}], expected=3)
    assert mixed["repeats_note"] == "repeat 1 failed; repeat 2 ok; repeat 3 of 3 missing (no capture record): not counted"
