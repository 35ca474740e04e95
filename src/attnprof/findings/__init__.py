"""Findings: what each trace shows, computed from the run's tables, and the study's
expectations checked against them.

Every number a finding states is a *reference* (:mod:`.refs`): a dict with ``value`` and either
the cell it was read from or a ``formula`` over other references, so a test can prove that the
report states nothing the tables do not hold. The schema of findings.json is
``workflow/schemas/findings.schema.json``.

The package, by module:

- :mod:`.data`: one shape's tables (:class:`RunData`, :func:`load_run_data`) and the variants the rules single out;
- :mod:`.refs`: references to table cells and numbers derived from them (:func:`lookup`, :func:`iter_numbers`);
- :mod:`.kernel_names`: what a kernel's name says (class, fused-attention library, tile, arch);
- :mod:`.occupancy`: the CUDA Occupancy Calculator's arithmetic;
- :mod:`.rules`: the rules, one module per family (status, work, kernels, timing), in :data:`RULES`;
- :mod:`.metrics`: the numbers expectations are checked against (:data:`METRICS`);
- :mod:`.expectations`: config/expectations.yaml checked against a shape's data.

What the scripts, the tests and the docs use is importable from ``attnprof.findings`` itself; the rest from its module.
"""

from __future__ import annotations

from attnprof.findings.data import FUSED, PINNED, RunData, load_run_data
from attnprof.findings.expectations import check_expectations, load_expectations
from attnprof.findings.kernel_names import FP32_GEMM, GEMM, decode_kernel_name, kernel_class, kernel_group, matches
from attnprof.findings.metrics import (METRICS, metric_cpu_excess, metric_device_ratio, metric_fastest_fused, metric_kernels_plus_memcpy,
                                       metric_kernels_saved, metric_main_occupancy)
from attnprof.findings.occupancy import theoretical_occupancy
from attnprof.findings.refs import derived, iter_numbers, lookup
from attnprof.findings.rules import RULE_NAMES, RULES, rule_fidelity, rule_fusion, rule_occupancy, rule_speed, rule_trace_quality


def compute(d: RunData, expectations: dict | None = None) -> dict:
    """All findings for one shape, and the expectation checks when ``expectations`` (the
    parsed config/expectations.yaml) is given and its shape matches this one."""
    found = [f for rule in RULES for f in rule(d)]
    checks = []
    if expectations:
        from attnprof.model.variants import Shape

        shp = Shape(**expectations["shape"]).key
        if shp == d.shape_key:
            checks = check_expectations(d, expectations, found)
    return {"shape_key": d.shape_key, "findings": found, "expectations": checks}


__all__ = [
    "FP32_GEMM", "FUSED", "GEMM", "METRICS", "PINNED", "RULE_NAMES", "RunData", "compute", "decode_kernel_name", "derived", "iter_numbers",
    "kernel_class", "kernel_group", "load_expectations", "load_run_data", "lookup", "matches", "metric_cpu_excess", "metric_device_ratio",
    "metric_fastest_fused", "metric_kernels_plus_memcpy", "metric_kernels_saved", "metric_main_occupancy", "rule_fidelity", "rule_fusion",
    "rule_occupancy", "rule_speed", "rule_trace_quality", "theoretical_occupancy",
]
