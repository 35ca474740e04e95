"""Statistics of repeated captures: the noise model, the rerun interval of a time, and the verdict of a ratio.

A *repeat* is one independent capture of a (variant, shape), a *cell*: its own capture process round, trace and
tables (config ``repeats``). Each repeat gives one number per time, the median over its profiled forwards
(the *repeat median*, ms). The forwards of one capture share the process, the CUDA context, the allocations
and the library plans, so their spread says nothing about what a rerun draws again; only the spread *between*
repeats does (pyperf, asv and Chromium's Pinpoint repeat whole processes for the same reason).

Everything works on the logarithms of the repeat medians: times are positive and their run-to-run changes
multiplicative, and a ratio's interval is then the exponent of a difference's interval.

**The noise model** (:func:`pool_noise`). Three repeats give a cell's spread 2 degrees of freedom (t multiplier
4.30): too few to decide anything. The between-process variance of the log medians is therefore *pooled* over
the cells of one variant (its shapes, and in a compare both result sets): ``s_p**2 = sum (n_i - 1) s_i**2 /
sum (n_i - 1)`` with ``sum (n_i - 1)`` degrees of freedom (the pooled variance of one-way ANOVA). A cell whose own
variance is larger than the others' pool beyond chance (one-sided F test, :data:`HETEROGENEITY_ALPHA`; e.g. a
cell whose processes land in two modes) keeps its own variance and degrees of freedom.

**Which rerun.** The interval of a result set (:func:`between_run_interval`) is for a rerun *on the same machine
in the same sitting* (a sitting: one stretch of time on one machine). Between sittings a whole block of cells
moves together (clocks, the GPU drawn, temperature): measured on the H200, :data:`SITTING_SD`. A comparison of
result sets from different sittings (:func:`compare_ratio` with ``sitting_sd``) adds ``2 * sitting_sd**2`` to the
variance of the log ratio; the paired rounds of one A/B run (:func:`compare_paired`) share their sitting and
keep the within-sitting noise.

**The verdict** (:func:`judge`) answers "more than X?" for the practical threshold X (``threshold``; in logs
``theta = ln(1 + X)``): *slower*/*faster* "by more than X" when the whole 95 % interval of the log ratio lies
beyond ``±theta``; *same* "within X" when the 90 % interval lies inside ``[-theta, theta]`` (two one-sided tests
at 5 % each, Schuirmann 1987); otherwise *inconclusive* (undetermined), with the rounds per side at which the rule
would decide with :data:`POWER` (:func:`rounds_needed`). :func:`joint_control` controls the rows of one compare
jointly (Benjamini-Hochberg at 5 % on the rows' p values for "beyond X", scipy.stats.false_discovery_control) and
:func:`false_alarm_probability` gives each row's chance of a false "changed" if nothing changed, whose sum a
compare states.

**Host (CPU) times** are not given a parametric interval (:func:`host_range`): a capture's forwards are one draw of
the host's state, and a handful of draws spread over an order of magnitude. They are stated as the median over
captures, the floor (the lowest capture median) and the min-max range, whose distribution-free coverage of one
new capture is ``(n - 1)/(n + 1)`` (order statistics: the new draw is equally likely to take any of the n + 1
ranks).

docs/statistics.md states the rule's false-alarm rate and power, measured by simulating this exact code
(tests/test_stats.py).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize as _opt
from scipy import stats as _st

from attnprof.model.fmt import format_range

#: Confidence level of the rerun interval and of a ratio's interval.
CONFIDENCE = 0.95
#: Confidence level of the equivalence ("same within X") interval: two one-sided tests at 5 % each.
EQUIVALENCE_CONFIDENCE = 0.90
#: Power at which :func:`rounds_needed` and :func:`detectable_change` plan.
POWER = 0.8
#: Level of the one-sided F test at which a cell keeps its own, larger variance instead of the pool.
HETEROGENEITY_ALPHA = 0.01
#: Rate at which :func:`joint_control` keeps the false "changed" rows among a compare's rows (Benjamini-Hochberg).
FALSE_DISCOVERY_RATE = 0.05
#: Standard deviation of a sitting's shift of a log time (a sitting: one stretch of time on one machine). Calibrated
#: on the H200 from two A/As across sittings of one build (benchmarks/sittings.py, benchmarks/sittings_h200.json): the
#: method-of-moments estimates were 0.74 % and 0.24 %; the larger, rounded up, is used (docs/statistics.md).
SITTING_SD = 0.0075
#: Variance of the median of n normal values over the variance of their mean: pi/2 for large n (the median's
#: asymptotic relative efficiency is 2/pi; e.g. Kenney & Keeping, Mathematics of Statistics, 1962, sec. 13.13),
#: 1.35 at n = 3; the larger value keeps the rerun interval at or above its stated level for every n.
MEDIAN_VARIANCE = math.pi / 2
#: Most rounds :func:`rounds_needed` suggests; beyond this it says "more than".
MAX_REPEATS_SUGGESTED = 50
#: Words for the rerun a result set's interval is for.
SAME_SITTING = "same machine, same sitting"


@dataclass(frozen=True)
class Noise:
    """The between-process noise of one cell's log repeat medians: ``sd`` (standard deviation of the log
    medians, about the relative standard deviation between repeats), ``df`` (its degrees of freedom),
    ``cells`` (how many cells it was pooled over; 1 for a cell's own) and ``own`` (True when the cell kept its
    own variance because it is larger than the pool's: :func:`pool_noise`)."""

    sd: float
    df: float
    cells: int = 1
    own: bool = True


def _kept(values: Sequence[float | None]) -> list[float]:
    """The values that are times: None and NaN left out; ValueError for one <= 0 or infinite."""
    out = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if not v > 0 or math.isinf(v):
            raise ValueError(f"repeat medians must be positive, finite times, got {v!r}")
        out.append(float(v))
    return out


def _logs(values: Sequence[float | None]) -> list[float]:
    return [math.log(v) for v in _kept(values)]


def _spread(logs: Sequence[float]) -> tuple[float, int] | None:
    """(sample variance, degrees of freedom) of ``logs``; None for fewer than 2 values."""
    n = len(logs)
    if n < 2:
        return None
    mean = sum(logs) / n
    return sum((x - mean) ** 2 for x in logs) / (n - 1), n - 1


def _pool(spreads: Sequence[tuple[float, int]]) -> tuple[float, int] | None:
    """The pooled (variance, df) of ``spreads`` [(variance, df)]: the df-weighted mean variance; None when empty."""
    df = sum(d for _, d in spreads)
    return (sum(v * d for v, d in spreads) / df, df) if df else None


def _larger_than_pool(spread: tuple[float, int], rest: tuple[float, int] | None, alpha: float) -> bool:
    """True when ``spread``'s variance exceeds the pool ``rest`` beyond chance: one-sided F test at ``alpha``."""
    if rest is None:
        return False
    (v, d), (vr, dr) = spread, rest
    if vr == 0:
        return v > 0
    return float(_st.f.sf(v / vr, d, dr)) < alpha


def pool_noise(cells: Mapping[Hashable, Sequence[float | None]], alpha: float = HETEROGENEITY_ALPHA) -> dict:
    """The noise of each cell of one pool (the cells of one variant: its shapes, and in a compare both sides).

    cells: {key: the cell's repeat medians (any unit, > 0; None/NaN left out)}, or for a paired compare the
    per-round ratios. Returns {key: :class:`Noise` | None}: a cell whose variance exceeds the pool of the
    others beyond chance (one-sided F test at ``alpha``, scipy.stats.f) keeps its own (``own`` True); every
    other cell, one of a single repeat included, gets the pool of the cells not kept apart (module docstring).
    None for a cell with neither (no cell of the pool has 2 repeats). ValueError for a median <= 0."""
    spreads = {k: s for k, v in cells.items() if (s := _spread(_logs(v))) is not None}
    apart = {k for k, s in spreads.items()
             if _larger_than_pool(s, _pool([t for j, t in spreads.items() if j != k]), alpha)}
    pooled_from = [s for k, s in spreads.items() if k not in apart]
    pool = _pool(pooled_from)
    out = {}
    for k in cells:
        if k in apart:
            out[k] = Noise(math.sqrt(spreads[k][0]), spreads[k][1], 1, True)
        elif pool is not None:
            out[k] = Noise(math.sqrt(pool[0]), pool[1], len(pooled_from), len(pooled_from) == 1 and k in spreads)
        else:
            out[k] = None
    return out


def _t(q: float, df: float) -> float:
    return float(_st.t.ppf(q, df))


def between_run_interval(medians: Sequence[float | None], confidence: float = CONFIDENCE, noise: Noise | None = None) -> dict:
    """Between-run statistics of one time from its repeat medians: the interval a rerun's median will hold on the
    same machine in the same sitting (:data:`SAME_SITTING`).

    medians: the median time per forward (any unit, > 0) of each repeat; None/NaN entries (a repeat without that
    time) are left out. noise: the cell's :class:`Noise` from :func:`pool_noise` (default: its own repeats'
    spread). Returns ``{"n", "center", "lo", "hi", "rel_sd", "df"}``: n, the repeats counted; center, the median
    of the repeat medians (the number a report states); lo and hi, the prediction interval at ``confidence``
    for the median a rerun with n repeats will state: ``exp(mean ± t_{(1+c)/2, df} * sd * sqrt((1 + k)/n))``, k
    = :data:`MEDIAN_VARIANCE` (Hahn & Meeker, *Statistical Intervals*, 2nd ed., 2017, sec. 4.6, with the future
    mean's variance replaced by the median's), None without a spread; rel_sd and df: the noise's sd of the log
    medians and its degrees of freedom (None without). Raises ValueError for a median <= 0."""
    kept = sorted(_kept(medians))  # the stated center is one of the values (or the mean of two), never exp(log(x))
    logs = [math.log(v) for v in kept]
    n = len(logs)
    out = {"n": n, "center": None, "lo": None, "hi": None, "rel_sd": None, "df": None}
    if n == 0:
        return out
    out["center"] = kept[n // 2] if n % 2 else (kept[n // 2 - 1] + kept[n // 2]) / 2
    if noise is None:
        own = _spread(logs)
        noise = None if own is None else Noise(math.sqrt(own[0]), own[1])
    if noise is None:
        return out
    mean = sum(logs) / n
    half = _t((1 + confidence) / 2, noise.df) * noise.sd * math.sqrt((1 + MEDIAN_VARIANCE) / n)
    # the stated center must lie inside what is stated to hold
    out.update(lo=min(math.exp(mean - half), out["center"]), hi=max(math.exp(mean + half), out["center"]),
               rel_sd=noise.sd, df=noise.df)
    return out


def host_range(medians: Sequence[float | None]) -> dict:
    """Host (CPU) time of one cell over its captures, without a parametric interval (module docstring).

    medians: each capture's median host time per forward (any unit, > 0; None/NaN left out). Returns ``{"n",
    "center", "floor", "lo", "hi", "coverage"}``: center, the median over captures; floor = lo, the lowest
    capture median; hi, the highest; coverage, the chance that one new capture's median falls in [lo, hi],
    ``(n - 1)/(n + 1)`` for n i.i.d. draws of any continuous distribution (None below 2 captures)."""
    kept = sorted(_kept(medians))
    n = len(kept)
    if n == 0:
        return {"n": 0, "center": None, "floor": None, "lo": None, "hi": None, "coverage": None}
    center = kept[n // 2] if n % 2 else (kept[n // 2 - 1] + kept[n // 2]) / 2
    return {"n": n, "center": center, "floor": kept[0], "lo": kept[0] if n > 1 else None, "hi": kept[-1] if n > 1 else None,
            "coverage": (n - 1) / (n + 1) if n > 1 else None}


def false_alarm_probability(se: float, df: float, threshold: float, confidence: float = CONFIDENCE) -> float:
    """Chance that :func:`judge` calls a row slower or faster by more than ``threshold`` when nothing changed
    (log ratio 0), for a row whose log ratio has standard error ``se`` with ``df`` degrees of freedom: the
    statistic ``(d - theta)/se_hat`` is noncentral t with noncentrality ``-theta/se`` (scipy.stats.nct), and the
    rule fires when it exceeds ``t_{(1+c)/2, df}``; both directions. 0 for se = 0 and threshold > 0."""
    theta = math.log1p(threshold)
    if se <= 0:
        return 0.0 if theta > 0 else 1.0
    return 2 * float(_st.nct.sf(_t((1 + confidence) / 2, df), df, -theta / se))


def power_changed(change: float, se: float, df: float, threshold: float, confidence: float = CONFIDENCE) -> float:
    """Chance that :func:`judge` calls a true relative change ``change`` (ratio - 1, > 0 slower) "by more than
    ``threshold``", for a row of standard error ``se`` (log ratio) and ``df`` degrees of freedom: noncentral t
    as in :func:`false_alarm_probability`, noncentrality ``(|ln(1 + change)| - theta)/se``."""
    theta = math.log1p(threshold)
    d = abs(math.log1p(change))
    if se <= 0:
        return 1.0 if d > theta else 0.0
    return float(_st.nct.sf(_t((1 + confidence) / 2, df), df, (d - theta) / se))


def _level(level: float) -> str:
    """An interval's level as words: 0.95 -> '95%', 0.975 -> '97.5%'."""
    return f"{level:.0%}" if round(level * 100, 6).is_integer() else f"{level:.1%}"


def look_levels(confidence: float, looks: int) -> tuple[float, float]:
    """(interval level of "changed", of "same") at each of ``looks`` looks at one row (a sequential rule: rounds
    added where the first look left the row undetermined): the error rates ``1 - confidence`` and
    ``1 - EQUIVALENCE_CONFIDENCE`` split evenly over the looks (Bonferroni), so that a row's chance of a false
    verdict over all its looks stays at most the single look's (the union bound; e.g. Jennison & Turnbull, Group
    Sequential Methods, 2000, sec. 2.2, for sharper boundaries). One look: the levels themselves."""
    return 1 - (1 - confidence) / looks, 1 - (1 - EQUIVALENCE_CONFIDENCE) / looks


def judge(d: float, se: float, df: float, threshold: float, confidence: float = CONFIDENCE, looks: int = 1) -> dict:
    """The verdict on a log ratio ``d`` (b over a) of standard error ``se`` with ``df`` degrees of freedom against
    the practical threshold ``threshold`` (a fraction; module docstring), at one of ``looks`` looks
    (:func:`look_levels`). Returns ``{"verdict", "lo", "hi", "lo90", "hi90", "p", "false_alarm", "level", "why"}``:
    lo/hi the ratio's interval at the look's level of ``confidence`` (``level``), lo90/hi90 at its level of
    :data:`EQUIVALENCE_CONFIDENCE`; p the one-sided p value of "beyond X in the direction observed" doubled and
    times ``looks`` (the row's p for :func:`joint_control`; p < 1 - confidence exactly when the interval lies
    beyond X)."""
    confidence, equivalence = look_levels(confidence, looks)
    theta = math.log1p(threshold)
    pct = f"{100 * threshold:g} %"
    half = _t((1 + confidence) / 2, df) * se
    half90 = _t((1 + equivalence) / 2, df) * se
    out = {"lo": math.exp(d - half), "hi": math.exp(d + half), "lo90": math.exp(d - half90), "hi90": math.exp(d + half90),
           "false_alarm": false_alarm_probability(se, df, threshold, confidence), "level": confidence}
    if se > 0:
        out["p"] = min(1.0, 2 * looks * float(_st.t.sf((abs(d) - theta) / se, df)))
    else:
        out["p"] = 0.0 if abs(d) > theta else 1.0
    if d - half > theta or d + half < -theta:
        out.update(verdict="slower" if d > 0 else "faster",
                   why=f"{'slower' if d > 0 else 'faster'} by more than {pct}: the whole {_level(confidence)} interval lies beyond")
    elif -theta <= d - half90 and d + half90 <= theta:
        out.update(verdict="same", why=f"the same within {pct}: the {_level(equivalence)} interval lies inside")
    else:
        out.update(verdict="inconclusive",
                   why=f"undetermined: the {_level(confidence)} interval ({format_range(out['lo'], out['hi'], digits=4)}) neither lies "
                       f"beyond ±{pct} nor, at {_level(equivalence)}, inside it")
    return out


def _aim(d: float, threshold: float, confidence: float, looks: int = 1) -> tuple[float, float]:
    """What more rounds would aim at for a log ratio ``d``: (its distance from the threshold ``ln(1 + threshold)``,
    the interval level of the verdict it would reach at one of ``looks`` looks, :func:`look_levels`): the level of
    "changed" when ``|d|`` lies beyond the threshold, of "same" otherwise (:func:`judge`)."""
    theta = math.log1p(threshold)
    changed, same = look_levels(confidence, looks)
    return abs(abs(d) - theta), (changed if abs(d) > theta else same)


def rounds_needed(d: float, var_a: float, var_b: float, n: int, df: float, threshold: float, sitting_var: float = 0.0,
                  paired: bool = False, power: float = POWER, confidence: float = CONFIDENCE, looks: int = 1) -> int | None:
    """Rounds per side at which :func:`judge` decides an undetermined row with chance ``power``, if the log ratio
    is ``d`` and the log variances per round ``var_a``/``var_b`` (paired: ``var_a`` is the paired differences'
    and ``var_b`` is ignored) stay as estimated: the smallest m in n+1 .. :data:`MAX_REPEATS_SUGGESTED` whose
    standard error ``sqrt((var_a + var_b)/m + 2*sitting_var)`` (paired: ``sqrt(var_a/m)``) and degrees of
    freedom ``df + (m - n)`` (each added round adds one) give the rule that power, aiming at "changed" when
    ``|d|`` lies beyond ``ln(1 + threshold)`` and at "same" otherwise (noncentral t: scipy.stats.nct).
    ``MAX_REPEATS_SUGGESTED + 1`` ("more than that") when none does, among them when the sitting term alone is
    too wide; None when ``d`` is at the threshold itself (no number of rounds decides it). ``looks``: the levels
    of a look of a sequential rule (:func:`look_levels`)."""
    margin, level = _aim(d, threshold, confidence, looks)
    if margin == 0:
        return None
    m = np.arange(n + 1, MAX_REPEATS_SUGGESTED + 1)
    se = np.sqrt(var_a / m) if paired else np.sqrt((var_a + var_b) / m + 2 * sitting_var)
    if not se.all():
        return n + 1
    dfm = df + (m - n)
    crit = _st.t.ppf((1 + level) / 2, dfm)
    enough = np.flatnonzero(_st.nct.sf(crit, dfm, margin / se) >= power)
    return int(m[enough[0]]) if len(enough) else MAX_REPEATS_SUGGESTED + 1


def _welch(var_a: float, n_a: int, df_a: float, var_b: float, n_b: int, df_b: float, sitting_var: float) -> tuple[float, float]:
    """(standard error, Welch-Satterthwaite df) of a difference of two means of log medians, plus a known
    variance ``2*sitting_var`` (it adds no uncertainty of its own)."""
    ua, ub = var_a / n_a, var_b / n_b
    se2 = ua + ub + 2 * sitting_var
    denom = (ua ** 2 / df_a if df_a else 0.0) + (ub ** 2 / df_b if df_b else 0.0)
    # the known term adds no df of its own, but the estimate never gets more df than its two variances hold
    return math.sqrt(se2), (min(se2 ** 2 / denom, df_a + df_b) if denom > 0 else float(max(df_a + df_b, 1)))


def _own_noise(logs: list[float]) -> Noise | None:
    s = _spread(logs)
    return None if s is None else Noise(math.sqrt(s[0]), s[1])


def _result(n_a: int, n_b: int, **kw) -> dict:
    return {"verdict": "inconclusive", "ratio": None, "lo": None, "hi": None, "lo90": None, "hi90": None,
            "n_a": n_a, "n_b": n_b, "repeats_needed": None, "why": "", "se": None, "df": None, "p": None,
            "false_alarm": None, **kw}


def compare_ratio(a: Sequence[float | None], b: Sequence[float | None], threshold: float,
                  confidence: float = CONFIDENCE, noise_a: Noise | None = None, noise_b: Noise | None = None,
                  sitting_sd: float = 0.0) -> dict:
    """Verdict for one time between a baseline ``a`` and ``b``, each the repeat medians of one result set (same
    unit, > 0; None/NaN left out), captured in different processes and not paired round by round.

    threshold: the practical threshold as a fraction (0.02: a change under 2 % is not worth reporting).
    noise_a/noise_b: each side's :class:`Noise` (:func:`pool_noise`; default: its own repeats' spread).
    sitting_sd: the between-sitting sd added for result sets of different sittings (:data:`SITTING_SD`; 0 for
    one sitting). Returns ``{"verdict", "ratio", "lo", "hi", "lo90", "hi90", "n_a", "n_b", "repeats_needed",
    "why", "se", "df", "p", "false_alarm"}``: ratio = geometric mean of b / geometric mean of a; the rest from
    :func:`judge` with the Welch-Satterthwaite df; repeats_needed (undetermined only): :func:`rounds_needed`.
    Raises ValueError for a median <= 0 or a threshold < 0."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    la, lb = _logs(a), _logs(b)
    out = _result(len(la), len(lb))
    if not la or not lb:
        out["why"] = "no time on one side"
        return out
    d = sum(lb) / len(lb) - sum(la) / len(la)
    out["ratio"] = math.exp(d)
    noise_a, noise_b = noise_a or _own_noise(la), noise_b or _own_noise(lb)
    if noise_a is None or noise_b is None:
        out["why"] = (f"{min(len(la), len(lb))} repeat on one side: no between-run spread to judge a change against "
                      "(config repeats >= 2 on both)")
        return out
    va, vb, sv = noise_a.sd ** 2, noise_b.sd ** 2, sitting_sd ** 2
    if noise_a == noise_b and not noise_a.own:  # one pooled estimate serves both sides: its df once
        within = va * (1 / len(la) + 1 / len(lb))
        se = math.sqrt(within + 2 * sv)
        df = min(se ** 4 / (within ** 2 / noise_a.df), 2 * noise_a.df) if within > 0 else noise_a.df
    else:
        se, df = _welch(va, len(la), noise_a.df, vb, len(lb), noise_b.df, sv)
    out.update(judge(d, se, df, threshold, confidence), se=se, df=df)
    if out["verdict"] == "inconclusive":
        n = max(len(la), len(lb))
        out["repeats_needed"] = rounds_needed(d, va, vb, n, df, threshold, sv, confidence=confidence)
        if out["repeats_needed"] and out["repeats_needed"] > MAX_REPEATS_SUGGESTED and sitting_bound(d, threshold, sv,
                                                                                                    confidence):
            out["why"] = (f"no number of rounds decides across sittings: the sitting term alone "
                          f"(±{2 * math.sqrt(2 * sv):.1%} at two sd) is too wide for a {abs(math.expm1(d)):.1%} change "
                          f"against ±{threshold:.0%}; a paired A/B (config environments) would decide")
    return out


def sitting_bound(d: float, threshold: float, sitting_var: float, confidence: float = CONFIDENCE,
                  power: float = POWER) -> bool:
    """True when no number of rounds decides a row of log ratio ``d`` across sittings: with the within-sitting
    noise gone (infinitely many rounds, df -> inf) the standard error is the sitting term's ``sqrt(2*sitting_var)``,
    and :func:`judge` would still reach ``power`` neither for "changed" nor for "same" (normal limit of the
    noncentral t: scipy.stats.norm)."""
    if sitting_var <= 0:
        return False
    margin, level = _aim(d, threshold, confidence)
    z = _st.norm.ppf((1 + level) / 2)
    return bool(_st.norm.sf(z - margin / math.sqrt(2 * sitting_var)) < power)


def compare_paired(a: Sequence[float | None], b: Sequence[float | None], threshold: float,
                   confidence: float = CONFIDENCE, noise: Noise | None = None, looks: int = 1) -> dict:
    """Verdict for one time between two environments captured in one A/B run (config ``environments``), from the
    rounds' pairs: ``a[k]`` and ``b[k]`` are the repeat medians (same unit, > 0) of round k in the baseline and
    the other environment, captured back to back on one device (ABBA order). A round with None/NaN on either
    side is left out whole. noise: the :class:`Noise` of the per-round log ratios (:func:`pool_noise` over the
    cells' ratios ``b_k/a_k``; default: this row's own). ValueError when ``a`` and ``b`` differ in length, for a
    median <= 0 or a threshold < 0.

    The pairing takes out what the two environments' captures of one round share -- the drift of clocks, load
    and temperature over the run, the sitting -- which the unpaired :func:`compare_ratio` counts as noise: on the
    per-round log ratios ``d_k = ln b_k - ln a_k``, the ratio is ``exp(mean d)`` with standard error ``s_d/sqrt(n)``
    (the paired t; e.g. Montgomery, Design and Analysis of Experiments, 8th ed., 2013, sec. 2.5.1). The verdict
    and keys are :func:`compare_ratio`'s (``n_a`` = ``n_b`` = the rounds paired; repeats_needed: rounds), plus
    ``paired`` True. ``looks``: judged at one look of a sequential rule of that many (:func:`look_levels`;
    attnprof.analysis.top_up)."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if len(a) != len(b):
        raise ValueError(f"paired repeat medians need one value per round on each side, got {len(a)} and {len(b)}")
    d = [math.log(r) for r in paired_ratios(a, b)]
    n = len(d)
    out = _result(n, n, paired=True)
    if n == 0:
        out["why"] = "no round with a time on both sides"
        return out
    mean = sum(d) / n
    out["ratio"] = math.exp(mean)
    noise = noise or _own_noise(d)
    if noise is None:
        out["why"] = "1 paired round: no spread between rounds to judge a change against (config repeats >= 2)"
        return out
    se = noise.sd / math.sqrt(n)
    out.update(judge(mean, se, noise.df, threshold, confidence, looks), se=se, df=noise.df)
    if out["verdict"] == "inconclusive":
        out["repeats_needed"] = rounds_needed(mean, noise.sd ** 2, 0.0, n, noise.df, threshold, paired=True,
                                              confidence=confidence, looks=looks)
        out["why"] += f" (paired over {n} rounds)"
    return out


def paired_ratios(a: Sequence[float | None], b: Sequence[float | None]) -> list[float]:
    """The per-round ratios ``b_k / a_k`` of the rounds with a time on both sides (:func:`compare_paired`'s
    pairs): what :func:`pool_noise` pools for a paired compare."""
    return [y / x for x, y in zip(a, b) if _kept([x]) and _kept([y])]


def joint_control(rows: Sequence[dict], rate: float = FALSE_DISCOVERY_RATE) -> dict:
    """Control the "changed" verdicts of one compare's rows jointly: Benjamini-Hochberg at ``rate`` on the rows'
    ``p`` (:func:`judge`; scipy.stats.false_discovery_control). A row called slower or faster whose adjusted p
    exceeds ``rate`` becomes "inconclusive", its why saying so. Changes ``rows`` in place (each a dict with
    ``verdict``, ``p``, ``false_alarm`` and ``why``; rows without a p are left alone). Returns
    ``{"rows": judged rows, "expected_false": the sum of their false_alarm (at most the expected number of false
    "changed" rows if nothing changed), "withheld": rows turned undetermined}``."""
    judged = [r for r in rows if r.get("p") is not None]
    withheld = 0
    if judged:
        adjusted = _st.false_discovery_control([r["p"] for r in judged], method="bh")
        for r, q in zip(judged, adjusted):
            if r["verdict"] in ("slower", "faster") and float(q) > rate:
                withheld += 1
                r.update(verdict="inconclusive",
                         why=f"{r['why']}, but not after the joint control of {len(judged)} rows (Benjamini-Hochberg at "
                             f"{rate:.0%}: adjusted p {float(q):.2g})")
    return {"rows": len(judged), "expected_false": sum(r["false_alarm"] or 0.0 for r in judged), "withheld": withheld}


def detectable_at(se: float, df: float, threshold: float, power: float = POWER, confidence: float = CONFIDENCE) -> float:
    """The relative change (ratio - 1, a fraction) that :func:`judge` calls "by more than ``threshold``" with chance
    ``power`` for a row of standard error ``se`` (log ratio) with ``df`` degrees of freedom: :func:`power_changed`
    solved for the change (scipy.optimize.brentq); ``threshold`` itself for se = 0."""
    if se <= 0:
        return threshold

    def short(change: float) -> float:
        return power_changed(change, se, df, threshold, confidence) - power

    hi = threshold + 1e-6
    while short(hi) < 0:
        hi = 2 * hi + 0.01
    return float(_opt.brentq(short, threshold, hi, xtol=1e-7))


def detectable_change(rel_sd: float, n: int, threshold: float, power: float = POWER, confidence: float = CONFIDENCE,
                      df: float | None = None, sitting_sd: float = 0.0, rows: int = 1) -> float:
    """The smallest relative change (ratio - 1, a fraction) that :func:`compare_ratio` followed by
    :func:`joint_control` calls "by more than ``threshold``" with chance ``power``, between two result sets of
    ``n`` repeats each whose log repeat medians have sd ``rel_sd`` with ``df`` degrees of freedom (default 2n - 2,
    each side's own) and a sitting sd ``sitting_sd`` between them, when it is the one changed row among ``rows``
    (Benjamini-Hochberg then asks p <= rate/rows of it, i.e. the ``1 - (1 - confidence)/rows`` interval): the exact
    power of the rule (:func:`detectable_at`, noncentral t); tests check it by simulating the rule. ValueError for
    n < 2 without ``df``."""
    if n < 2 and df is None:
        raise ValueError(f"a detectable change needs at least 2 repeats, got {n}")
    df = 2 * n - 2 if df is None else df
    se = math.sqrt(2 * rel_sd ** 2 / n + 2 * sitting_sd ** 2)
    return detectable_at(se, df, threshold, power, 1 - (1 - confidence) / rows)
