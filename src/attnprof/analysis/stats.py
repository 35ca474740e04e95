"""Statistics of repeated captures: the between-run interval of a time, and the change verdict of a ratio.

A *repeat* is one independent capture of a (variant, shape): its own capture process round, trace and
tables (config ``repeats``). Each repeat gives one number per time, the median over its profiled forwards
(the *repeat median*, ms). The forwards of one capture share the process, the CUDA context, the
allocations and the library plans, so their spread (the within-capture min-max or IQR) says nothing about
what a rerun draws again; only the spread *between* repeats does (pyperf, asv and Chromium's Pinpoint
repeat whole processes for the same reason).

Both functions work on the logarithms of the repeat medians: times are positive and their run-to-run
changes multiplicative (a clock or a plan a few per cent off), and a ratio's interval is then the exponent
of a difference's interval. With the 3-10 repeats that a report can afford, they use Student's t rather
than a bootstrap: a percentile bootstrap of 3 values cannot reach outside their min-max and undercovers.

* :func:`between_run_interval`: a *prediction* interval for the median a rerun with as many repeats will
  report (not a confidence interval of the mean: a reader wants to know what a rerun holds). The rerun
  states the median of its ``n`` repeat medians; around the mean of the ``n`` observed log values its
  variance is ``s**2 * (1/n + k/n)``, k = :data:`MEDIAN_VARIANCE` (a median of n varies about pi/2 times as
  much as a mean), so the interval is ``exp(mean ± t_{(1+c)/2, n-1} * s * sqrt((1 + k)/n))`` (the
  prediction interval for a future mean, Hahn & Meeker, *Statistical Intervals*, 2nd ed., 2017, sec. 4.6,
  with the future mean's variance replaced by the median's; Student's t assumes the log medians are
  roughly normal). tests/test_stats.py checks its coverage by simulation.
* :func:`compare_ratio`: Welch's t interval for the ratio of two result sets' geometric-mean repeat
  medians, and the verdict *changed* / *same* / *inconclusive* against a practical threshold: changed when
  the interval excludes 1 and the ratio lies beyond ``1 ± threshold``; same when the whole interval lies
  within ``1 ± threshold`` (an equivalence test: two one-sided tests at the same level, Schuirmann 1987);
  inconclusive otherwise, with the repeats per side that would decide it at the same spread.
* :func:`compare_paired`: the same verdict for two environments of one A/B run (config ``environments``), whose
  captures alternate round by round on one device: the geometric mean of the per-round ratios with a paired t
  interval, which takes out the drift the two share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats as _st

#: Confidence level of the between-run interval and of the change verdict's ratio interval.
CONFIDENCE = 0.95
#: Variance of the median of n normal values over the variance of their mean: pi/2 for large n (the median's
#: asymptotic relative efficiency is 2/pi; e.g. Kenney & Keeping, Mathematics of Statistics, 1962, sec. 13.13),
#: 1.35 at n = 3; the larger value keeps the rerun interval at or above its stated level for every n.
MEDIAN_VARIANCE = math.pi / 2
#: Most repeats :func:`compare_ratio` suggests; beyond this it says "more than".
MAX_REPEATS_SUGGESTED = 50


def _kept(values: Sequence[float | None]) -> list[float]:
    """The values that are times: None and NaN left out; ValueError for one <= 0."""
    out = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if v <= 0:
            raise ValueError(f"repeat medians must be positive times, got {v!r}")
        out.append(float(v))
    return out


def _logs(values: Sequence[float | None]) -> list[float]:
    return [math.log(v) for v in _kept(values)]


def between_run_interval(medians: Sequence[float | None], confidence: float = CONFIDENCE) -> dict:
    """Between-run statistics of one time from its repeat medians.

    medians: the median time per forward (any unit, > 0) of each repeat; None/NaN entries (a repeat
    without that time) are left out. Returns ``{"n", "center", "lo", "hi", "rel_sd"}``: n, the repeats
    counted; center, the median of the repeat medians (the number a report states); lo and hi, the
    prediction interval at ``confidence`` for the median a rerun with n repeats will state (module
    docstring; None when n < 2: one repeat has no between-run spread); rel_sd, the standard deviation of
    the log medians (about the relative standard deviation between repeats; None when n < 2).
    Raises ValueError for a median <= 0."""
    kept = sorted(_kept(medians))  # the stated center is one of the values (or the mean of two), never exp(log(x))
    logs = [math.log(v) for v in kept]
    n = len(logs)
    if n == 0:
        return {"n": 0, "center": None, "lo": None, "hi": None, "rel_sd": None}
    center = kept[n // 2] if n % 2 else (kept[n // 2 - 1] + kept[n // 2]) / 2
    if n < 2:
        return {"n": 1, "center": center, "lo": None, "hi": None, "rel_sd": None}
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    # the observed mean's variance s**2/n plus the rerun's median's, about pi/2 times a mean's (module docstring)
    half = float(_st.t.ppf((1 + confidence) / 2, n - 1)) * sd * math.sqrt((1 + MEDIAN_VARIANCE) / n)
    # the stated center must lie inside what is stated to hold
    return {"n": n, "center": center, "lo": min(math.exp(mean - half), center), "hi": max(math.exp(mean + half), center),
            "rel_sd": sd}


def compare_ratio(a: Sequence[float | None], b: Sequence[float | None], threshold: float,
                  confidence: float = CONFIDENCE) -> dict:
    """Change verdict for one time between a baseline ``a`` and ``b``, each the repeat medians of one
    result set (same unit, > 0; None/NaN left out).

    threshold: the practical threshold as a fraction (0.02: a change under 2 % is not a change worth
    reporting). Returns ``{"verdict", "ratio", "lo", "hi", "n_a", "n_b", "repeats_needed", "why"}``:
    ratio = geometric mean of b / geometric mean of a; lo, hi: its Welch t interval at ``confidence``;
    verdict "slower" or "faster" (changed: the interval excludes 1 and the ratio lies beyond
    ``1 ± threshold``), "same" (the interval lies inside ``[1/(1+threshold), 1+threshold]``) or
    "inconclusive"; repeats_needed (inconclusive only): repeats per side at which the same estimate and
    spread would decide, ``None`` when fewer than 2 repeats are on a side (no spread to scale) and
    ``MAX_REPEATS_SUGGESTED + 1`` for "more than that"; why: the verdict in words.
    Raises ValueError for a median <= 0 or a threshold < 0."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    la, lb = _logs(a), _logs(b)
    na, nb = len(la), len(lb)
    out = {"verdict": "inconclusive", "ratio": None, "lo": None, "hi": None, "n_a": na, "n_b": nb,
           "repeats_needed": None, "why": ""}
    if na == 0 or nb == 0:
        out["why"] = "no time on one side"
        return out
    ma, mb = sum(la) / na, sum(lb) / nb
    d = mb - ma
    out["ratio"] = math.exp(d)
    if na < 2 or nb < 2:
        out["why"] = (f"{min(na, nb)} repeat on one side: no between-run spread to judge a change against "
                      "(config repeats >= 2 on both)")
        return out
    va = sum((x - ma) ** 2 for x in la) / (na - 1)
    vb = sum((x - mb) ** 2 for x in lb) / (nb - 1)
    se2 = va / na + vb / nb
    if se2 > 0:  # Welch-Satterthwaite degrees of freedom
        df = se2 ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
        half = float(_st.t.ppf((1 + confidence) / 2, df)) * math.sqrt(se2)
    else:
        df, half = float(na + nb - 2), 0.0
    lo, hi = d - half, d + half
    out.update(lo=math.exp(lo), hi=math.exp(hi))
    _decide(out, d, lo, hi, half, max(na, nb), threshold, confidence)
    return out


