"""The verdict rule: how one time of one (variant, shape, pass) is judged between two result sets, and where an
A/B run adds rounds. compare, the top-up checkpoint and history all call this module; attnprof.analysis.stats is
the numerical library under it.

**A row** is one time (device time per forward or per backward; host time in a CPU A/B run) of one (variant,
shape) in both result sets. Paired (two environments of one A/B run, rounds interleaved) its data are the per-round
log ratios ``d_k = ln b_k - ln a_k``; unpaired, the two sides' log repeat medians. Its estimate ``m`` is their
mean (difference of means), its own variance per round ``s**2`` with ``df`` = n - 1 (paired) or n_a + n_b - 2.

**The rule**, for the practical threshold X (``theta = ln(1 + X)``), the same at every look:

1. *Variance.* Each row's variance is moderated over the compare's other rows
   (:func:`attnprof.analysis.stats.squeeze_var`, limma's empirical Bayes, Smyth 2004): with 3 rounds a row's own
   variance has 2 df (t = 4.3 at 95 %); the prior adds its own df where the rows agree, and little where they do
   not; a row whose own variance lies above its prior's median predictive keeps its own (:data:`KEEP_OWN_P`). Across sittings, a sitting term
   ``2 * sd**2`` with its own df is added (:class:`Sitting`; Satterthwaite's df).
2. *Per row*, at the look's levels (:func:`attnprof.analysis.stats.look_levels`): *slower*/*faster* by more than X
   when the whole changed-level interval lies beyond ``±theta``; *the same* within X when the same-level interval
   lies inside; else *undetermined*, with the rounds that would decide it (80 % power, a plan).
3. *Multiplicity among the rows that could be called changed*: a row is a candidate when its estimate lies beyond
   X (one-sided p of "beyond X" at most :data:`CANDIDATE_P`); among the candidates, Benjamini-Hochberg at
   :data:`FALSE_DISCOVERY_RATE` on ``p / CANDIDATE_P`` (the conditional p values of Zhao, Small & Su 2019, JASA
   114(527), "Multiple testing when many p-values are uniformly conservative": the rows whose estimate lies
   inside X, with p >= 1/2, are dropped instead of diluting the control). A row whose interval lies beyond X
   but that the control withholds reads *probably slower/faster*, undetermined, with the rounds that would
   confirm it: never a bare "undetermined".

**Looks** (an A/B run with top-up, config ``top_up``): look 1 judges every row on the base rounds with the whole
rule (multiplicity included), so that top-up (:func:`plan_top_up`) gives rounds to exactly the rows compare
would print undetermined or probably changed; look 2 judges all rows on all their rounds and the rows that got
rounds take its verdict. Each look judges at half the error rate (Bonferroni over the looks).

What the rule delivers -- its false "changed" rows per A/A compare, its power at known changes and the coverage of
its intervals -- is measured by simulating this exact code with noise resampled from real rounds
(attnprof.analysis.verdict_sim; benchmarks/verdict_rule.py), never taken from a formula.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as _st

from attnprof.analysis.stats import (CONFIDENCE, MAX_REPEATS_SUGGESTED, kept_times, level_words, look_levels, rounds_needed,
                                     sitting_bound, squeeze_var)
from attnprof.model.fmt import format_range
from attnprof.model.plan import top_up_on

#: Rate of false "changed" rows among the rows called changed (Benjamini-Hochberg among the candidates).
FALSE_DISCOVERY_RATE = 0.05
#: A row is a candidate for "changed" when its one-sided p of "beyond X" is at most this: its estimate lies
#: beyond X (Zhao, Small & Su 2019's selection threshold lambda).
CANDIDATE_P = 0.5
#: A row whose own variance lies beyond its prior at this upper-tail probability keeps its own (squeeze_var's
#: ``outlier_p``): 0.5, every row above its prior's median predictive, so that the prior widens a quiet row's
#: interval but never narrows a noisy one's. The paired rounds of the committed H200 A/B runs spread 10-fold between
#: the cells of one variant; at 0.01 (the rerun intervals' choice, attnprof.analysis.stats.OUTLIER_P) the noisiest
#: cells were shrunk toward their quiet neighbours and their 97.5 % intervals covered down to 87 % (29 % of cells below
#: 94.5 %), at 0.5 every cell's at least 95 % (benchmarks/verdict_rule.py, docs/statistics.md).
KEEP_OWN_P = 0.5
#: Verdict codes of the vectorised rule (:func:`decide`).
SLOWER, FASTER, SAME, UNDETERMINED, PROBABLY = 1, -1, 0, 2, 3
#: Seconds an added round costs each environment beyond its captures' own ``capture_wall_s``: a fresh capture
#: process (torch import, CUDA context, the profiler's start-up at its first capture). Measured on an H200
#: (2026-12-02, benchmarks/calibration/results/h200-aa-top_up.log): 3 added rounds in 2 environments took about 24 s
#: of wall time more than the base rounds' run, for about 4 s of the added captures' own wall time.
ROUND_START_S = 4.0


@dataclass(frozen=True)
class Design:
    """The looks of a paired compare: every cell's ``base`` rounds (None: every round the frames hold, where the
    result sets do not record their rounds), and ``looks`` = 2 with top-up on, else 1."""

    base: int | None
    looks: int


def design_of(env_a: Mapping, env_b: Mapping) -> Design:
    """The :class:`Design` two result sets of one A/B run were captured with, from their env.json as the loader
    gives it (attnprof.model.formats: ``config.repeats`` and ``config.top_up``, off for one made before it; on:
    attnprof.model.plan.top_up_on). Both sides share one config; the smaller value is taken where a hand-edited one
    differs."""
    cfgs = [(e.get("config") or {}) for e in (env_a, env_b)]
    if not all(top_up_on(c.get("top_up")) for c in cfgs):
        return Design(None, 1)
    return Design(min(int(c["repeats"]) for c in cfgs), 2)


@dataclass(frozen=True)
class Sitting:
    """The sitting term of an unpaired compare: ``sd`` of a sitting's shift of a log time (0: both result sets of
    one sitting, none added), its degrees of freedom ``df`` and the words saying which (``why``)."""

    sd: float = 0.0
    df: float = math.inf
    why: str = ""


#: Both result sets of one sitting (or paired rounds): no sitting term.
ONE_SITTING = Sitting()


@dataclass(frozen=True)
class RowData:
    """One row's data: paired, ``d`` the per-round log ratios; unpaired, ``a`` and ``b`` each side's log repeat
    medians; ``group``: the rows its variance prior is fitted over (its variant and time column)."""

    d: tuple[float, ...] | None = None
    a: tuple[float, ...] = ()
    b: tuple[float, ...] = ()
    group: Hashable = None

    @property
    def paired(self) -> bool:
        return self.d is not None

    def moments(self) -> tuple[float, float, float, float, int, int]:
        """(m, own variance per round, own df, se factor k with se**2 = var * k, n_a, n_b); m NaN, df 0 and k 1
        where a side has no time (such a row is not judged)."""
        return self._paired_moments() if self.paired else self._unpaired_moments()

    def _paired_moments(self) -> tuple[float, float, float, float, int, int]:
        n = len(self.d)
        if not n:
            return math.nan, 0.0, 0.0, 1.0, 0, 0
        return float(np.mean(self.d)), float(np.var(self.d, ddof=1)) if n > 1 else 0.0, n - 1.0, 1.0 / n, n, n

    def _unpaired_moments(self) -> tuple[float, float, float, float, int, int]:
        na, nb = len(self.a), len(self.b)
        if not (na and nb):
            return math.nan, 0.0, 0.0, 1.0, na, nb
        ss = sum(float(np.var(x, ddof=0)) * len(x) for x in (self.a, self.b))
        # a side with one repeat has no spread of its own: such a row is never judged (its spread would be the
        # other side's alone)
        dof = na + nb - 2 if na > 1 and nb > 1 else 0
        return float(np.mean(self.b) - np.mean(self.a)), ss / dof if dof else 0.0, float(dof), 1 / na + 1 / nb, na, nb


def conditional_bh(p: np.ndarray, rate: float = FALSE_DISCOVERY_RATE, lam: float = CANDIDATE_P) -> np.ndarray:
    """Which rows pass Benjamini-Hochberg at ``rate`` among the candidates (p <= ``lam``) on their conditional p
    values ``p / lam`` (Zhao, Small & Su 2019; module docstring). p: [..., R] one-sided p values (NaN: not judged).
    Returns a bool array [..., R]."""
    p = np.asarray(p, float)
    cand = np.nan_to_num(p, nan=np.inf) <= lam
    pc = np.where(cand, p / lam, np.inf)
    k = np.maximum(cand.sum(-1, keepdims=True), 1)
    order = np.sort(pc, -1)
    ranks = np.arange(1, p.shape[-1] + 1)
    ok = order <= rate * ranks / k
    passed = np.where(ok.any(-1), p.shape[-1] - np.argmax(ok[..., ::-1], -1), 0)
    cutoff = np.take_along_axis(order, np.maximum(passed - 1, 0)[..., None], -1)
    return cand & (pc <= cutoff) & (passed[..., None] > 0)


def moderate(var: np.ndarray, df: np.ndarray, groups: Sequence | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The rule's moderated variance and df of every row ([..., R] each; step 1 of the module docstring):
    attnprof.analysis.stats.squeeze_var over the rows' ``groups``, a row above its prior's median keeping its own
    (:data:`KEEP_OWN_P`)."""
    return squeeze_var(var, df, groups, KEEP_OWN_P)


