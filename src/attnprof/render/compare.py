"""The comparison page (compare.html, compare.pdf): compare.json (attnprof.analysis.compare) turned into the
template's context (report/compare.html.j2) and nothing else: per pair, the verdict counts, the rows called changed,
what differs in kernels, ops and recipes, the dispatches that changed, the top-up rounds and the detection limit.

The verdicts themselves are compare's; :func:`detection_limit` and the top-up levels call the statistics
(attnprof.analysis.stats) thinly, as they are.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter

from attnprof.analysis.stats import CONFIDENCE, look_levels
from attnprof.analysis.verdict import CHANGED
from attnprof.model.fmt import format_range
from attnprof.model.variants import DISPATCHERS
from attnprof.render.common import cudnn_version, setting


def compare_context(doc: dict, css: str) -> dict:
    """What the compare template needs: compare.json (``cmp``, as attnprof.analysis.compare.compare_runs writes it:
    Snakemake writes it again whenever that code changes) with the practical thresholds and the confidence level in %
    (``noise_floor_pct``, ``noise_floor_host_pct``, ``confidence_pct``), each pair as :func:`pair_context` gives it,
    and the CSS."""
    cmp = {**doc, "noise_floor_pct": 100 * doc["noise_floor"], "confidence_pct": 100 * doc["confidence"],
           "noise_floor_host_pct": 100 * doc["noise_floor_host"]}
    cmp["pairs"] = [pair_context(pair, doc["confidence"]) for pair in doc["pairs"]]
    return {"cmp": cmp, "css": css}


def _differ(rows: list[dict], what: str) -> list[str]:
    """'variant at shape' of the rows whose ``what`` (kernels, ops) were added or removed, once each."""
    return list(dict.fromkeys(f"{r['variant']} at {r['shape_key']}" for r in rows
                              if r.get(f"{what}_added") or r.get(f"{what}_removed")))


#: Page 1 names the inconclusive rows of a comparison where there are at most this many.
OPEN_NAMED = 5


def _open_named(rows: list[dict]) -> list[dict]:
    """The inconclusive rows page 1 names: all of them where there are at most :data:`OPEN_NAMED` and each has an
    interval, else none."""
    open_ = [r for r in rows if r["verdict"] == "inconclusive"]
    return open_ if len(open_) <= OPEN_NAMED and all(r["ratio_lo"] is not None for r in open_) else []


def pair_context(pair: dict, confidence: float = CONFIDENCE) -> dict:
    """One comparison of the compare template: its verdict counts, the rows called changed (``changed``) and the
    (variant, shape) whose kernels differ (``kernels_differ``) or ops (``ops_differ``), the smallest change its
    verdicts could find (``detection``, :func:`detection_limit`; where none, ``no_detection``: why), the dispatches
    that changed (``dispatch_changed``: a dispatcher that ran on both sides, each with its dispatcher, ``variant``)
    and those known on one side only (``dispatch_one_side``), page 1's ``headline`` (:func:`headline`) and
    ``claims``: what page 1 states, cell by cell ((verdict, variant, shape key, pass) of every row whose forward or
    backward was called slower or faster; (``dispatches to`` target, dispatcher, shape key, pass) of each side); ``open``: the inconclusive rows
    with a ratio, named on page 1 where there are at most :data:`OPEN_NAMED`; ``bwd_counts``: the backward verdicts
    counted ({verdict: n}, empty where no row has a backward)."""
    rows = pair["rows"]
    changed = [r for r in rows if r["verdict"] in CHANGED] + [_backward(r) for r in rows if r.get("bwd_verdict") in CHANGED]
    threshold = pair["threshold"]
    dispatch = _dispatches(pair)
    out = {**pair, **recipe_context(pair["recipes"]),
           "dispatch_changed": [d for d in dispatch if d.get("a") and d.get("b") and d["a"] != d["b"]],
           "dispatch_one_side": [d for d in dispatch if bool(d.get("a")) != bool(d.get("b"))],
           "rows": rows, "extra_rows": [r for r in rows if _extra(r)], "changed": changed,
           "threshold_pct": 100 * threshold, "kernels_differ": _differ(rows, "kernels"), "ops_differ": _differ(rows, "ops"),
           "sitting_pct": 100 * pair["sitting_sd"] if pair.get("sitting_sd") else None, "detection": detection_limit(rows, pair),
           "no_detection": _no_detection(rows), "claims": _compare_claims(changed, dispatch),
           "top_up": _top_up_rows(rows, pair["design"], confidence), "env_diff": _env_diff_rows(pair["env_diff"]),
           "open": _open_named(rows), "bwd_counts": _bwd_counts(rows)}
    return {**out, "headline": headline(out)}


def _bwd_counts(rows: list[dict]) -> dict[str, int]:
    """The backward verdicts counted, in the order page 1 states the forward's (the same, inconclusive, not judged,
    not comparable, slower, faster), those that occur only."""
    counts = Counter(r["bwd_verdict"] for r in rows if r.get("bwd_verdict"))
    return {v: counts[v] for v in ("same", "inconclusive", "not judged", "not comparable", *CHANGED) if counts[v]}


def _backward(row: dict) -> dict:
    """A row whose backward was called slower or faster, as page 1 states a change: its names, ``pass`` "backward",
    and the backward's verdict, ratio and interval in the forward's keys."""
    return {**row, "pass": "backward", "verdict": row["bwd_verdict"], "ratio": row["bwd_ratio"],
            "ratio_lo": row["bwd_ratio_lo"], "ratio_hi": row["bwd_ratio_hi"]}


def headline(p: dict) -> str:
    """The first words of a comparison's page 1: 'Nothing to compare' (no (variant, shape) in both result sets: no
    row, no recipe), 'What changed' (a time called changed, kernels, ops, recipes, support or a dispatch that
    differ), 'No change shown' (none, but some row inconclusive: a change up to the detection limit is not ruled
    out), else 'Nothing changed'."""
    if not p["rows"] and not p["recipes_total"]:
        return "Nothing to compare"
    if any(p[k] for k in ("changed", "kernels_differ", "ops_differ", "recipes_changed", "support", "dispatch_changed",
                          "dispatch_one_side")):
        return "What changed"
    return "No change shown" if p["counts"].get("inconclusive") else "Nothing changed"


def _no_detection(rows: list[dict]) -> str:
    """Why no row of a comparison was judged (the detection limit's place when there is none): its host times of two
    sittings, its rows with one repeat on a side, or no row."""
    why = []
    if any(r["verdict"] == "not judged" for r in rows):
        why.append("host times of two sittings are not judged (a host-time verdict needs the paired rounds of an A/B run)")
    if any(r["verdict"] != "not judged" and 1 in (r["repeats_a"], r["repeats_b"]) for r in rows):
        why.append("a side with one repeat has no between-run spread")
    return "; ".join(why) or "no (variant, shape) in both result sets"


def _env_diff_rows(diff: list[dict]) -> list[dict]:
    """compare.json's environment differences for the page: a variable an A/B environment does not set (a key under
    ``ab.env.`` absent on one side) reads "not set", not "not recorded" (which says a result set lacks the field);
    the cuDNN version as major.minor.patch (:func:`attnprof.render.common.cudnn_version`); keys of one parent
    recorded on one side only (a ``--config`` grid: ``config.shapes.cpu.seq_len``, ``...head_dim``) on one line,
    ``parent.*``, the other side's ``key=value`` pairs joined by '; '."""
    out = []
    for one_sided, group in itertools.groupby(diff, key=_one_sided_parent):
        group = list(group)
        if one_sided and len(group) > 1:
            parent, side = one_sided
            value = "; ".join(f"{d['key'][len(parent) + 1:]}={setting(d[side])}" for d in group)
            out.append({"key": f"{parent}.*", "a": None, "b": None, side: value})
        else:
            out += [_env_value(d) for d in group]
    return out


