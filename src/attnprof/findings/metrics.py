"""Metrics: the numbers the study's expectations are checked against, by name.

:data:`METRICS` is the one list of metric names: each ``metric`` in config/expectations.yaml must
be one of its keys (attnprof.findings.expectations checks this when the file is loaded). A metric
takes the shape's :class:`RunData` and the expectation's variants (the first is the one measured)
and returns a reference (attnprof.findings.refs) whose ``value`` is compared with ``expected``.
"""

from __future__ import annotations

from attnprof.findings.data import RunData
from attnprof.findings.kernel_names import FP32_GEMM, MASK_KERNEL, matches
from attnprof.findings.ranking import rank
from attnprof.findings.refs import derived, ref_kernel, ref_op, ref_summary


def metric_kernels_plus_memcpy(d, vs):
    """Kernels plus memcpys per forward (summary.csv): what the study counted as kernels (no memsets)."""
    a, b = ref_summary(d, vs[0], "kernels_per_forward"), ref_summary(d, vs[0], "memcpy_per_forward")
    return derived("sum", [a, b])


def metric_memcpy(d, vs):
    """Memcpys per forward (summary.csv ``memcpy_per_forward``)."""
    return ref_summary(d, vs[0], "memcpy_per_forward")


def _launches(d: RunData, variant: str, pattern) -> dict:
    """Launches per forward of ``variant``'s kernels whose kernel_label matches ``pattern``: the sum of their
    kernels.csv ``calls_per_forward``, 0 when none."""
    k = d.kernels_of(variant)
    refs = [ref_kernel(d, variant, n, "calls_per_forward") for n in k[matches(k, pattern)]["kernel"]]
    return derived("sum", refs)


def metric_fp32_gemms(d, vs):
    """FP32 GEMM kernel launches per forward (kernels named by :data:`FP32_GEMM`; 0 when none)."""
    return _launches(d, vs[0], FP32_GEMM)


def metric_mask_kernels(d, vs):
    """Causal-mask kernel launches per forward (kernels named by :data:`MASK_KERNEL`; 0 when none)."""
    return _launches(d, vs[0], MASK_KERNEL)


def metric_safe_softmax(d, vs):
    """aten::_safe_softmax calls per forward (ops.csv; 0 when absent)."""
    return ref_op(d, vs[0], "aten::_safe_softmax")


def _spread(d, low: dict, high: dict) -> dict | None:
    """A metric's ``spread``: its lowest and highest value over the spreads of its inputs (references or
    formulas): their between-run intervals when the run has repeats, else their per-forward min-max ranges
    (RunData.spread_columns), named in ``ranges`` (RunData.spread_words); None where either has no value."""
    if None in (low["value"], high["value"]):
        return None
    return {"low": low, "high": high, "ranges": d.spread_words()["ranges"]}


def metric_device_ratio(d, vs):
    """Time per forward of ``vs[0]`` over ``vs[1]`` (no unit): trace device ms on a GPU, host ms
    on a CPU; spread: min(vs[0]) / max(vs[1]) to max(vs[0]) / min(vs[1]) over the profiled forwards."""
    col, lo, hi, _ = d.time_columns()
    out = derived("ratio", [ref_summary(d, vs[0], col, "ms"), ref_summary(d, vs[1], col, "ms")])
    out["spread"] = _spread(d, derived("ratio", [ref_summary(d, vs[0], lo, "ms"), ref_summary(d, vs[1], hi, "ms")]),
                            derived("ratio", [ref_summary(d, vs[0], hi, "ms"), ref_summary(d, vs[1], lo, "ms")]))
    return out


def metric_fastest_fused(d, vs):
    """The variant of ``vs`` that ran with the least time per forward (median; device ms on a GPU, host ms on a CPU),
    by the one ranking rule (attnprof.findings.ranking.rank: no wrong result, no dispatcher). ``tied``: the variants
    whose interval overlaps the fastest one's (the fastest included), i.e. the ones this run cannot rank against it."""
    r = rank(d.summary, d.shape_key, among=list(vs))
    if len(r["order"]) < 2:  # nothing to rank against
        return {"value": None}
    lo, hi = r["low_column"], r["high_column"]
    ranked = [v for v in vs if v in r["order"]]  # in the expectation's order
    return {"value": r["order"][0], "unit": "", "formula": "argmin", "inputs": [ref_summary(d, v, r["column"], "ms") for v in ranked],
            "tied": [v for v in ranked if v in r["tied"]], "ranges": d.spread_words()["ranges"],
            "spread_inputs": [ref_summary(d, v, c, "ms") for v in ranked for c in (lo, hi)]}


def metric_main_occupancy(d, vs):
    """The profiler's estimated achieved occupancy of ``vs[0]``'s longest kernel, in %."""
    main = d.main_kernel(vs[0])
    return ref_kernel(d, vs[0], main["kernel"], "est_occupancy_pct", "%") if main is not None else {"value": None}


def metric_cpu_excess(d, vs):
    """CPU ms per forward of ``vs[0]`` minus the largest of the others that ran (ms, medians).
    spread: from low(vs[0]) minus the largest high of the others to high(vs[0]) minus the largest
    low of the others, low and high being the between-run interval (RunData.spread_columns; the min
    and max over the profiled forwards for a run with one repeat) (above 0 throughout: vs[0] costs more CPU than
    any other in every forward); None where an other variant's min or max is not recorded."""
    others = [v for v in vs[1:] if d.ok(v)]
    if not others:
        return {"value": None}

    def largest(col):
        return max((ref_summary(d, v, col, "ms") for v in others), key=lambda r: float("-inf") if r["value"] is None else r["value"])

    out = derived("difference", [ref_summary(d, vs[0], "cpu_ms_per_forward", "ms"), largest("cpu_ms_per_forward")], "ms")
    lo, hi = d.spread_columns("cpu_ms")  # the between-run interval with repeats, else min-max over the forwards
    if any(ref_summary(d, v, c)["value"] is None for v in others for c in (lo, hi)):
        out["spread"] = None  # an other variant without its range: the ends are unknown
        return out
    out["spread"] = _spread(d, derived("difference", [ref_summary(d, vs[0], lo, "ms"), largest(hi)], "ms"),
                            derived("difference", [ref_summary(d, vs[0], hi, "ms"), largest(lo)], "ms"))
    return out


def metric_kernels_saved(d, vs):
    """Kernels plus memcpys per forward of ``vs[1]`` minus those of ``vs[0]``: how many launches a
    variant saves against another (e.g. torch.compile's fusion against the naive path)."""
    return derived("difference", [metric_kernels_plus_memcpy(d, vs[1:]), metric_kernels_plus_memcpy(d, vs[:1])])


#: The metric whose expected values are the study's kernel counts per forward (the report's "study" column).
KERNEL_COUNT = "kernels_plus_memcpy"

#: Metric name (config/expectations.yaml ``metric``) -> the function that measures it.
METRICS = {
    KERNEL_COUNT: metric_kernels_plus_memcpy,
    "memcpy_per_forward": metric_memcpy,
    "fp32_gemms_per_forward": metric_fp32_gemms,
    "mask_kernels_per_forward": metric_mask_kernels,
    "safe_softmax_per_forward": metric_safe_softmax,
    "device_time_ratio": metric_device_ratio,
    "fastest_fused": metric_fastest_fused,
    "main_kernel_occupancy_pct": metric_main_occupancy,
    "cpu_ms_excess_over_others": metric_cpu_excess,
    "kernels_saved": metric_kernels_saved,
}