def decide(m: np.ndarray, var: np.ndarray, df: np.ndarray, k: np.ndarray, threshold: float, looks: int = 1,
           confidence: float = CONFIDENCE, sitting: Sitting = ONE_SITTING, groups: Sequence | None = None) -> dict:
    """The rule (module docstring) on arrays: every row of one compare at once, for any number of draws.

    m, var: [..., R] each row's estimate (log ratio) and own variance per round; df, k: [R] or [..., R] its own df
    (0: not judged) and se factor (se**2 = var * k); groups: [R] the rows' prior groups; threshold: X (a
    fraction); looks: the look's share of the error rates. Returns arrays [..., R]: ``code`` (:data:`SLOWER`,
    :data:`FASTER`, :data:`SAME`, :data:`UNDETERMINED`, :data:`PROBABLY`), ``lo``/``hi`` (log interval at the
    changed level), ``lo_same``/``hi_same`` (at the same level), ``se``, ``df``, ``p`` (one-sided, of "beyond X"),
    ``var`` (moderated, per round), ``post_df``; and scalars ``level``, ``level_same``."""
    post, post_df = moderate(var, df, groups)
    post_df = np.maximum(post_df, 1e-9)  # a row without df is not judged below; this keeps the arithmetic quiet
    within = post * k
    sv = 2 * sitting.sd ** 2
    se = np.sqrt(within + sv)
    dfe = (within + sv) ** 2 / (within ** 2 / post_df + (sv ** 2 / sitting.df if sv else 0.0))
    changed, same = look_levels(confidence, looks)
    half, half_same = _st.t.ppf((1 + changed) / 2, dfe) * se, _st.t.ppf((1 + same) / 2, dfe) * se
    theta = math.log1p(threshold)
    judged = np.broadcast_to(np.asarray(df) > 0, np.shape(m)) & np.isfinite(m)
    p = np.where(judged, _st.t.sf((np.abs(m) - theta) / np.maximum(se, 1e-300), dfe), np.nan)
    beyond = judged & ((m - half > theta) | (m + half < -theta))
    inside = judged & (m - half_same >= -theta) & (m + half_same <= theta)
    kept = conditional_bh(p)
    code = np.where(inside, SAME, UNDETERMINED)
    code = np.where(beyond & kept, np.where(m > 0, SLOWER, FASTER), np.where(beyond, PROBABLY, code))
    return {"code": code, "lo": m - half, "hi": m + half, "lo_same": m - half_same, "hi_same": m + half_same, "se": se,
            "df": dfe, "p": p, "var": post, "post_df": post_df, "level": changed, "level_same": same, "kept": kept}


