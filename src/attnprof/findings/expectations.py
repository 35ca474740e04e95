"""The study's expectations (config/expectations.yaml) checked against one shape's data.

Each expectation names a metric (:data:`attnprof.findings.metrics.METRICS`), the value the study
saw (``expected``, in the metric's unit) and how to compare (``compare``: eq, approx: |obs/exp - 1|
<= tolerance, within: |obs - exp| <= tolerance, gt: obs > exp). Source of the claims: the file's
``source`` (Hugging Face, "Profiling in PyTorch (Part 3)") on its ``hardware``.
"""

from __future__ import annotations

from .data import RunData
from .metrics import METRICS


def _compare(obs, exp, how: str, tol: float | None) -> bool:
    if how == "eq":
        return obs == exp
    if how == "approx":
        return abs(obs / exp - 1) <= tol
    if how == "within":
        return abs(obs - exp) <= tol
    if how == "gt":
        return obs > exp
    raise ValueError(f"unknown compare {how!r}")


def check_expectations(d: RunData, expectations: dict, findings: list[dict]) -> list[dict]:
    """Compare each expectation with this shape's data. verdict: 'same', 'different', or
    'not measured' (a variant did not run, or a CPU run for GPU-only claims). Each check
    carries the observed reference and the statements of the findings that explain it."""
    checks = []
    for e in expectations["expectations"]:
        vs = e["variants"]
        check = {k: e.get(k) for k in ("id", "variants", "claim", "metric", "expected", "compare", "tolerance", "explained_by")}
        check.update(shape_key=d.shape_key, source=expectations.get("source"), hardware=expectations.get("hardware"))
        missing = [v for v in vs[:1] if not d.ok(v)]
        if missing or not d.on_gpu:
            why = f"{missing[0]} did not run" if missing else "CPU run: no GPU kernels to compare"
            check.update(observed=None, verdict="not measured", explanation=why)
            checks.append(check)
            continue
        obs = METRICS[e["metric"]](d, vs)
        check["observed"] = obs
        if obs.get("value") is None:
            check.update(verdict="not measured", explanation="no value in this run's tables")
        else:
            same = _compare(obs["value"], e["expected"], e["compare"], e.get("tolerance"))
            check["verdict"] = "same" if same else "different"
            related = [f for f in findings if f["rule"] in e.get("explained_by", []) and set(f["variants"]) & set(vs)]
            check["explanation"] = "; ".join(f"{f['variants'][0]}: {f['headline']}" for f in related[:4])
            check["explained_by_findings"] = [f["id"] for f in related]
        checks.append(check)
    return checks