def _one_sided_parent(d: dict) -> tuple[str, str] | None:
    """(parent, the side that records it) of an environment difference recorded on one side only
    (``config.shapes.cpu`` of ``config.shapes.cpu.seq_len``); None for one on both sides, a top-level key or an
    ``ab.env.`` variable."""
    if (d.get("a") is None) == (d.get("b") is None) or "." not in d["key"] or d["key"].startswith("ab.env."):
        return None
    return d["key"].rsplit(".", 1)[0], "b" if d.get("a") is None else "a"


def _env_value(d: dict) -> dict:
    """One environment difference as the page words it ("not set", the cuDNN version)."""
    d = {**d, **{side: "not set" for side in ("a", "b") if d.get(side) is None and d["key"].startswith("ab.env.")}}
    if d["key"] == "cudnn":
        d.update({side: cudnn_version(d[side]) or None for side in ("a", "b")})
    return d


def _top_up_rows(rows: list[dict], design: dict | None, confidence: float) -> dict:
    """The rows that got rounds added after look 1 (attnprof.analysis.verdict): ``rows`` (each with ``added``
    rounds) and how many of them the rounds decided (``decided``), and the interval levels of each look in %
    (``changed_pct``, ``same_pct``: attnprof.analysis.stats.look_levels)."""
    topped = [{**r, "added": r["top_up"]["rounds"] - r["top_up"]["base"]} for r in rows if r.get("top_up")]
    changed, same = look_levels(confidence, (design or {}).get("looks") or 1)
    return {"rows": topped, "decided": sum(r["verdict"] != "inconclusive" for r in topped),
            "changed_pct": 100 * changed, "same_pct": 100 * same}


def _extra(row: dict) -> bool:
    """Whether a compare row goes in the backward / torch.compile table: a backward or a compile record in either
    result set."""
    return bool(row.get("bwd_verdict") or row.get("compile_a_s") or row.get("compile_b_s"))


#: A dispatch finding's statement (attnprof.findings.rules.kernels): '<dispatcher> dispatched to <backend>: same
#: kernels as <variant>'.
_DISPATCHED = re.compile(r"^(?P<dispatcher>\S+) dispatched to \S+: same .*? as (?P<target>\S+?)(?:;|$)")