def plan_rounds(m: np.ndarray, out: dict, n: np.ndarray, threshold: float, looks: int, confidence: float,
                sitting: Sitting = ONE_SITTING, most: int = MAX_REPEATS_SUGGESTED) -> np.ndarray:
    """Rounds (in all) at which each row of :func:`decide`'s ``out`` would be decided with 80 % power at its next
    look (attnprof.analysis.stats.rounds_needed): aiming at "changed" where its estimate lies beyond X, at "the
    same" inside. n: [..., R] its rounds now."""
    theta = math.log1p(threshold)
    changed, same = look_levels(confidence, looks)
    margin = np.abs(np.abs(np.nan_to_num(m)) - theta)
    level = np.where(np.abs(m) > theta, changed, same)
    var_round = (out["se"] ** 2 - 2 * sitting.sd ** 2) * n
    return rounds_needed(margin, var_round, n, out["post_df"], level, sitting.sd ** 2, most=most)


def judge_rows(rows: Mapping[Hashable, RowData], threshold: float, confidence: float = CONFIDENCE, looks: int = 1,
               sitting: Sitting = ONE_SITTING) -> dict:
    """The verdict of every row of one compare (module docstring), as compare prints it.

    rows: {key: :class:`RowData`}, all paired or all unpaired. Returns {key: {"verdict" (slower, faster, same,
    inconclusive), "probably" (slower/faster for a withheld row, else None), "ratio", "lo", "hi" (the interval at
    the changed level), "lo_same", "hi_same" (at the same level), "level", "level_same", "n_a", "n_b", "repeats_needed", "why", "se", "df", "p",
    "paired"}}; a row with one round (paired) or one repeat on each side has no spread and stays inconclusive."""
    keys = list(rows)
    if not keys:
        return {}
    m, var, df, kf, na, nb = np.array([rows[k].moments() for k in keys], float).T
    out = decide(m, var, df, kf, threshold, looks, confidence, sitting, [rows[k].group for k in keys])
    needed = plan_rounds(m, out, np.maximum(na, 1), threshold, looks, confidence, sitting)
    adjusted = _adjusted_p(out["p"])
    return {k: _row(i, m, out, needed, adjusted, na, nb, threshold, sitting, rows[k].paired) for i, k in enumerate(keys)}


