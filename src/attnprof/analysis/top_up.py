"""Rounds only where undecided: the sequential rule of a paired A/B run (config ``top_up``).

An A/B run (config ``environments``) captures ``repeats`` *base rounds* of every cell in both environments,
interleaved (ABBA). With top-up on (``top_up.rounds`` > 0) its compare looks at a row twice:

1. **Look 1** judges every row on the base rounds (:func:`paired_verdicts`).
2. A row left *undetermined* there gets extra rounds in both environments (:func:`plan_top_up`): as many as
   :func:`attnprof.analysis.stats.rounds_needed` says would decide it (at most ``top_up.rounds``), the rows
   cheapest to decide first, while the estimated capture time stays within ``top_up.time_s`` (Chromium's
   Pinpoint adds repeats to an undecided comparison the same way).
3. **Look 2** judges those rows on all their rounds. A row decided at look 1 keeps that verdict.

Each look judges at half the error rate of a single look (:func:`attnprof.analysis.stats.look_levels`: the 95 %
interval becomes 97.5 %, the 90 % equivalence interval 95 %), so a row's chance of a false "changed" or a false
"same" over both looks stays at most the single look's (the union bound, whatever rows the first look selects).
The rule is fixed before any data is seen: with top-up on, look 1 judges at the split level whether or not any
row then gets extra rounds. tests/test_top_up.py measures the false-alarm rate per compare and the power of this
exact code by simulation; docs/statistics.md states the figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from attnprof.analysis.stats import MAX_REPEATS_SUGGESTED, compare_paired, paired_ratios, pool_noise
from attnprof.model.plan import top_up_on

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
    attnprof.model.plan.top_up_on). Both sides share one config; the smaller value is taken where a hand-edited one differs."""
    cfgs = [(e.get("config") or {}) for e in (env_a, env_b)]
    if not all(top_up_on(c.get("top_up")) for c in cfgs):
        return Design(None, 1)
    return Design(min(int(c["repeats"]) for c in cfgs), 2)


def paired_repeat_medians(repeats_a: pd.DataFrame, repeats_b: pd.DataFrame, variant: str, shape_key: str,
                          col: str) -> tuple[list[float | None], list[float | None]]:
    """The repeat medians of time column ``col`` of one (variant, shape) in two result sets of one A/B run
    (repeats.csv frames), aligned by round: one entry per repeat number found in either (ascending), None where
    that round has no time on that side (its status not ok, or no value), so that
    :func:`~attnprof.analysis.stats.compare_paired` leaves that round out on both sides."""
    ma, mb = _by_round(repeats_a, variant, shape_key, col), _by_round(repeats_b, variant, shape_key, col)
    rounds = sorted(set(ma) | set(mb))
    return [ma.get(k) for k in rounds], [mb.get(k) for k in rounds]


def _by_round(repeats: pd.DataFrame, variant: str, shape_key: str, col: str) -> dict[int, float]:
    r = repeats[(repeats["variant"] == variant) & (repeats["shape_key"] == shape_key) & (repeats["status"] == "ok")]
    return {int(k): float(v) for k, v in zip(r["repeat"], r[col]) if not pd.isna(v)} if col in r else {}


def _look(repeats_a: pd.DataFrame, repeats_b: pd.DataFrame, keys: Sequence[tuple[str, str]], col: str,
          threshold: float, confidence: float, looks: int) -> dict:
    """One look: every row of ``keys`` judged by compare_paired on the rounds in the frames, the noise of the
    per-round ratios pooled over each variant's shapes (attnprof.analysis.stats.pool_noise)."""
    medians = {k: paired_repeat_medians(repeats_a, repeats_b, *k, col) for k in keys}
    out = {}
    for variant in {v for v, _ in keys}:
        noise = pool_noise({k: paired_ratios(*medians[k]) for k in keys if k[0] == variant})
        out.update({k: compare_paired(*medians[k], threshold, confidence, noise.get(k), looks)
                    for k in keys if k[0] == variant})
    return out


def _upto(repeats: pd.DataFrame, rounds: int | None) -> pd.DataFrame:
    return repeats if rounds is None else repeats[repeats["repeat"] <= rounds]