def _dispatches(pair: dict) -> list[dict]:
    """A pair's dispatch entries (compare.json: what a dispatcher ran at each shape in either set), each with the
    dispatcher it is about (``variant``)."""
    return [{**d, "variant": _dispatcher_of(d)} for d in pair.get("dispatch") or []]


def _dispatcher_of(entry: dict) -> str:
    """The dispatcher a compare.json dispatch entry is about, from its statements (the registry's dispatchers,
    attnprof.model.variants.DISPATCHERS, when neither names one)."""
    return next((m["dispatcher"] for side in ("statement_a", "statement_b")
                 if (m := _DISPATCHED.match(entry.get(side) or ""))), ", ".join(DISPATCHERS))


def _compare_claims(changed: list[dict], dispatch: list[dict]) -> dict[str, set]:
    """``claims`` of :func:`pair_context`: ``both`` (the verdicts) and ``a``/``b`` (each side's dispatches)."""
    def side(s: str) -> set:
        return {(f"dispatches to {m['target']}", m["dispatcher"], d["shape_key"], "forward") for d in dispatch
                if (m := _DISPATCHED.match(d.get(f"statement_{s}") or ""))}
    return {"both": {(r["verdict"], r["variant"], r["shape_key"], r.get("pass", "forward")) for r in changed},
            "a": side("a"), "b": side("b")}


def recipe_context(recipes: list[dict]) -> dict:
    """The compare template's recipe section from a pair's ``recipes`` (attnprof.analysis.compare.recipe_changes):
    ``recipes_changed`` (the (variant, shape, pass) entries whose recipe differs or one of whose kept steps changed
    its time, each group's rows without the kept steps whose time verdict is not slower/faster, so that a table shows
    only what differs; ``kept_hidden`` counts the rows left out), of which ``recipes_differ`` (steps added, removed,
    replaced or moved) and ``recipes_retimed`` (the same steps, some slower or faster), ``recipes_same`` (how many
    entries have the same steps in the same order) and ``recipe_counts`` (rows of each kind over every entry)."""
    changed = [c for c in map(_recipe_shown, recipes) if c is not None]
    differ = [r for r in changed if not r.get("same")]
    return {"recipes_changed": changed, "recipes_same": len(recipes) - len(differ), "recipe_counts": _recipe_totals(recipes),
            "recipes_total": len(recipes), "recipes_differ": differ,
            "recipes_retimed": [r for r in changed if r.get("same")]}


def _recipe_totals(recipes: list[dict]) -> dict[str, int]:
    """Rows of each kind (kept, added, removed...) over every recipe entry."""
    totals: Counter[str] = Counter()  # update, unlike +, keeps a kind counted 0
    for r in recipes:
        totals.update(r.get("counts") or {})
    return dict(totals)


def _kept_unchanged(row: dict) -> bool:
    """A recipe row the tables leave out: a kept step whose time is not slower/faster and whose launch is the same."""
    return row["kind"] == "kept" and row.get("verdict") not in CHANGED and not row.get("launch_changed")


def _recipe_shown(r: dict) -> dict | None:
    """A recipe entry as the compare's tables show it: each group without its unchanged kept steps (``kept_hidden``
    counts them); None when its steps are the same and none changed."""
    groups = r.get("groups") or []
    shown = [{**g, "rows": [x for x in g["rows"] if not _kept_unchanged(x)]} for g in groups]
    hidden = sum(len(g["rows"]) for g in groups) - sum(len(g["rows"]) for g in shown)
    if r.get("same") and not any(g["rows"] for g in shown):
        return None
    return {**r, "groups": shown, "kept_hidden": hidden}


def detection_limit(rows: list[dict], pair: dict) -> dict | None:
    """The smallest change the verdicts of one comparison find with 80 % power as a lone change, per row from the
    pair's simulation (compare.json ``joint.detectable``: attnprof.analysis.verdict_sim.detectable, the pair's own
    rounds resampled). ``pct``: the limit that most rows (more than half of those judged) reach, with how many
    (``within`` of ``rows``), the range over the rows, the rows not found even at the largest change simulated
    (``unreached``) and the repeats per side. None when no row was judged."""
    found = (pair["joint"] or {}).get("detectable") or {}
    if not found:
        return None
    limits = sorted(100 * v for v in found.values() if v is not None)
    repeats = {(r.get("repeats_a"), r.get("repeats_b")) for r in rows if r.get("p") is not None}
    ra, rb = (sorted({r[i] for r in repeats if r[i] is not None}) for i in (0, 1))

    def side(v):
        return "?" if not v else (str(v[0]) if len(v) == 1 else format_range(str(v[0]), str(v[-1])))
    most = len(found) // 2 + 1
    pct = limits[min(most, len(limits)) - 1] if limits else None
    within = sum(limit <= pct for limit in limits) if limits else 0
    return {"pct": pct, "within": within, "rows": len(found), "min_pct": limits[0] if limits else None,
            "max_pct": limits[-1] if limits else None, "unreached": len(found) - len(limits),
            "at_threshold": bool(limits) and limits[0] <= 100 * pair.get("threshold", 0) + 1e-6,
            "repeats": f"{side(ra)} / {side(rb)}"}