def compare_ratio(a: Sequence[float | None], b: Sequence[float | None], threshold: float, confidence: float = CONFIDENCE,
                  sitting: Sitting = ONE_SITTING) -> dict:
    """:func:`judge_rows` of one unpaired row alone: each side's repeat medians (None/NaN left out), captured in one
    sitting or (``sitting``) two. ValueError for a time <= 0 or a threshold < 0."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    return judge_rows({0: unpaired_row(a, b)}, threshold, confidence, sitting=sitting)[0]


def _adjusted_p(p: np.ndarray) -> np.ndarray:
    """The candidates' Benjamini-Hochberg adjusted conditional p values (scipy.stats.false_discovery_control), NaN
    for the other rows: what a withheld row's words quote."""
    out = np.full(len(p), np.nan)
    cand = np.flatnonzero(np.nan_to_num(p, nan=np.inf) <= CANDIDATE_P)
    out[cand] = _st.false_discovery_control(p[cand] / CANDIDATE_P, method="bh")
    return out


_VERDICT = {SLOWER: "slower", FASTER: "faster", SAME: "same", UNDETERMINED: "inconclusive", PROBABLY: "inconclusive"}
#: The verdicts that call a time changed.
CHANGED = ("slower", "faster")


def _row(i: int, m, out: dict, needed, adjusted, na, nb, threshold: float, sitting: Sitting, paired: bool) -> dict:
    """One row of :func:`judge_rows` as a dict with its words."""
    code = int(out["code"][i])
    r = {"verdict": _VERDICT[code], "probably": None, "ratio": None, "lo": None, "hi": None, "lo_same": None,
         "hi_same": None, "level": out["level"], "level_same": out["level_same"], "n_a": int(na[i]), "n_b": int(nb[i]), "repeats_needed": None,
         "se": None, "df": None, "p": None, "paired": paired}
    if not np.isfinite(m[i]):
        return {**r, "why": "no time on one side" if not paired else "no round with a time on both sides"}
    r["ratio"] = math.exp(m[i])
    if np.isnan(out["p"][i]):
        return {**r, "why": _no_spread(int(na[i]), int(nb[i]), paired)}
    r.update({key: math.exp(float(out[key][i])) for key in ("lo", "hi", "lo_same", "hi_same")},
             se=float(out["se"][i]), df=float(out["df"][i]), p=float(out["p"][i]))
    if code in (UNDETERMINED, PROBABLY):
        r["repeats_needed"] = int(needed[i])
    if code == PROBABLY:
        r["probably"] = "slower" if m[i] > 0 else "faster"
    return {**r, "why": _why(code, r, out, float(adjusted[i]), threshold, sitting, m[i])}


def _no_spread(na: int, nb: int, paired: bool) -> str:
    if paired:
        return f"{na} paired round: no spread between rounds to judge a change against (config repeats >= 2)"
    return (f"{min(na, nb)} repeat on one side and {max(na, nb)} on the other: no between-run spread to judge a change "
            "against (config repeats >= 2 on both)")


