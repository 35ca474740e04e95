"""Findings rules and expectation checks on the real H200 fixtures and on synthetic edge cases."""
import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from attnprof.analysis.tables import concat_tables
from attnprof.findings import (RunData, compute, decode_kernel_name, iter_numbers, load_run_data, lookup,
                               theoretical_occupancy)

ROOT = Path(__file__).resolve().parents[1]
EXPECTATIONS = yaml.safe_load((ROOT / "config" / "expectations.yaml").read_text())


@pytest.fixture(scope="module")
def result(h200_data):
    return compute(h200_data, EXPECTATIONS)


def _tables(h200):
    return {"summary.csv": h200["summary"], "kernels.csv": h200["kernels"],
            "launches.csv": concat_tables(h200["launches"]), "ops.csv": concat_tables(h200["ops"])}


def test_every_number_in_findings_matches_the_tables(h200, result):
    doc = {"shapes": [result]}
    tables = _tables(h200)
    numbers = list(iter_numbers(doc))
    assert len(numbers) > 50
    for ref in numbers:
        assert lookup(ref, tables) == pytest.approx(ref["value"]), ref


def test_statements_quote_the_numbers_they_carry(result):
    hidden = next(f for f in result["findings"] if f["rule"] == "hidden_copy" and f["variants"] == ["naive"])
    share = hidden["numbers"]["memcpy_share"]["value"]
    assert f"{share:.2g} %" in hidden["statement"]
    assert "aten::copy_" in hidden["statement"] and "removes it" in hidden["statement"]


def test_each_study_row_gets_a_verdict(result, h200_data):
    verdicts = {c["id"]: c["verdict"] for c in result["expectations"]}
    # the fixture run has the study's seven variants: config/beyond.yaml's rows are left out, not "not measured"
    ran = set(h200_data.summary["variant"])
    assert set(verdicts) == {e["id"] for e in EXPECTATIONS["expectations"] if e["variants"][0] in ran}
    assert {"compile-fuses", "flex-fused", "flex-vs-flash"}.isdisjoint(verdicts) and len(verdicts) == 16
    assert verdicts["naive-kernels"] == "same" and verdicts["inplace-no-memcpy"] == "same"
    assert verdicts["math-kernels"] == "same" and verdicts["math-fp32"] == "same"
    # on the H200 the cuDNN kernel (sm90, wgmma) beats FlashAttention-2 (sm80 code)
    fastest = next(c for c in result["expectations"] if c["id"] == "flash-fastest")
    assert fastest["verdict"] == "different" and fastest["observed"]["value"] == "sdpa_cudnn"
    assert fastest["explanation"]


def test_dispatch_names_the_backend_sdpa_auto_ran(result):
    dispatch = next(f for f in result["findings"] if f["rule"] == "dispatch")
    assert dispatch["variants"] == ["sdpa_auto", "sdpa_cudnn"]
    assert "cudnn" in dispatch["headline"]


def test_driver_api_launch_zero_occupancy_is_flagged_as_artefact(result):
    occ = {f["variants"][0]: f for f in result["findings"] if f["rule"] == "occupancy"}
    assert occ["sdpa_cudnn"]["kind"] == "artefact" and "cuLaunchKernelEx" in occ["sdpa_cudnn"]["statement"]
    assert occ["sdpa_flash"]["kind"] == "observation" and "12.5 %" in occ["sdpa_flash"]["statement"]


def test_precision_and_mask_rules_fire_on_the_math_path(result):
    rules = {(f["rule"], f["variants"][0]) for f in result["findings"]}
    assert ("precision", "sdpa_math") in rules and ("mask", "sdpa_math") in rules and ("extra_ops", "sdpa_math") in rules
    extra = next(f for f in result["findings"] if f["rule"] == "extra_ops")
    assert "aten::_safe_softmax" in extra["numbers"]


def test_theoretical_occupancy_matches_the_study_arithmetic(h200):
    # flash: 255 registers x 128 threads -> 2 blocks x 4 warps of 64 = 12.5 %
    assert theoretical_occupancy(255, 128, 49152, h200["props"]) == pytest.approx(0.125)
    assert theoretical_occupancy(255, 128, 49152, {}) is None


def test_decode_cudnn_and_cutlass_names():
    info = decode_kernel_name("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0")
    assert info["arch"] == "sm90" and info["mma"] == "wgmma" and info["tile"] == "64x128x64" and "cuDNN" in info["library"]
    info = decode_kernel_name("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)")
    assert info["arch"] == "sm80" and info["tile"] == "64x64" and info["dtype"] == "bf16"


