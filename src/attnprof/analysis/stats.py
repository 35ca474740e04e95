"""Statistics of repeated captures: the noise model, the rerun interval of a time, and the verdict of a ratio.

A *repeat* is one independent capture of a (variant, shape), a *cell*: its own capture process round, trace and
tables (config ``repeats``). Each repeat gives one number per time, the median over its profiled forwards
(the *repeat median*, ms). The forwards of one capture share the process, the CUDA context, the allocations
and the library plans, so their spread says nothing about what a rerun draws again; only the spread *between*
repeats does (pyperf, asv and Chromium's Pinpoint repeat whole processes for the same reason).

Everything works on the logarithms of the repeat medians: times are positive and their run-to-run changes
multiplicative, and a ratio's interval is then the exponent of a difference's interval.

**The noise model** (:func:`moderated_noise`, :func:`squeeze_var`). Three repeats give a cell's spread 2 degrees
of freedom (t multiplier 4.30): too few to decide anything. Each cell's variance of its log medians is therefore
*moderated*: shrunk toward a prior fitted over the cells of the result set (or of a compare), with the prior's
degrees of freedom added to its own (limma's empirical Bayes, Smyth 2004). The prior is fitted over the other
cells of the cell's variant (:func:`squeeze_var`); where the cells' variances disagree beyond what their own df
explain, the prior gets few df and each cell keeps mostly its own -- no cell is pooled with neighbours it does not
resemble (the verdict goes further: a row above its prior's median keeps its own, attnprof.analysis.verdict).

**Which rerun.** The interval of a result set (:func:`between_run_interval`) is for a rerun *on the same machine
in the same sitting* (a sitting: one stretch of time on one machine). Between sittings a whole block of cells
moves together (clocks, the GPU drawn, temperature): measured on the H200, :data:`SITTING_SD` with
:data:`SITTING_DF`. The verdict of a compare (attnprof.analysis.verdict, which holds the rule) adds it only across
sittings.

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
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special as _sp
from scipy import stats as _st


#: Confidence level of the rerun interval and of a ratio's interval.
CONFIDENCE = 0.95
#: Confidence level of the equivalence ("same within X") interval: two one-sided tests at 5 % each.
EQUIVALENCE_CONFIDENCE = 0.90
#: Power at which :func:`rounds_needed` plans.
POWER = 0.8
#: Fewest rows with a variance of their own for :func:`squeeze_var` to fit a prior (each row's from the others:
#: at least 3 of them; fewer rows: each its own).
MIN_PRIOR_ROWS = 4
#: Upper-tail probability of a row's variance under its prior below which the row keeps its own (:func:`squeeze_var`).
OUTLIER_P = 0.01
#: Smallest variance of log times a row is taken to have (0.001 % sd): rounds that agree to the trace's ns
#: resolution would otherwise give log(0).
VARIANCE_FLOOR = 1e-10
#: Standard deviation of a sitting's shift of a log time (a sitting: one stretch of time on one machine), and its
#: degrees of freedom: from the three committed H200 sittings of one build and grid (the sweep example, the calibration
#: sweep with its rerun minutes later, sitting 2), per pair the method-of-moments estimate over the 61 cells (Searle,
#: Casella & McCulloch, Variance Components, 1992, ch. 3) was 0.77 %, 1.02 % and 0.74 % (benchmarks/sittings.py);
#: their root mean square, with 3 - 1 = 2 df: an estimate, not a known constant (docs/statistics.md).
SITTING_SD = 0.0085
SITTING_DF = 2
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
    medians, about the relative standard deviation between repeats) and ``df`` (its degrees of freedom: the cell's
    own, n - 1, where no prior was added, :func:`moderated_noise`)."""

    sd: float
    df: float


def kept_times(values: Sequence[float | None]) -> list[float]:
    """The values that are times: None and NaN left out; ValueError for one <= 0 or infinite."""
    out = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if not v > 0 or math.isinf(v):
            raise ValueError(f"repeat medians must be positive, finite times, got {v!r}")
        out.append(float(v))
    return out


def _spread(logs: Sequence[float]) -> tuple[float, int]:
    """(sample variance, degrees of freedom) of ``logs``; (0.0, 0) for fewer than 2 values."""
    n = len(logs)
    if n < 2:
        return 0.0, 0
    mean = sum(logs) / n
    return sum((x - mean) ** 2 for x in logs) / (n - 1), n - 1