def _why(code: int, r: dict, out: dict, adjusted: float, threshold: float, sitting: Sitting, m: float) -> str:
    """The words of one judged row's verdict."""
    pct, level, same = f"{100 * threshold:g} %", level_words(out["level"]), level_words(out["level_same"])
    interval = format_range(r["lo"], r["hi"], digits=4)
    if code in (SLOWER, FASTER):
        return f"{r['verdict']} by more than {pct}: the whole {level} interval ({interval}) lies beyond"
    if code == SAME:
        return f"the same within {pct}: the {same} interval ({format_range(r['lo_same'], r['hi_same'], digits=4)}) lies inside"
    if code == PROBABLY:
        return (f"probably {r['probably']} by more than {pct}: the whole {level} interval ({interval}) lies beyond, but "
                f"the joint control of the rows beyond {pct} (Benjamini-Hochberg at {FALSE_DISCOVERY_RATE:.0%}: adjusted "
                f"p {adjusted:.2g}) asks for more; {_rounds_words(r['repeats_needed'])} would confirm it")
    theta = math.log1p(threshold)
    bound = sitting_bound(abs(abs(m) - theta), out["level"] if abs(m) > theta else out["level_same"],
                          sitting.sd ** 2)
    if sitting.sd and bool(bound):
        width = 2 * math.sqrt(2) * sitting.sd
        aim = "a change beyond" if abs(m) > theta else "the same within"
        return (f"undetermined, and no number of rounds decides across sittings: with unlimited rounds the sitting "
                f"term alone would keep the interval about ±{width:.1%} wide (now {interval}), too wide to show {aim} "
                f"±{pct} for a change of {math.expm1(m):+.2%}; a paired A/B (config environments) would decide")
    return (f"undetermined: the {level} interval ({interval}) neither lies beyond ±{pct} nor, at {same}, inside it; "
            f"{_rounds_words(r['repeats_needed'])} would decide")


def _rounds_words(n: int) -> str:
    return f"more than {MAX_REPEATS_SUGGESTED} rounds" if n > MAX_REPEATS_SUGGESTED else f"about {n} rounds"


# --- paired rounds of an A/B run: look 1, top-up's plan, look 2 ------------------------------------------------

def paired_repeat_medians(repeats_a: pd.DataFrame, repeats_b: pd.DataFrame, variant: str, shape_key: str,
                          col: str) -> tuple[list[float | None], list[float | None]]:
    """The repeat medians of time column ``col`` of one (variant, shape) in two result sets of one A/B run
    (repeats.csv frames), aligned by round: one entry per repeat number found in either (ascending), None where
    that round has no time on that side (its status not ok, or no value); such a round is left out on both sides."""
    ma, mb = _by_round(repeats_a, variant, shape_key, col), _by_round(repeats_b, variant, shape_key, col)
    rounds = sorted(set(ma) | set(mb))
    return [ma.get(k) for k in rounds], [mb.get(k) for k in rounds]


def _by_round(repeats: pd.DataFrame, variant: str, shape_key: str, col: str) -> dict[int, float]:
    r = repeats[(repeats["variant"] == variant) & (repeats["shape_key"] == shape_key) & (repeats["status"] == "ok")]
    return {int(k): float(v) for k, v in zip(r["repeat"], r[col]) if not pd.isna(v)} if col in r else {}


def paired_row(a: Sequence[float | None], b: Sequence[float | None], group: Hashable = None) -> RowData:
    """The :class:`RowData` of one paired row from its rounds' times (aligned, None where a side has none: that
    round is left out). ValueError for a time <= 0 or sides of different lengths."""
    if len(a) != len(b):
        raise ValueError(f"paired repeat medians need one value per round on each side, got {len(a)} and {len(b)}")
    pairs = [(x, y) for x, y in zip(a, b) if kept_times([x]) and kept_times([y])]
    return RowData(d=tuple(math.log(y / x) for x, y in pairs), group=group)


def unpaired_row(a: Sequence[float | None], b: Sequence[float | None], group: Hashable = None) -> RowData:
    """The :class:`RowData` of one unpaired row from each side's repeat medians (None/NaN left out; ValueError for a
    time <= 0)."""
    la, lb = tuple(math.log(v) for v in kept_times(a)), tuple(math.log(v) for v in kept_times(b))
    return RowData(a=la, b=lb, group=group)


def paired_rows(repeats_a: pd.DataFrame, repeats_b: pd.DataFrame, keys: Sequence[tuple[str, str, str]],
                rounds: int | None = None) -> dict:
    """{(variant, shape_key, time column): :class:`RowData`} of two result sets of one A/B run (repeats.csv frames),
    on their rounds 1..``rounds`` (None: every round), each row's prior group its variant and column."""
    ra, rb = (x if rounds is None else x[x["repeat"] <= rounds] for x in (repeats_a, repeats_b))
    return {k: paired_row(*paired_repeat_medians(ra, rb, k[0], k[1], k[2]), (k[0], k[2])) for k in keys}


