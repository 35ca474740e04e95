"""What the verdict rule delivers, by simulating it: attnprof.analysis.verdict's exact rule (moderated variance,
the look's levels, the joint control among candidates, top-up's rounds and look 2), run on draws whose noise is
resampled from real rounds.

The noise of a row is resampled from the residuals of all the compare's rows: paired, each row's per-round log
ratios minus their mean; unpaired, each side's log repeat medians minus that side's mean; each scaled by
``sqrt(n / (n - 1))`` (the unbiased spread) and divided by its row's moderated sd (the rule's own estimate,
attnprof.analysis.verdict.moderate), pooled, and drawn with replacement times each row's moderated sd. Resampling a
row's own 3 rounds alone would draw a zero spread one time in nine and undercover every interval; the pooled,
scaled residuals keep the rounds' shape (heavy tails, two modes) and each row's own scale. A simulated compare draws
every row's rounds this way, adds a known true change, and runs the rule; top-up's added rounds are drawn the same
way. A sitting shift (unpaired, across sittings) is drawn per side and compare, common to all its rows, from a
normal of the sitting's sd. What is measured: per row, how often each verdict is reached, the rounds added, and
how often the final interval holds the true change (coverage).

Used by compare (its page 1 states the expected number of false "changed" rows of an A/A of its own rows and the
smallest change each row finds with 80 % power, both from this simulation) and by benchmarks/verdict_rule.py (the
rule's figures on the committed H200 rounds, docs/statistics.md).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from attnprof.analysis.stats import CONFIDENCE
from attnprof.analysis.verdict import (FASTER, ONE_SITTING, PROBABLY, SAME, SLOWER, UNDETERMINED, Design, RowData,
                                       Sitting, decide, moderate, plan_rounds)

#: Simulated compares per figure at compare time.
SIMS = 200
#: The true changes (a fraction, slower) at which compare's page 1 reports each row's power, as multiples of X and
#: fixed sizes: the smallest of them found with 80 % power is the row's detectable change.
CHANGES = (0.03, 0.04, 0.05, 0.07, 0.10, 0.15, 0.20, 0.30, 0.50)


@dataclass(frozen=True)
class Draws:
    """Every round a simulated compare could use: ``a``/``b`` [S, R, N] log times (paired: ``a`` holds the
    per-round log ratios and ``b`` is None), ``base`` [R] each row's rounds at look 1, ``groups`` [R] the rows'
    prior groups, ``paired``."""

    a: np.ndarray
    b: np.ndarray | None
    base: np.ndarray
    groups: list
    paired: bool


def _residuals(values: Sequence[float]) -> np.ndarray:
    v = np.asarray(values, float)
    if len(v) < 2:
        return np.zeros(0)
    return (v - v.mean()) * math.sqrt(len(v) / (len(v) - 1))


def draws(rows: Mapping[Hashable, RowData], sims: int, extra: int, rng: np.random.Generator,
          base: int | None = None) -> Draws:
    """Resampled rounds of every row of ``rows`` (module docstring): each row's look-1 rounds (its own count, or
    ``base`` where given) and ``extra`` more, ``sims`` compares. rows: all paired or all unpaired, as compare
    judges them (the first row's kind is taken). ValueError for rows with no spread at all."""
    keys = list(rows)
    paired = rows[keys[0]].paired
    mom = np.array([rows[k].moments() for k in keys], float)  # n_a, n_b: a paired row's rounds on both
    n0 = np.full(len(keys), base) if base else mom[:, 4:].min(1).astype(int)
    width = int(n0.max()) + extra
    groups = [rows[k].group for k in keys]
    scale = np.sqrt(moderate(mom[:, 1], mom[:, 2], groups)[0])
    sides = [(rows[k].d,) if paired else (rows[k].a, rows[k].b) for k in keys]
    pool = np.concatenate([_residuals(x) / sd for side, sd in zip(sides, scale) for x in side])
    if not np.any(pool):
        raise ValueError("a simulated compare needs rows with a spread between rounds")

    def sample() -> np.ndarray:
        return rng.choice(pool, size=(sims, len(keys), width)) * scale[None, :, None]

    return Draws(sample(), None if paired else sample(), n0, groups, paired)


def _moments(x: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample variance [S, R] of the first ``n`` [S, R] rounds of ``x`` [S, R, N]."""
    used = np.arange(x.shape[-1]) < n[..., None]
    mean = (x * used).sum(-1) / n
    var = (((x - mean[..., None]) * used) ** 2).sum(-1) / np.maximum(n - 1, 1)
    return mean, var


def _look(d: Draws, n: np.ndarray, change: np.ndarray, shift: np.ndarray, threshold: float, looks: int,
          confidence: float, sitting: Sitting) -> tuple[dict, np.ndarray]:
    """One look of the rule on the first ``n`` [S, R] rounds of every row; returns decide's arrays and m."""
    if d.paired:
        m, var = _moments(d.a, n)
        return decide(m + change, var, n - 1.0, 1.0 / n, threshold, looks, confidence, sitting, d.groups), m + change
    ma, va = _moments(d.a, n)
    mb, vb = _moments(d.b, n)
    m = mb - ma + change + shift
    var = (va + vb) / 2
    return decide(m, var, 2 * n - 2.0, 2.0 / n, threshold, looks, confidence, sitting, d.groups), m


def run(d: Draws, change: np.ndarray, threshold: float, design: Design, top_up: int = 0,
        confidence: float = CONFIDENCE, sitting: Sitting = ONE_SITTING, *, rng: np.random.Generator) -> dict:
    """The rule, end to end, on draws ``d`` with the true log change ``change`` [R] (or [S, R]): look 1 on the
    base rounds; with two looks, rows left undetermined or probably changed get the rounds they need (at most
    ``top_up``) and look 2 judges every row on its rounds, the topped rows taking its verdict; ``rng`` draws the
    sitting shifts (unpaired, across sittings). Returns {"code" [S, R], "held" [S, R] (the final interval holds the
    true change), "added" [S, R] (rounds added)}."""
    s = d.a.shape[0]
    n = np.broadcast_to(d.base, (s, len(d.base))).astype(float)
    shift = 0.0
    if not d.paired and sitting.sd:
        shift = rng.normal(0.0, sitting.sd, (s, 1)) - rng.normal(0.0, sitting.sd, (s, 1))
    out, m = _look(d, n, change, shift, threshold, design.looks, confidence, sitting)
    code, lo, hi = out["code"], out["lo"], out["hi"]
    added = np.zeros_like(n)
    if design.looks > 1 and top_up > 0:
        open_ = (code == UNDETERMINED) | (code == PROBABLY)
        need = plan_rounds(m, out, n, threshold, design.looks, confidence, sitting, most=int(n.max()) + top_up)
        added = np.where(open_, np.clip(need - n, 1, top_up), 0)
        second, _ = _look(d, n + added, change, shift, threshold, design.looks, confidence, sitting)
        code = np.where(open_, second["code"], code)
        lo, hi = np.where(open_, second["lo"], lo), np.where(open_, second["hi"], hi)
    truth = np.broadcast_to(change, code.shape)
    return {"code": code, "held": (lo <= truth) & (truth <= hi), "added": added}


def aa_false_changed(rows: Mapping[Hashable, RowData], threshold: float, design: Design, top_up: int = 0,
                     confidence: float = CONFIDENCE, sitting: Sitting = ONE_SITTING, sims: int = SIMS,
                     seed: int = 0) -> dict:
    """An A/A of the compare's own rows (their noise resampled, no true change): {"false_changed": mean number of
    rows called slower or faster per compare, "same": share of rows called the same, "coverage": [R] share of
    compares whose final interval holds 1 per row, "sims"}."""
    rng = np.random.default_rng(seed)
    d = draws(rows, sims, top_up if design.looks > 1 else 0, rng, design.base)
    out = run(d, np.zeros(len(rows)), threshold, design, top_up, confidence, sitting, rng=rng)
    changed = (out["code"] == SLOWER) | (out["code"] == FASTER)
    return {"false_changed": float(changed.sum(-1).mean()), "same": float((out["code"] == SAME).mean()),
            "coverage": out["held"].mean(0), "sims": sims}


def detectable(rows: Mapping[Hashable, RowData], threshold: float, design: Design, top_up: int = 0,
               confidence: float = CONFIDENCE, sitting: Sitting = ONE_SITTING, changes: Sequence[float] = CHANGES,
               power: float = 0.8, sims: int = SIMS, seed: int = 1) -> list[float | None]:
    """Each row's detectable change: the smallest of ``changes`` (fractions, slower) that the rule calls "slower"
    in at least ``power`` of the simulated compares when that row alone changed by it (the others' noise
    resampled as they are); None where none of them is. One list entry per row of ``rows``, in order."""
    rng = np.random.default_rng(seed)
    d = draws(rows, sims, top_up if design.looks > 1 else 0, rng, design.base)
    out: list[float | None] = [None] * len(rows)
    for j in range(len(rows)):
        for c in changes:
            change = np.zeros(len(rows))
            change[j] = math.log1p(c)
            if (run(d, change, threshold, design, top_up, confidence, sitting, rng=rng)["code"][:, j] == SLOWER).mean() >= power:
                out[j] = c
                break
    return out