def _trigamma_inverse(y: np.ndarray) -> np.ndarray:
    """x with trigamma(x) = y (y > 0, elementwise): Newton's method as limma's ``trigammaInverse`` (Smyth 2004,
    sec. 6.2), on scipy.special.polygamma."""
    x = np.where(y > 1e7, 1 / np.sqrt(y), np.where(y < 1e-6, 1 / y, 0.5 + 1 / y))
    for _ in range(50):
        tri = _sp.polygamma(1, x)
        step = tri * (1 - tri / y) / _sp.polygamma(2, x)
        x = x + step
        if np.all(-step / x < 1e-8):
            break
    return x


def _others(e: np.ndarray, tri: np.ndarray, used: np.ndarray, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every row i, the location and the excess spread of the corrected log variances ``e`` [..., R] of the
    *other* rows: the location is the mean of the other rows of row i's group where that group has at least 2 other
    rows, else of all other rows; the spread is the residual variance around the groups' means (each group's sum of
    squares with row i taken out: SS' = SS - n/(n - 1) (e_i - mean)**2), minus the mean trigamma the rows' own df
    explain (Smyth 2004, eq. 14). member: [G, R] bool, row r in group g (one group: all rows)."""
    m = (member & used).astype(float)  # [G, R]
    n = m.sum(-1)  # [G]
    gsum = np.einsum("gr,...r->...g", m, e)
    gmean = gsum / np.maximum(n, 1)
    ss = np.einsum("gr,...r->...g", m, e ** 2) - n * gmean ** 2
    mine = member.argmax(0)  # each row's group
    n_i, sum_i, mean_i, ss_i = n[mine], gsum[..., mine], gmean[..., mine], ss[..., mine]
    me = used.astype(float)  # 1 where the row is among the fitted rows (and must be taken out), else 0
    k = used.sum() - me  # the other rows
    in_group = n_i - me
    ss_without = ss_i - me * n_i / np.maximum(n_i - 1, 1) * (e - mean_i) ** 2
    groups_left = (n > 0).sum() - (in_group == 0)
    dof = k - groups_left
    spread = (ss.sum(-1, keepdims=True) - ss_i + ss_without) / np.maximum(dof, 1)
    everyone = (e.sum(-1, keepdims=True) - e) / k
    own_group = (in_group >= 2) & (dof >= 3)
    loc = np.where(own_group, (sum_i - e) / np.maximum(in_group, 1), everyone)
    # rows whose group is too small to fit its own mean: the spread around the mean of all other rows
    flat = ((e ** 2).sum(-1, keepdims=True) - e ** 2 - k * everyone ** 2) / (k - 1)
    spread = np.where(own_group, spread, flat)
    return loc, spread - (tri.sum(-1, keepdims=True) - tri) / k


def squeeze_var(var: np.ndarray, df: np.ndarray, groups: Sequence[Hashable] | None = None,
                outlier_p: float = OUTLIER_P) -> tuple[np.ndarray, np.ndarray]:
    """Empirical-Bayes moderated variances (limma's ``squeezeVar``: Smyth 2004, Statistical Applications in
    Genetics and Molecular Biology 3(1), art. 3, sec. 3 and 6.2), each row's prior fitted over the *other* rows of
    its group (e.g. its variant: a fused kernel's rounds spread more than the naive path's).

    var: [..., R] the rows' sample variances (log scale: the variance of log times per round); df: [R] or [..., R]
    their degrees of freedom (0: a row without a variance of its own, left out of every fit, which takes the prior
    alone); groups: [R] labels (None: one group). For row i, the other rows' log variances, corrected for their
    chi-square bias, give the prior's location (its group's other rows where at least 2, else all other rows); their
    spread beyond what their own df explain gives the prior's df d0 (trigamma inverse; a spread no larger than chance
    gives the others' total df). Fitting the prior without the row itself keeps the row's own variance independent of
    its prior, so that its t interval keeps its level with few rows (a prior fitted over all rows, as limma fits one
    over thousands of genes, covered 90.5 % at 95 % over 6 rows). A row whose own variance exceeds its prior beyond
    ``outlier_p`` (default :data:`OUTLIER_P`; upper tail of F(df, d0), the prior predictive distribution of its variance: Smyth 2004 sec.
    6.3) keeps its own variance and df, as limma's robust option (Phipson et al. 2016, Annals of Applied Statistics
    10(2)) gives such rows a prior of few df. Returns (posterior variance, posterior df), each [..., R]:
    ``(d0 * s0**2 + df * var) / (d0 + df)`` and ``d0 + df``. Fewer than :data:`MIN_PRIOR_ROWS` rows with df > 0:
    the rows' own variances and df."""
    var = np.maximum(np.asarray(var, float), VARIANCE_FLOOR)
    df = np.broadcast_to(np.asarray(df, float), var.shape)
    used = (df > 0).reshape(-1, var.shape[-1]).all(axis=0)  # the rows with a variance of their own, in every draw
    if int(used.sum()) < MIN_PRIOR_ROWS:
        return var, df
    own = np.where(used, df, 2.0)
    e = np.where(used, np.log(var) - _sp.digamma(own / 2) + np.log(own / 2), 0.0)
    tri = np.where(used, _sp.polygamma(1, own / 2), 0.0)
    labels = list(groups) if groups is not None else [0] * var.shape[-1]
    member = np.array([[x == g for x in labels] for g in dict.fromkeys(labels)])
    loc, spread = _others(e, tri, used, member)
    cap = np.where(used, df, 0.0).sum(-1, keepdims=True) - np.where(used, df, 0.0)
    d0 = np.minimum(np.where(spread > 0, 2 * _trigamma_inverse(np.maximum(spread, 1e-12)), cap), cap)
    prior = np.exp(loc + _sp.digamma(d0 / 2) - np.log(d0 / 2))
    # a row whose own variance lies far beyond its prior (a cell with two process modes among quiet ones) keeps its
    # own: shrinking it would narrow its interval below its level
    d0 = np.where(used & (_st.f.sf(var / prior, own, d0) < outlier_p), 0.0, d0)
    mine = np.where(df > 0, var, 0.0)
    return (d0 * prior + df * mine) / (d0 + df), d0 + df