def paired_verdicts(repeats_a: pd.DataFrame, repeats_b: pd.DataFrame, keys: Sequence[tuple[str, str]], col: str,
                    threshold: float, confidence: float, design: Design) -> dict:
    """The sequential rule's verdict of time column ``col`` for every (variant, shape) of ``keys`` (module
    docstring): look 1 on rounds 1..``design.base``; with two looks, a row undetermined there that has more rounds
    is judged again on all of them. Returns {key: compare_paired's dict plus ``look`` (1 or 2) and ``top_up``
    (None, or {"base", "rounds", "why"}: the rounds it had at look 1 and in all, and look 1's words)}; a row judged
    twice carries the sum of both looks' ``false_alarm`` (at most its chance of a false "changed" over both)."""
    first = _look(_upto(repeats_a, design.base), _upto(repeats_b, design.base), keys, col, threshold, confidence,
                  design.looks)
    topped = [k for k in keys if design.looks > 1 and first[k]["verdict"] == "inconclusive"
              and _paired_rounds(repeats_a, repeats_b, k, col) > first[k]["n_a"]]
    second = _look(repeats_a, repeats_b, keys, col, threshold, confidence, design.looks) if topped else {}
    out = {k: {**v, "look": 1, "top_up": None} for k, v in first.items()}
    for k in topped:
        fa = [x for x in (first[k].get("false_alarm"), second[k].get("false_alarm")) if x is not None]
        out[k] = {**second[k], "look": 2, "false_alarm": sum(fa) if fa else None,
                  "top_up": {"base": first[k]["n_a"], "rounds": second[k]["n_a"], "why": first[k]["why"]}}
    return out


def _paired_rounds(repeats_a: pd.DataFrame, repeats_b: pd.DataFrame, key: tuple[str, str], col: str) -> int:
    """The rounds of ``key`` with a time on both sides (compare_paired's pairs): a round added on one side only, or
    whose capture failed on either, adds nothing to judge again."""
    return len(paired_ratios(*paired_repeat_medians(repeats_a, repeats_b, *key, col)))


def _extra_rounds(verdict: Mapping, base: int, most: int) -> int:
    """Rounds to add to an undetermined row: what rounds_needed asks beyond ``base`` (at least 1), at most
    ``most``; ``most`` where it cannot say (a ratio at the threshold itself, or more than it plans)."""
    needed = verdict.get("repeats_needed")
    if needed is None or needed > MAX_REPEATS_SUGGESTED:
        return most
    return max(1, min(most, int(needed) - base))


def plan_top_up(first: Mapping, base: int, rounds: int, time_s: float, capture_s: Mapping, round_s: float = 0.0) -> dict:
    """Which rows get extra rounds after look 1 (module docstring).

    first: {(variant, shape_key): look 1's verdict (:func:`paired_verdicts`)}; base: the base rounds; rounds:
    config ``top_up.rounds`` (the most added to a row); time_s: ``top_up.time_s``, the estimated capture time the
    added rounds may take (seconds); capture_s: {key: seconds one round of that row takes, both environments}
    (a missing key counts as 0); round_s: seconds each added round costs beyond its captures (all environments'
    fresh capture processes: :data:`ROUND_START_S` each), charged once per round added to any row. Rows are
    taken cheapest first (fewest added rounds, then time, then name) while the estimate stays within ``time_s``.
    Returns ``{"base", "rows": [{"variant", "shape_key", "rounds" (in all), "added", "estimate_s", "why"}],
    "left": [{"variant", "shape_key", "why"}], "estimate_s"}``; a row with no ratio (no paired round) is left, and
    so is every row once the bound is reached."""
    wanting = [(k, _extra_rounds(v, base, rounds)) for k, v in first.items()
               if v["verdict"] == "inconclusive" and v.get("ratio") is not None and rounds > 0]
    wanting.sort(key=lambda kv: (kv[1], kv[1] * float(capture_s.get(kv[0], 0.0)), kv[0]))
    rows, left, captures, most = [], [], 0.0, 0
    for key, extra in wanting:
        cost = extra * float(capture_s.get(key, 0.0))
        if captures + cost + max(most, extra) * round_s > time_s:
            left.append({"variant": key[0], "shape_key": key[1],
                         "why": f"undetermined after {base} rounds; {extra} more would pass top_up.time_s ({time_s:g} s)"})
            continue
        captures, most = captures + cost, max(most, extra)
        rows.append({"variant": key[0], "shape_key": key[1], "rounds": base + extra, "added": extra,
                     "estimate_s": round(cost, 1), "why": first[key]["why"]})
    return {"base": base, "rows": rows, "left": left, "estimate_s": round(captures + most * round_s, 1)}