def paired_verdicts(repeats_a: pd.DataFrame, repeats_b: pd.DataFrame, keys: Sequence[tuple[str, str, str]],
                    threshold: float, confidence: float, design: Design) -> dict:
    """The rule's verdict on every row of ``keys`` ((variant, shape_key, time column)) of two result sets of one A/B
    run (repeats.csv frames), judged together: look 1 on rounds 1..``design.base``; with two looks, a row look 1
    left undetermined (or probably changed) that has more paired rounds is judged again, with all rows, on all
    rounds. Returns {key: :func:`judge_rows`'s dict plus ``look`` (1 or 2) and ``top_up`` (None, or {"base",
    "rounds", "why"}: its rounds at look 1 and in all, and look 1's words)}."""
    first = judge_rows(paired_rows(repeats_a, repeats_b, keys, design.base), threshold, confidence, design.looks)
    every = paired_rows(repeats_a, repeats_b, keys)
    topped = [k for k in keys if design.looks > 1 and first[k]["verdict"] == "inconclusive"
              and len(every[k].d) > first[k]["n_a"]]
    second = judge_rows(every, threshold, confidence, design.looks) if topped else {}
    out = {k: {**v, "look": 1, "top_up": None} for k, v in first.items()}
    for k in topped:
        out[k] = {**second[k], "look": 2, "top_up": {"base": first[k]["n_a"], "rounds": second[k]["n_a"],
                                                     "why": first[k]["why"]}}
    return out


def _extra_rounds(verdict: Mapping, base: int, most: int) -> int:
    """Rounds to add to an undetermined row: what it needs beyond ``base`` (at least 1), at most ``most``."""
    needed = verdict.get("repeats_needed")
    if needed is None or needed > MAX_REPEATS_SUGGESTED:
        return most
    return max(1, min(most, int(needed) - base))


def plan_top_up(first: Mapping, base: int, rounds: int, time_s: float, capture_s: Mapping, round_s: float = 0.0) -> dict:
    """Which rows get extra rounds after look 1: every row :func:`paired_verdicts`' look 1 (``first``: {key:
    verdict}, keys starting (variant, shape_key)) left inconclusive -- undetermined or probably changed, as compare
    prints it after its joint control -- gets what it needs (at most ``rounds``, config ``top_up.rounds``), the rows
    cheapest to decide first while the estimated capture time stays within ``time_s`` (seconds). capture_s:
    {(variant, shape_key): seconds one round of that row takes, all environments}; round_s: seconds each added
    round costs beyond its captures (:data:`ROUND_START_S` per environment), charged once per round added to any
    row. A (variant, shape) judged in several time columns takes the most any of them asks. Returns ``{"base",
    "rows": [{"variant", "shape_key", "rounds" (in all), "added", "estimate_s", "why"}], "left": [{"variant",
    "shape_key", "why"}], "estimate_s"}``."""
    wanting: dict[tuple[str, str], tuple[int, str]] = {}
    for key, v in first.items():
        if v["verdict"] == "inconclusive" and v.get("ratio") is not None and v.get("p") is not None and rounds > 0:
            extra = _extra_rounds(v, base, rounds)
            if extra > wanting.get(key[:2], (0, ""))[0]:
                wanting[key[:2]] = (extra, v["why"])
    order = sorted(wanting.items(), key=lambda kv: (kv[1][0], kv[1][0] * float(capture_s.get(kv[0], 0.0)), kv[0]))
    rows, left, captures, most = [], [], 0.0, 0
    for key, (extra, why) in order:
        cost = extra * float(capture_s.get(key, 0.0))
        if captures + cost + max(most, extra) * round_s > time_s:
            left.append({"variant": key[0], "shape_key": key[1],
                         "why": f"undetermined after {base} rounds; {extra} more would pass top_up.time_s ({time_s:g} s)"})
            continue
        captures, most = captures + cost, max(most, extra)
        rows.append({"variant": key[0], "shape_key": key[1], "rounds": base + extra, "added": extra,
                     "estimate_s": round(cost, 1), "why": why})
    return {"base": base, "rows": rows, "left": left, "estimate_s": round(captures + most * round_s, 1)}