def moderated_noise(cells: Mapping[Hashable, Sequence[float | None]],
                    groups: Mapping[Hashable, Hashable] | None = None) -> dict:
    """The noise of every cell of one result set (or one compare): each cell's variance of its log repeat medians
    moderated over the other cells of its group (:func:`squeeze_var`; ``groups``: {cell: label}, e.g. its variant).
    cells: {key: repeat medians (any unit, > 0; None/NaN left out)}. Returns {key: :class:`Noise` | None}; None for a cell with no repeat. ValueError for a median <= 0."""
    logs = {k: [math.log(x) for x in kept_times(v)] for k, v in cells.items()}
    keys = [k for k, v in logs.items() if v]
    if not keys:
        return dict.fromkeys(cells)
    var, df = np.array([_spread(logs[k]) for k in keys], float).T
    post, post_df = squeeze_var(var, df, [groups[k] for k in keys] if groups else None)
    return {**dict.fromkeys(cells),
            **{k: Noise(math.sqrt(v), float(d)) for k, v, d in zip(keys, post, post_df) if d > 0}}


def between_run_interval(medians: Sequence[float | None], confidence: float = CONFIDENCE, noise: Noise | None = None) -> dict:
    """Between-run statistics of one time from its repeat medians: the interval a rerun's median will hold on the
    same machine in the same sitting (:data:`SAME_SITTING`).

    medians: the median time per forward (any unit, > 0) of each repeat; None/NaN entries (a repeat without that
    time) are left out. noise: the cell's :class:`Noise` from :func:`moderated_noise` (default: its own
    repeats' spread). Returns ``{"n", "center", "lo", "hi", "rel_sd", "df"}``: n, the repeats counted; center, the median
    of the repeat medians (the number a report states); lo and hi, the prediction interval at ``confidence``
    for the median a rerun with n repeats will state: ``exp(mean ± t_{(1+c)/2, df} * sd * sqrt((1 + k)/n))``, k
    = :data:`MEDIAN_VARIANCE` (Hahn & Meeker, *Statistical Intervals*, 2nd ed., 2017, sec. 4.6, with the future
    mean's variance replaced by the median's), None without a spread; rel_sd and df: the noise's sd of the log
    medians and its degrees of freedom (None without). Raises ValueError for a median <= 0."""
    kept = sorted(kept_times(medians))  # the stated center is one of the values (or the mean of two), never exp(log(x))
    logs = [math.log(v) for v in kept]
    n = len(logs)
    out = {"n": n, "center": None, "lo": None, "hi": None, "rel_sd": None, "df": None}
    if n == 0:
        return out
    out["center"] = statistics.median(kept)
    own = _spread(logs)
    if noise is None and not own[1]:
        return out
    noise = noise or Noise(math.sqrt(own[0]), own[1])
    mean = sum(logs) / n
    half = float(_st.t.ppf((1 + confidence) / 2, noise.df)) * noise.sd * math.sqrt((1 + MEDIAN_VARIANCE) / n)
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
    kept = sorted(kept_times(medians))
    n = len(kept)
    if n == 0:
        return {"n": 0, "center": None, "floor": None, "lo": None, "hi": None, "coverage": None}
    return {"n": n, "center": statistics.median(kept), "floor": kept[0], "lo": kept[0] if n > 1 else None, "hi": kept[-1] if n > 1 else None,
            "coverage": (n - 1) / (n + 1) if n > 1 else None}