def test_failed_variant_is_reported_and_not_measured(h200):
    summary = h200["summary"].copy()
    i = summary.index[summary["variant"] == "sdpa_flash"][0]
    summary.loc[i, ["status", "reason", "kernels_per_forward", "device_ms_per_forward", "cpu_ms_per_forward"]] = [
        "out_of_memory", "OutOfMemoryError: Tried to allocate 64.00 GiB", None, None, None]
    kernels = h200["kernels"][h200["kernels"]["variant"] != "sdpa_flash"]
    statuses = copy.deepcopy(h200["statuses"])
    data = load_run_data(summary["shape_key"][0], summary, kernels, h200["launches"], h200["ops"], list(statuses.values()), h200["devices"])
    out = compute(data, EXPECTATIONS)
    status = [f for f in out["findings"] if f["rule"] == "status"]
    # an out-of-memory point is data (a gap in a sweep), not a failure of the run
    assert len(status) == 1 and "64.00 GiB" in status[0]["statement"] and status[0]["kind"] == "observation"
    verdicts = {c["id"]: c["verdict"] for c in out["expectations"]}
    assert verdicts["flash-fused"] == "not measured" and verdicts["flash-occupancy"] == "not measured"
    assert verdicts["naive-kernels"] == "same"


def test_cpu_run_without_cuda_events_gives_no_gpu_verdicts():
    summary = pd.DataFrame([{"variant": "naive", "shape_key": "b1_h2_s64_d32_fp32_causal", "status": "ok", "device": "cpu",
                             "dtype": "fp32", "kernels_per_forward": None, "memcpy_per_forward": None,
                             "device_ms_per_forward": None, "cpu_ms_per_forward": 0.5, "cpu_ms_min": 0.45, "cpu_ms_max": 0.6,
                             "timed_ms_median": 0.4, "timed_ms_min": 0.38, "timed_ms_max": 0.5, "graph_ms_median": None,
                             "rel_error": 1e-7, "rel_error_ok": True, "reason": ""}])
    data = RunData("b1_h2_s64_d32_fp32_causal", summary, pd.DataFrame(columns=["variant", "kernel", "category", "calls_per_forward"]),
                   pd.DataFrame(columns=["variant", "api"]), pd.DataFrame(columns=["variant", "op"]), {}, {})
    cpu_exp = dict(EXPECTATIONS, shape={"batch": 1, "heads": 2, "seq_len": 64, "head_dim": 32, "dtype": "fp32", "causal": True})
    out = compute(data, cpu_exp)
    assert out["expectations"] and all(c["verdict"] == "not measured" for c in out["expectations"])
    assert not [f for f in out["findings"] if f["rule"] in ("fusion", "occupancy", "hidden_copy")]


def test_findings_document_validates_against_its_schema(result):
    import json

    import jsonschema

    schema = json.loads((ROOT / "workflow" / "schemas" / "findings.schema.json").read_text())
    doc = json.loads(json.dumps({"schema_version": 1, "run": "t", "shapes": [result]}, default=str))
    jsonschema.validate(doc, schema)


def test_kernel_without_launch_metadata_is_said_not_guessed(h200):
    from attnprof.findings import rule_occupancy

    kernels = h200["kernels"].copy()
    sel = kernels["variant"] == "sdpa_flash"
    for col in ("est_occupancy_pct", "registers_per_thread", "shared_memory_bytes", "grid", "block"):
        kernels.loc[sel, col] = None
    data = load_run_data(h200["summary"]["shape_key"][0], h200["summary"], kernels, h200["launches"], h200["ops"],
                         list(h200["statuses"].values()), h200["devices"])
    flash = [f for f in rule_occupancy(data) if f["variants"] == ["sdpa_flash"]]
    assert len(flash) == 1 and "no occupancy estimate" in flash[0]["statement"]


def _cpu_rows(times: dict) -> RunData:
    """A CPU run's summary: variant -> (median, min, max host ms, independent timing median)."""
    rows = [{"variant": v, "shape_key": "s", "status": "ok", "device": "cpu", "dtype": "fp32", "kernels_per_forward": None,
             "memcpy_per_forward": None, "device_ms_per_forward": None, "cpu_ms_per_forward": med, "cpu_ms_min": lo,
             "cpu_ms_max": hi, "timed_ms_median": timed, "timed_ms_min": timed, "timed_ms_max": timed, "rel_error": 1e-7,
             "rel_error_ok": True, "reason": "", "graph_ms_median": None}
            for v, (med, lo, hi, timed) in times.items()]
    return RunData("s", pd.DataFrame(rows), pd.DataFrame(columns=["variant", "kernel", "category", "calls_per_forward"]),
                   pd.DataFrame(columns=["variant", "api"]), pd.DataFrame(columns=["variant", "op"]), {}, [])