def compare_paired(a: Sequence[float | None], b: Sequence[float | None], threshold: float,
                   confidence: float = CONFIDENCE) -> dict:
    """Change verdict for one time between two environments captured in one A/B run (config ``environments``),
    from the rounds' pairs: ``a[k]`` and ``b[k]`` are the repeat medians (same unit, > 0) of round k in the
    baseline and the other environment, captured back to back on one device (ABBA order). A round with None/NaN
    on either side is left out whole. ValueError when ``a`` and ``b`` differ in length, for a median <= 0 or a
    threshold < 0.

    The pairing takes out what the two environments' captures of one round share -- the drift of clocks, load
    and temperature over the run -- which the unpaired :func:`compare_ratio` counts as noise: on the per-round
    log ratios ``d_k = ln b_k - ln a_k``, the ratio is ``exp(mean d)`` (the geometric mean of the per-round
    ratios) with the paired Student t interval ``exp(mean d ± t_{(1+c)/2, n-1} s_d / sqrt(n))``
    (scipy.stats.ttest_1samp(d).confidence_interval; e.g. Montgomery, Design and Analysis of Experiments, 8th
    ed., 2013, sec. 2.5.1). The verdict and the other keys are :func:`compare_ratio`'s, with the same thresholds
    (``n_a`` = ``n_b`` = the rounds paired; repeats_needed: rounds), plus ``paired`` True."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if len(a) != len(b):
        raise ValueError(f"paired repeat medians need one value per round on each side, got {len(a)} and {len(b)}")
    pairs = [(x, y) for x, y in zip(a, b) if _kept([x]) and _kept([y])]
    d = [math.log(y) - math.log(x) for x, y in pairs]
    n = len(d)
    out = {"verdict": "inconclusive", "ratio": None, "lo": None, "hi": None, "n_a": n, "n_b": n,
           "repeats_needed": None, "why": "", "paired": True}
    if n == 0:
        out["why"] = "no round with a time on both sides"
        return out
    mean = sum(d) / n
    out["ratio"] = math.exp(mean)
    if n < 2:
        out["why"] = "1 paired round: no spread between rounds to judge a change against (config repeats >= 2)"
        return out
    if max(d) - min(d) > 1e-12:  # below: the same ratio in every round up to rounding
        lo, hi = _st.ttest_1samp(d, 0.0).confidence_interval(confidence)
        lo, hi = float(lo), float(hi)
    else:  # every round gave the same ratio: no spread (scipy's interval would be NaN)
        lo = hi = mean
    out.update(lo=math.exp(lo), hi=math.exp(hi))
    _decide(out, mean, lo, hi, (hi - lo) / 2, n, threshold, confidence, "rounds")
    return out


def _decide(out: dict, d: float, lo: float, hi: float, half: float, n: int, threshold: float, confidence: float,
            unit: str = "repeats") -> None:
    """Fill ``out``'s verdict, why and repeats_needed from the log ratio ``d`` and its interval [lo, hi]
    (half-width ``half``, from ``n`` repeats or rounds per side): :func:`compare_ratio`'s rule."""
    theta = math.log1p(threshold)
    pct = f"{100 * threshold:g} %"
    if -theta <= lo and hi <= theta:
        out.update(verdict="same", why=f"the {confidence:.0%} interval lies within ±{pct}")
    elif (lo > 0 or hi < 0) and abs(d) >= theta:
        out.update(verdict="slower" if d > 0 else "faster",
                   why=f"the {confidence:.0%} interval excludes 1 and the change is beyond ±{pct}")
    else:
        # the half-width shrinks about as 1/sqrt(n): the n at which it would fit the decision's margin
        margin = abs(d) if abs(d) >= theta else theta - abs(d)
        need = MAX_REPEATS_SUGGESTED + 1 if margin <= 0 else math.ceil(n * (half / margin) ** 2)
        out.update(repeats_needed=min(max(need, n + 1), MAX_REPEATS_SUGGESTED + 1),
                   why=(f"the {confidence:.0%} interval ({out['lo']:.3f}-{out['hi']:.3f}) neither excludes 1 beyond "
                        f"±{pct} nor lies within it" + ("" if unit == "repeats" else f" (paired over {n} {unit})")))


def detectable_change(rel_sd: float, n: int, threshold: float, power: float = 0.8, confidence: float = CONFIDENCE) -> float:
    """The smallest relative change (ratio - 1, a fraction) that :func:`compare_ratio` calls changed with
    probability ``power`` between two result sets of ``n`` repeats each whose log repeat medians have standard
    deviation ``rel_sd`` (the usual two-sample power approximation with Student's t, df 2n - 2:
    (t_{(1+c)/2} + t_{power}) * sd * sqrt(2/n)); never below ``threshold``. ValueError for n < 2."""
    if n < 2:
        raise ValueError(f"a detectable change needs at least 2 repeats, got {n}")
    df = 2 * n - 2
    d = (float(_st.t.ppf((1 + confidence) / 2, df)) + float(_st.t.ppf(power, df))) * rel_sd * math.sqrt(2 / n)
    return max(math.expm1(d), threshold)