def level_words(level: float) -> str:
    """An interval's level as words: 0.95 -> '95%', 0.975 -> '97.5%'."""
    return f"{level:.0%}" if round(level * 100, 6).is_integer() else f"{level:.1%}"


def look_levels(confidence: float, looks: int) -> tuple[float, float]:
    """(interval level of "changed", of "same") at each of ``looks`` looks at one row (a sequential rule: rounds
    added where the first look left the row undetermined): the error rates ``1 - confidence`` and
    ``1 - EQUIVALENCE_CONFIDENCE`` split evenly over the looks (Bonferroni), so that a row's chance of a false
    verdict over all its looks stays at most the single look's (the union bound; e.g. Jennison & Turnbull, Group
    Sequential Methods, 2000, sec. 2.2, for sharper boundaries). One look: the levels themselves."""
    return 1 - (1 - confidence) / looks, 1 - (1 - EQUIVALENCE_CONFIDENCE) / looks


def rounds_needed(margin: np.ndarray, var_round: np.ndarray, n: np.ndarray, df: np.ndarray, level: np.ndarray,
                  sitting_var: float = 0.0, power: float = POWER, most: int = MAX_REPEATS_SUGGESTED) -> np.ndarray:
    """Rounds per side (in all, elementwise) at which a row's verdict is reached with chance ``power``, if its log
    ratio and its variance stay as estimated: the smallest m in n+1 .. ``most`` whose standard error
    ``sqrt(var_round / m + 2 * sitting_var)`` and degrees of freedom ``df + (m - n)`` (each added round adds one)
    give a noncentral t (scipy.stats.nct; noncentrality ``margin / se``) past the ``level`` interval's t with that
    chance. margin: the distance of |log ratio| from ln(1 + X) (the verdict it aims at: "changed" beyond, "the
    same" inside); var_round: the variance of the log ratio times the rounds (paired: per round's ratio;
    unpaired: both sides' per-round variances summed); level: the interval level of that verdict at the next look
    (:func:`look_levels`). ``most + 1`` ("more than") where none does, or the margin is 0. A planning estimate
    (the variance taken as known), not a stated statistic: docs/statistics.md states the rule's power by
    simulation."""
    margin, var_round, n, df, level = np.broadcast_arrays(*(np.asarray(x, float) for x in
                                                            (margin, var_round, n, df, level)))
    m = np.arange(1, most + 1, dtype=float)
    se = np.sqrt(var_round[..., None] / m + 2 * sitting_var)
    dfm = np.maximum(df[..., None] + (m - n[..., None]), 1.0)
    crit = _st.t.ppf((1 + level[..., None]) / 2, dfm)
    ok = (_st.nct.sf(crit, dfm, margin[..., None] / np.maximum(se, 1e-300)) >= power) & (m > n[..., None])
    ok &= margin[..., None] > 0
    return np.where(ok.any(-1), m[np.argmax(ok, -1)], most + 1).astype(int)


def sitting_bound(margin: np.ndarray, level: np.ndarray, sitting_var: float, power: float = POWER) -> np.ndarray:
    """True (elementwise) where no number of rounds reaches a verdict across sittings: with the within-sitting noise
    gone the standard error is the sitting term's ``sqrt(2 * sitting_var)``, and the ``level`` interval still
    reaches ``power`` for neither verdict (normal limit of the noncentral t: scipy.stats.norm). margin, level: as
    :func:`rounds_needed`."""
    if sitting_var <= 0:
        return np.zeros(np.shape(margin), bool)
    z = _st.norm.ppf((1 + np.asarray(level, float)) / 2)
    return _st.norm.sf(z - np.asarray(margin, float) / math.sqrt(2 * sitting_var)) < power
