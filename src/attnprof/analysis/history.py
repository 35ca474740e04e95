"""History over a series of builds (issue 41): what changed link by link, and beyond single links.

A series is a list of result sets in build order (config ``history.runs``; e.g. the environments of one A/B run with
N environments, or result sets captured on other days). Every link (two consecutive builds) is judged by compare's
own function (the caller's ``judge``: :func:`attnprof.analysis.compare.compare_pair` with the config's thresholds;
paired where both sides are environments of one A/B run, else unpaired with the sitting term): no second verdict rule
lives here. From the links' verdicts, per variant and shape:

- a **step**: a link called slower or faster;
- an **excursion**: a step and the opposite step at the next link whose end builds compare_pair does not call changed:
  one event at the build between them ("2.11 only"), never two steps;
- a **drift**: a run of two or more undecided links (the same, or undetermined) whose end builds compare_pair calls
  changed: a change too gradual for any one link, stated between its end builds;
- each step or drift is then **still present** at the newest build, **gone** (a regression recovered, a gain lost) or
  undetermined there, by compare_pair on the build before it and the newest build; every event stays listed.

Each step's link, and each drift between its end builds, states each kernel's share of the change in device time per
forward, from the two builds' kernel tables (:func:`kernel_shares`).

Structural steps are exact facts of the two builds, never judged: kernels added or removed (compare_pair's rows),
what ``sdpa_auto`` dispatched to, status changes with PyTorch's reason, correctness (summary ``rel_error_ok``) and
torch.compile's first call. A link where every variant judged moved the same way is flagged ``together``: one
variant's code does not do that; the machine (or something every variant shares) does.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from attnprof.analysis.compare import judged_time, repeat_medians
from attnprof.analysis.stats import between_run_interval, host_range
from attnprof.analysis.verdict import CHANGED

#: The verdicts of a link that decided nothing beyond "no step here" (a drift is looked for over runs of them).
UNDECIDED = ("same", "inconclusive", "not judged")


def judge_cache(runs: list[dict], judge: Callable[[dict, dict], dict]) -> Callable[[int, int], dict]:
    """``pair(i, j)``: ``judge(runs[i], runs[j])`` (compare_pair's dict), each pair computed once; ``pair.done``
    holds them, keyed (i, j)."""
    done: dict = {}

    def pair(i: int, j: int) -> dict:
        if (i, j) not in done:
            done[(i, j)] = judge(runs[i], runs[j])
        return done[(i, j)]

    pair.done = done
    return pair


def row_of(pair: dict, key: tuple[str, str]) -> dict | None:
    """The row of (variant, shape_key) ``key`` in compare_pair's dict ``pair``, None where it has none."""
    return next((r for r in pair["rows"] if (r["variant"], r["shape_key"]) == key), None)


def _event(kind: str, start: int, end: int, row: dict) -> dict:
    """An event between builds ``start`` and ``end`` (indices into the series) with the verdict ``row`` gave it."""
    return {"kind": kind, "start": start, "end": end, "direction": row["verdict"],
            **{k: row.get(k) for k in ("ratio", "ratio_lo", "ratio_hi", "why", "paired")}}


def find_events(verdicts: list[str], ends: Callable[[int, int], dict | None]) -> list[dict]:
    """The steps, excursions and drifts (module docstring) of one (variant, shape) from its link verdicts
    (``verdicts[i]``: builds i -> i + 1); ``ends(i, j)``: compare_pair's row for builds i and j (None: no row).
    Each event: {kind (step, excursion, drift), start, end (build indices), direction (slower/faster; an
    excursion's: its first step's), ratio, ratio_lo, ratio_hi, why, paired}."""
    out, i = [], 0
    while i < len(verdicts):
        event, i = _next_event(verdicts, ends, i)
        if event:
            out.append(event)
    return out


def _next_event(verdicts: list[str], ends, i: int) -> tuple[dict | None, int]:
    """The event that starts at link ``i`` (or None) and the link after it."""
    if verdicts[i] in CHANGED:
        return _step_or_excursion(verdicts, ends, i)
    j = i
    while j < len(verdicts) and verdicts[j] in UNDECIDED:
        j += 1
    if j - i >= 2 and (row := ends(i, j)) and row["verdict"] in CHANGED:
        return _event("drift", i, j, row), j
    return None, max(j, i + 1)


def _step_or_excursion(verdicts: list[str], ends, i: int) -> tuple[dict, int]:
    step = ends(i, i + 1)
    if i + 1 < len(verdicts) and {verdicts[i], verdicts[i + 1]} == set(CHANGED):  # opposite steps
        back = ends(i, i + 2)
        if back is None or back["verdict"] not in CHANGED:
            return {**_event("excursion", i, i + 2, step), "back": back and back["verdict"]}, i + 2
    return _event("step", i, i + 1, step), i + 1


def mark_state(event: dict, newest: int, ends: Callable[[int, int], dict | None]) -> dict:
    """``event`` with ``state`` at the newest build (index ``newest``): an excursion is gone by construction; a step or
    drift ending at the newest build is still present; else compare_pair on the build before it and the newest build
    says: the same direction, still present; the same or the other way, gone (a regression recovered); else
    undetermined."""
    if event["kind"] == "excursion":
        return {**event, "state": "gone"}
    if event["end"] == newest:
        return {**event, "state": "still present"}
    row = ends(event["start"], newest) or {"verdict": "not comparable"}
    gone = row["verdict"] == "same" or (row["verdict"] in CHANGED and row["verdict"] != event["direction"])
    state = "still present" if row["verdict"] == event["direction"] else ("gone" if gone else "undetermined")
    return {**event, "state": state, "newest": {k: row.get(k) for k in ("verdict", "ratio", "ratio_lo", "ratio_hi")}}


def link_recoveries(events: list[dict]) -> list[dict]:
    """``events`` (one variant and shape, in order) with each step or drift that is gone at the newest build linked
    to the first later event of the other direction, which undid it: ``undone_by`` on the first and ``undoes`` on
    the second (each the other's start and end builds), whose ``state`` is then "recovery" (it undid a regression)
    or "gain lost" (it undid a gain), not "still present"."""
    for i, e in enumerate(events):
        if e["kind"] == "excursion" or e.get("state") != "gone":
            continue
        later = next((x for x in events[i + 1:] if x["kind"] != "excursion" and x["direction"] != e["direction"]
                      and "undoes" not in x), None)
        if later:
            e["undone_by"], later["undoes"] = [later["start"], later["end"]], [e["start"], e["end"]]
            later["state"] = "recovery" if e["direction"] == "slower" else "gain lost"
    return events


def build_time(run: dict, key: tuple[str, str], col: str) -> dict:
    """The time of (variant, shape) ``key`` in one build: its repeat medians of column ``col`` (ms) with their
    interval: the rerun interval (attnprof.analysis.stats.between_run_interval) for device times, the lowest to
    highest capture (host_range) for host times. {n, center, lo, hi, status}."""
    s = run["summary"]
    row = s[(s["variant"] == key[0]) & (s["shape_key"] == key[1])]
    if not len(row):
        return {"n": 0, "center": None, "lo": None, "hi": None, "status": None}
    medians = repeat_medians(run.get("repeats"), row.iloc[0], key[0], key[1], col)
    stat = (host_range if col.startswith("cpu_") else between_run_interval)(medians)
    return {**{k: stat[k] for k in ("n", "center", "lo", "hi")}, "status": row.iloc[0]["status"]}


def structural(pair: dict, a: dict, b: dict) -> list[dict]:
    """The exact changes of one link (compare_pair's dict ``pair`` of result sets ``a`` -> ``b``): each {variant,
    shape_key, what, a, b} for kernels (names without template arguments) and aten ops added/removed, a status change with PyTorch's reason (compare_pair's
    ``support``), sdpa_auto's dispatch, correctness (``rel_error_ok``) and torch.compile's first call."""
    out = [_change((r["variant"], r["shape_key"]), key.replace("_", " "), None, r[key])
           for r in pair["rows"] for key in ("kernels_added", "kernels_removed", "ops_added", "ops_removed") if r.get(key)]
    out += [_change((s["variant"], s["shape_key"]), "status", _status_text(s["status_a"], s["reason_a"]),
                    _status_text(s["status_b"], s["reason_b"])) for s in pair["support"]]
    out += [_change(("sdpa_auto", d["shape_key"]), "dispatch", d["a"], d["b"])
            for d in pair["dispatch"] if d["changed"] and d["a"] and d["b"]]
    return out + _checks(pair, a, b)


def _status_text(status: str, reason: str | None) -> str:
    return f"{status} ({reason})" if reason else status


def _checks(pair: dict, a: dict, b: dict) -> list[dict]:
    """Correctness and torch.compile's first call that changed between ``a`` and ``b`` (rows of both)."""
    out, checked = [], [x["summary"].set_index(["variant", "shape_key"]).get("rel_error_ok", {}) for x in (a, b)]
    for r in pair["rows"]:
        key = (r["variant"], r["shape_key"])
        ok = [flags.get(key) for flags in checked]  # the key is in both summaries (a row of both); NaN: not checked
        compiled = [r.get(k) is not None for k in ("compile_a_s", "compile_b_s")]
        if not any(map(pd.isna, ok)) and bool(ok[0]) != bool(ok[1]):
            out.append(_change(key, "correctness", *("correct" if x else "wrong" for x in ok)))
        if compiled[0] != compiled[1]:
            out.append(_change(key, "compile", *("compiled" if x else "no compile" for x in compiled)))
    return out


def _change(key: tuple[str, str], what: str, a, b) -> dict:
    """One structural change of (variant, shape_key) ``key``: {variant, shape_key, what, a, b}."""
    return {"variant": key[0], "shape_key": key[1], "what": what, "a": a, "b": b}


def together(pair: dict) -> str | None:
    """"slower" or "faster" where every variant with a time verdict at this link moved that way (two variants or
    more): not one variant's code but the machine, or something every variant shares; else None."""
    moved = {r["variant"]: r["verdict"] for r in pair["rows"] if r["verdict"] in (*CHANGED, *UNDECIDED)}
    kinds = set(moved.values())
    return kinds.pop() if len(moved) >= 2 and len(kinds) == 1 and kinds <= set(CHANGED) else None


def cell_keys(runs: list[dict], pairs: list[dict]) -> list[tuple[str, str]]:
    """Every (variant, shape) any link judged, in the first build's order (its grid: the study shape first), then
    the variants and shapes of later builds."""
    seen = {(r["variant"], r["shape_key"]) for p in pairs for r in p["rows"]}
    order = [k for x in runs for k in x["summary"][["variant", "shape_key"]].itertuples(index=False, name=None)]
    shapes = list(dict.fromkeys(s for _, s in order))
    keys = list(dict.fromkeys(k for k in order if k in seen))
    return sorted(keys, key=lambda k: (shapes.index(k[1]), keys.index(k)))


def history(runs: list[dict], judge: Callable[[dict, dict], dict]) -> dict:
    """The history of ``runs`` (compare_pair's dicts, in build order, two or more) judged link by link with
    ``judge(a, b)`` (compare_pair with the config's thresholds). Returns a JSON-serialisable dict: builds (name,
    label, torch), links (compare_pair's dict per link, with ``structural`` and ``together``), cells (per variant
    and shape: the time per build, each link's verdict (a step's with its :func:`kernel_shares`), and the events
    with their state at the newest build), and ``extra_pairs`` (the end-build comparisons made beyond the links, for
    the multiplicity statement)."""
    if len(runs) < 2:
        raise ValueError("history needs at least two result sets (config history.runs), in build order")
    pair = judge_cache(runs, judge)
    links = [pair(i, i + 1) for i in range(len(runs) - 1)]
    col = judged_time(runs[0]["summary"], 0.0, 0.0)[0]
    cells = [_cell(runs, key, links, pair, col) for key in cell_keys(runs, links)]
    for i, link in enumerate(links):
        link.update(structural=structural(link, runs[i], runs[i + 1]), together=together(link))
    return {"builds": [_build(x) for x in runs], "time_column": col, "links": links, "cells": cells,
            "extra_pairs": [{k: p[k] for k in ("a", "b", "joint")} for (i, j), p in pair.done.items() if j != i + 1]}


def kernel_shares(a: pd.DataFrame | None, b: pd.DataFrame | None, key: tuple[str, str]) -> dict | None:
    """Each kernel's share of the change in device time per forward of (variant, shape) ``key`` from build ``a`` to
    build ``b`` (their kernel tables, kernels.csv: repeat 1's capture, us per timing-complete forward;
    attnprof.analysis.tables.kernel_table): share_pct = 100 x Δ(the kernel's us per forward) / Δ(the sum over every
    kernel, memcpy and memset), so the shares sum to 100 %; a kernel (full name) in one build only counts 0 us in the other, and
    one that moved against the total has a negative share. Returns {a_us, b_us, delta_us, kernels: [{kernel, label,
    a_us, b_us, delta_us, share_pct}]}, the largest change first; None where either build has no timed kernel of ``key``
    (a CPU run has none) or their sums are equal."""
    per = [_us_per_forward(t, key) for t in (a, b)]
    if any(x is None for x in per):
        return None
    both = pd.concat([per[0]["us"], per[1]["us"]], axis=1, keys=["a_us", "b_us"]).fillna(0.0)
    both["delta_us"] = both["b_us"] - both["a_us"]
    total = float(both["delta_us"].sum())
    if total == 0:
        return None
    labels = pd.concat([per[1]["label"], per[0]["label"]]).groupby(level=0).first()
    both = both.assign(share_pct=100 * both["delta_us"] / total, label=labels).sort_values("delta_us", key=abs, ascending=False)
    return {"a_us": float(both["a_us"].sum()), "b_us": float(both["b_us"].sum()), "delta_us": total,
            "kernels": [{"kernel": name, **r} for name, r in both.to_dict("index").items()]}


def _us_per_forward(kernels: pd.DataFrame | None, key: tuple[str, str]) -> pd.DataFrame | None:
    """The us per forward and label of each kernel of ``key`` in a kernel table (index: its full name), or None."""
    if kernels is None or not {"us_per_forward", "label"} <= set(kernels):
        return None
    rows = kernels[(kernels["variant"] == key[0]) & (kernels["shape_key"] == key[1]) & kernels["us_per_forward"].notna()]
    if rows.empty:
        return None
    return rows.groupby("kernel").agg(us=("us_per_forward", "sum"), label=("label", "first"))


def _cell(runs: list[dict], key: tuple[str, str], links: list[dict], pair, col: str) -> dict:
    rows = [row_of(p, key) or {"verdict": "not comparable"} for p in links]
    ends = lambda i, j: row_of(pair(i, j), key)  # noqa: E731
    events = link_recoveries([mark_state(e, len(runs) - 1, ends) for e in find_events([r["verdict"] for r in rows], ends)])
    for e in (e for e in events if e["kind"] == "drift"):
        e.update(_drift_evidence(runs[e["start"]], runs[e["end"]], key, pair(e["start"], e["end"])))
    return {"variant": key[0], "shape_key": key[1], "times": [build_time(x, key, col) for x in runs],
            "links": [_link(r, runs[i:i + 2], key) for i, r in enumerate(rows)], "events": events}


def _drift_evidence(a: dict, b: dict, key: tuple[str, str], ends: dict) -> dict:
    """What explains a drift of ``key`` between its end builds ``a`` and ``b``: each kernel's share of the change
    (their kernel tables; :func:`kernel_shares`), and compare_pair's (``ends``: its dict of ``a`` and ``b``) recipe
    changes of ``key`` and environment differences."""
    recipes = [r for r in ends.get("recipes") or [] if (r["variant"], r["shape_key"]) == key]
    return {"kernel_shares": kernel_shares(a["kernels"], b["kernels"], key), "recipes": recipes,
            "env_diff": ends["env_diff"]}


def _link(row: dict, ends: list[dict], key: tuple[str, str]) -> dict:
    """One link of a cell: its verdict (compare_pair's ``row``) and, at a step, each kernel's share of it."""
    shares = kernel_shares(ends[0]["kernels"], ends[1]["kernels"], key) if row["verdict"] in CHANGED else None
    return {**{k: row.get(k) for k in ("verdict", "ratio", "ratio_lo", "ratio_hi", "why", "repeats_needed", "paired")},
            "kernel_shares": shares}


def _build(run: dict) -> dict:
    """A build's name, its label (its A/B environment's name, else its torch build, else its name) and torch."""
    env = run.get("env") or {}
    return {"name": run["name"], "torch": env.get("torch"),
            "label": (env.get("ab") or {}).get("environment") or env.get("torch") or run["name"]}


def build_rows(cell: dict) -> list[dict]:
    """Per build of one of history.json's ``cells``: {time (its ``times`` entry), link (the verdict of the link that
    leads to it; None for the first build), event (the kind of the event that ends there, None where none does:
    events never overlap, so one at most)}."""
    ends = {e["end"]: e["kind"] for e in cell["events"]}
    return [{"time": t, "link": cell["links"][j - 1] if j else None, "event": ends.get(j)}
            for j, t in enumerate(cell["times"])]


def history_table(doc: dict) -> pd.DataFrame:
    """history.csv: one row per variant, shape and build: the build's time (ms, ``time_column``) with its interval
    and repeats, and the verdict of the link that leads to it (none for the first build) with its ratio and
    interval, and the event that ends at it (:func:`build_rows`)."""
    return pd.DataFrame([{"variant": c["variant"], "shape_key": c["shape_key"], "build": build["label"], "run": build["name"],
                          "status": r["time"]["status"], "time_ms": r["time"]["center"], "lo_ms": r["time"]["lo"],
                          "hi_ms": r["time"]["hi"], "repeats": r["time"]["n"],
                          **{k: (r["link"] or {}).get(k) for k in ("verdict", "ratio", "ratio_lo", "ratio_hi")},
                          "events": r["event"] or ""}
                         for c in doc["cells"] for build, r in zip(doc["builds"], build_rows(c))])
