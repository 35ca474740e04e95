"""The study's expectations (config/expectations.yaml) checked against one shape's data.

Each expectation names a metric (:data:`attnprof.findings.metrics.METRICS`), the value the study
saw (``expected``, in the metric's unit) and how to compare (``compare``: eq, approx: |obs/exp - 1|
<= tolerance, within: |obs - exp| <= tolerance, gt: obs > exp), and a time or a ranking of times
must do so outside the spread of the profiled forwards (:func:`verdict`). Source of the claims: the file's
``source`` (Hugging Face, "Profiling in PyTorch (Part 3)") on its ``hardware``.
:func:`load_expectations` reads the file and refuses names nothing here defines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

from attnprof.findings.data import RunData
from attnprof.findings.metrics import METRICS
from attnprof.findings.rules import RULE_NAMES

#: The metric whose value is a variant's name: the fastest of the expectation's variants.
RANKING = "fastest_fused"

#: compare -> whether observed ``o`` agrees with expected ``e`` within tolerance ``t`` (the one list of comparisons).
COMPARES: dict[str, Callable] = {
    "eq": lambda o, e, t: o == e,
    "approx": lambda o, e, t: abs(o / e - 1) <= t,  # t: a fraction of e
    "within": lambda o, e, t: abs(o - e) <= t,  # t: in e's unit
    "gt": lambda o, e, t: o > e,
}
#: The comparisons that need a ``tolerance``.
TOLERANT = ("approx", "within")


def _compare(obs, exp, how: str, tol: float | None) -> bool:
    if how not in COMPARES:
        raise ValueError(f"unknown compare {how!r}")
    return COMPARES[how](obs, exp, tol)


#: The verdict where the observed value's spread over the profiled forwards reaches both sides of
#: what the claim needs: this run can neither confirm nor refute it.
WITHIN_NOISE = "within noise"


def verdict(observed: dict, expected, how: str, tol: float | None) -> tuple[str, str]:
    """(verdict, why) of one expectation: 'same', 'different' or :data:`WITHIN_NOISE`.

    A metric with a ``spread`` (its lowest and highest value over the per-forward min-max
    ranges of its inputs) holds only when the claim holds at both ends, and deviates only when
    it fails at both ends on the same side; the comparisons are intervals (gt, approx, within),
    so the ends decide. A ranking (``tied``: the variants whose range overlaps the fastest's)
    holds only when the expected variant is fastest and tied with none. Other metrics (counts)
    compare their value alone. why: '' or the words for a verdict within noise."""
    spread, tied = observed.get("spread"), observed.get("tied")
    ends = how in ("gt", "approx", "within")  # an interval comparison: the ends of a spread decide
    if "spread" in observed and spread is None and ends:
        return WITHIN_NOISE, (f"observed {observed['value']:.4g}, but the per-forward min-max range of its inputs is not "
                              "recorded, so this run cannot tell it from noise")
    if tied is not None and expected in tied and len(tied) > 1:
        return WITHIN_NOISE, (f"{', '.join(tied)}: their {observed.get('ranges', 'per-forward ranges')} overlap (or one is not recorded), "
                              "so this run cannot rank them")
    if spread and ends:
        return _at_the_ends(observed, expected, how, tol)
    return ("same" if _compare(observed["value"], expected, how, tol) else "different"), ""


def _at_the_ends(observed: dict, expected, how: str, tol: float | None) -> tuple[str, str]:
    """:func:`verdict` of a metric with a spread: the claim at both ends of it."""
    spread = observed["spread"]
    lo, hi = spread["low"]["value"], spread["high"]["value"]
    at_lo, at_hi = _compare(lo, expected, how, tol), _compare(hi, expected, how, tol)
    straddles = how != "gt" and lo <= expected <= hi
    if at_lo == at_hi and (at_lo or not straddles):
        return ("same" if at_lo else "different"), ""
    names = [i.get("variant") for i in observed.get("inputs", []) if i.get("variant")]
    op = {"difference": " minus ", "ratio": " over "}.get(observed.get("formula"), ", ")
    of = f" ({op.join(names)})" if len(names) == 2 else ""
    how_ends = ("the range reaches both sides of the expected value" if at_lo == at_hi
                else "the claim holds at one end and not at the other")
    return WITHIN_NOISE, (f"observed {observed['value']:.4g}{of}, but {lo:.4g} to {hi:.4g} over the "
                          f"{spread.get('ranges', 'per-forward ranges')}: {how_ends}")


def expectation_problems(doc: dict, variants: Iterable[str] = ()) -> list[str]:
    """What is wrong with a parsed expectations file ``doc``, one line each ([] when nothing):
    an expectation whose ``metric`` is not in :data:`METRICS`, whose ``compare`` is not in
    :data:`COMPARES` (or needs a tolerance it lacks), whose ``explained_by`` names a rule no
    finding rule has (:data:`attnprof.findings.rules.RULE_NAMES`), or whose ``variants`` are
    neither built in (:data:`attnprof.model.variants.VARIANTS`) nor in ``variants`` (a run's own)."""
    from attnprof.model.variants import VARIANTS

    known = set(VARIANTS) | set(variants)
    return [p for i, e in enumerate(doc.get("expectations") or []) for p in _problems_of(e, f"expectation {e.get('id', i)!r}", known)]


def _problems_of(e: dict, where: str, known: set[str]) -> list[str]:
    """What is wrong with one expectation ``e`` (:func:`expectation_problems`); ``known``: the variants it may name."""
    problems = []
    if e.get("metric") not in METRICS:
        problems.append(f"{where} names metric {e.get('metric')!r}, which attnprof.findings.METRICS does not define "
                        f"(known: {', '.join(METRICS)})")
    problems += _compare_problems(e, where) + _variant_problems(e, where, known)
    rules = [r for r in e.get("explained_by") or [] if r not in RULE_NAMES]
    if rules:
        problems.append(f"{where} is explained_by rules {rules}, which no finding rule has (known: {', '.join(RULE_NAMES)})")
    return problems


def _variant_problems(e: dict, where: str, known: set[str]) -> list[str]:
    """An expectation that names no variants, variants not ``known``, or a ranking whose expected is none of them."""
    vs = e.get("variants") or []
    problems = [f"{where}: expected {e.get('expected')!r} is not one of its variants {e.get('variants')}"
                ] if e.get("metric") == RANKING and e.get("expected") not in vs else []
    if not vs:
        problems.append(f"{where} names no variants")
    unknown = [v for v in vs if v not in known]
    if unknown:
        problems.append(f"{where} names variants {unknown}, which are neither built in nor in this run")
    return problems


def _compare_problems(e: dict, where: str) -> list[str]:
    """An expectation's ``compare`` that is unknown, lacks the tolerance it needs, or is relative to 0."""
    how = e.get("compare")
    if how not in COMPARES:
        return [f"{where} names compare {how!r} (known: {', '.join(COMPARES)})"]
    problems = []
    if how in TOLERANT and e.get("tolerance") is None:
        problems.append(f"{where}: compare {how!r} needs a tolerance")
    elif how in TOLERANT and not (isinstance(e["tolerance"], int | float) and e["tolerance"] >= 0):
        problems.append(f"{where}: tolerance {e['tolerance']!r} is not a number >= 0")
    if how == "approx" and e.get("expected") == 0:
        problems.append(f"{where}: compare 'approx' is relative to expected, which is 0 (use 'within')")
    return problems


def load_expectations(path, variants: Iterable[str] = ()) -> dict:
    """config/expectations.yaml at ``path``, parsed and checked (:func:`expectation_problems`;
    ``variants``: variants of the run besides the built-in ones). Raises ValueError naming the
    file and every unknown name, so that a typo is an error instead of a check that never runs."""
    doc = yaml.safe_load(Path(path).read_text())
    problems = expectation_problems(doc, variants)
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return doc


def check_expectations(d: RunData, expectations: dict, findings: list[dict]) -> list[dict]:
    """Compare each expectation with this shape's data. verdict: 'same', 'different',
    :data:`WITHIN_NOISE` (see :func:`verdict`), or 'not measured' (a variant did not run, or a
    CPU run for GPU-only claims); an expectation whose
    measured variant is not in this run at all is left out. An expectation's own ``source`` and
    ``hardware`` replace the file's (claims from other documents than the study). Each check
    carries the observed reference and the statements of the findings that explain it."""
    # not a variant of this run (config/beyond.yaml's are optional): no row at all
    return [_check(d, e, expectations, findings) for e in expectations["expectations"] if d.row(e["variants"][0]) is not None]


def _check(d: RunData, e: dict, expectations: dict, findings: list[dict]) -> dict:
    """One expectation checked at this shape (:func:`check_expectations`)."""
    check = {k: e.get(k) for k in ("id", "variants", "claim", "metric", "expected", "compare", "tolerance", "explained_by")}
    check.update(shape_key=d.shape_key, source=e.get("source") or expectations.get("source"),
                 hardware=e.get("hardware") or expectations.get("hardware"), own_source=bool(e.get("source")))
    why = _unmeasured(d, e)
    if why:
        return {**check, "observed": None, "verdict": "not measured", "explanation": why}
    return {**check, **_observed(d, e, findings)}


def _unmeasured(d: RunData, e: dict) -> str:
    """Why an expectation cannot be measured here ('' when it can): its measured variant (or, for a ranking, the
    variant it names) did not run, or a CPU run for a claim on GPU kernels."""
    vs = e["variants"]
    missing = [v for v in vs[:1] if not d.ok(v)]
    if e["metric"] == RANKING and e["expected"] in vs and not d.ok(e["expected"]):
        missing = missing or [e["expected"]]  # a ranking without the variant it names says nothing of it
    if missing:
        return f"{missing[0]} did not run"
    return "" if d.on_gpu else "CPU run: no GPU kernels to compare"


def _observed(d: RunData, e: dict, findings: list[dict]) -> dict:
    """An expectation's ``observed`` reference, ``verdict`` and ``explanation`` on a shape whose measured variant ran.
    A metric with no value (a ranking with fewer than two of its variants ranked, a variant of a ratio that is not in
    this result set: a run of some of the variants) is 'not measured' (:func:`_no_value`)."""
    vs = e["variants"]
    obs = METRICS[e["metric"]](d, vs)
    if obs.get("value") is None:
        return _no_value(d, vs, obs)
    out = {"observed": obs}
    out["verdict"], noise = verdict(obs, e["expected"], e["compare"], e.get("tolerance"))
    related = [f for f in findings if f["rule"] in e.get("explained_by", []) and set(f["variants"]) & set(vs)]
    out["explanation"] = "; ".join([noise] * bool(noise) + [f"{f['variants'][0]}: {f['headline']}" for f in related[:4]])
    out["explained_by_findings"] = [f["id"] for f in related]
    return out


def _no_value(d: RunData, vs: list[str], obs: dict) -> dict:
    """'not measured', saying which variants the result set lacks; the observed reference kept only where it names
    its cell or formula (findings.schema.json)."""
    absent = [v for v in vs if d.row(v) is None]
    why = f"{', '.join(absent)} not in this result set" if absent else "no value in this run's tables"
    return {"observed": obs if ("table" in obs or "formula" in obs) else None, "verdict": "not measured", "explanation": why}