def test_fastest_is_named_only_outside_the_spread():
    from attnprof.findings import rule_speed

    # flash's median is lower, but its slowest forward (12) is slower than cudnn's fastest (9.5): a tie
    tie = [f for f in rule_speed(_cpu_rows({"sdpa_flash": (9.7, 9.3, 12.0, 9.2), "sdpa_cudnn": (10.1, 9.5, 10.4, 8.2)}))]
    assert tie[-1]["headline"] == "ties with sdpa_cudnn for fastest" and tie[-1]["kind"] == "warning"
    assert tie[-1]["ranking"]["tied"] == ["sdpa_flash", "sdpa_cudnn"] and not tie[-1]["ranking"]["clear"]
    # the same medians with narrow ranges: flash is fastest
    clear = rule_speed(_cpu_rows({"sdpa_flash": (9.7, 9.6, 9.8, 9.2), "sdpa_cudnn": (10.1, 10.0, 10.4, 10.2)}))
    assert clear[-1]["headline"] == "fastest variant" and clear[-1]["variants"] == ["sdpa_flash"]
    # and the other way round when cudnn's numbers are the lower ones
    flipped = rule_speed(_cpu_rows({"sdpa_flash": (10.1, 10.0, 10.4, 10.2), "sdpa_cudnn": (9.7, 9.6, 9.8, 9.2)}))
    assert flipped[-1]["variants"] == ["sdpa_cudnn"]


def test_a_dispatcher_and_a_wrong_result_are_never_ranked():
    from attnprof.findings import rule_fidelity, rule_speed

    # sdpa_auto (a dispatcher) and a wrong sdpa_math are the fastest by median and overlap flash: neither is ranked,
    # so flash is the fastest outside the spread; with them it would tie
    d = _cpu_rows({"sdpa_auto": (9.0, 8.9, 9.8, 9.0), "sdpa_math": (8.0, 7.9, 9.7, 8.0), "sdpa_flash": (9.7, 9.6, 9.8, 9.2),
                   "naive": (20.0, 19.0, 21.0, 20.0)})
    d.summary.loc[d.summary["variant"] == "sdpa_math", ["rel_error", "rel_error_ok"]] = [0.5, False]
    ranking = rule_speed(d)[-1]
    assert ranking["variants"] == ["sdpa_flash"] and ranking["headline"] == "fastest variant"
    assert ranking["ranking"]["order"] == ["sdpa_flash", "naive"]
    assert set(ranking["ranking"]["left_out"]) == {"sdpa_auto", "sdpa_math"}
    assert "wrong result" in ranking["ranking"]["left_out"]["sdpa_math"] and "sdpa_math (wrong result" in ranking["statement"]
    # no adjacent-pair ranking of the fidelity rule names either
    pairs = [f for f in rule_fidelity(d) if len(f["variants"]) == 2]
    assert all(not {"sdpa_auto", "sdpa_math"} & set(f["variants"]) for f in pairs)


def test_ratio_that_the_independent_timing_contradicts_is_not_a_finding():
    from attnprof.findings import rule_fidelity, rule_speed

    # the CPU report's case: 0.94x in the trace, 1.75x by perf_counter
    d = _cpu_rows({"sdpa_math": (26.0, 25.0, 27.0, 33.5), "naive_inplace": (27.7, 26.5, 29.0, 19.1)})
    ratio = rule_speed(d)[0]
    assert ratio["kind"] == "warning" and "disagree" in ratio["statement"] and ratio["headline"].endswith("(not robust)")
    assert ratio["numbers"]["ratio"]["value"] == pytest.approx(26.0 / 27.7)
    assert ratio["numbers"]["timed_ratio"]["value"] == pytest.approx(33.5 / 19.1)
    flips = [f for f in rule_fidelity(d) if f["kind"] == "artefact"]  # runs on CPU runs too
    assert len(flips) == 1 and "perf_counter medians order them the other way" in flips[0]["statement"]
    agree = rule_speed(_cpu_rows({"sdpa_math": (52.0, 50.0, 53.0, 50.0), "naive_inplace": (26.0, 25.0, 27.0, 26.0)}))[0]
    assert agree["kind"] == "observation" and agree["numbers"]["ratio"]["value"] == pytest.approx(2.0)
