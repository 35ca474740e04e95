"""The history page's context (report/history.html.j2) from history.json (attnprof.analysis.history): page 1's
sentences (the steps that matter, in words, with their numbers), the one multiplicity statement of the page, and per
variant its time per build, the link verdicts and the recipe changes of each step's link. Every number comes from
history.json, which compare's own function made; nothing is judged here."""

from __future__ import annotations

from attnprof.analysis.history import build_rows
from attnprof.analysis.verdict import CHANGED
from attnprof.model.fmt import format_number, format_range

#: Words of a change's state at the newest build, where it is not gone (a gone one's words name its direction).
STATE_WORDS = {"still present": "still present at the newest build", "undetermined": "inconclusive at the newest build"}


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else format_number(abs(ratio - 1) * 100, 2) + " %"


def _interval(e: dict) -> str:
    if e.get("ratio") is None:
        return ""
    inner = f", {format_range(e['ratio_lo'], e['ratio_hi'], digits=4)}" if e.get("ratio_lo") is not None else ""
    return f"{format_number(e['ratio'], 4)}x{inner}"


def event_sentence(e: dict, cell: dict, labels: list[str]) -> str:
    """One event of one (variant, shape) in words, with its ratio and interval and its state at the newest build."""
    at = f"{cell['variant']} at {cell['shape_key']}"
    if e["kind"] == "excursion":
        return (f"{at}: {labels[e['start'] + 1]} only: {_pct(e['ratio'])} {e['direction']} there ({_interval(e)})"
                f"{_carried_by(e, cell)}, back at {labels[e['end']]} (one event, not two steps)")
    what = "drifted" if e["kind"] == "drift" else "stepped"
    tail = " (no single link beyond the threshold)" if e["kind"] == "drift" else ""
    return (f"{at}: {what} {_pct(e['ratio'])} {e['direction']} at {_span(labels, e['start'], e['end'])} "
            f"({_interval(e)}){tail}{_carried_by(e, cell)}; {_state_words(e, labels)}")


def _carried_by(e: dict, cell: dict) -> str:
    """Which kernel carries a step or drift: the largest of its kernel shares (a drift's own, a step's link's), or
    nothing where it has none (a CPU run)."""
    shares = e.get("kernel_shares") if e["kind"] == "drift" else cell["links"][e["start"]].get("kernel_shares")
    if not shares or not shares["kernels"]:
        return ""
    top = shares["kernels"][0]
    return f", {format_number(top['share_pct'], 3)} % of it in {top['label']}"


def _span(labels: list[str], start: int, end: int) -> str:
    return f"{labels[start]} \u2192 {labels[end]}"


def _state_words(e: dict, labels: list[str]) -> str:
    """An event's state at the newest build in words: the change it undoes, the change that undid it, or its state."""
    if e.get("undoes"):
        return f"undoing the change at {_span(labels, *e['undoes'])}"
    if e.get("state") == "gone":  # a regression recovered, a gain lost: at the change that undid it, if one did
        at = f"at {_span(labels, *e['undone_by'])}" if e.get("undone_by") else "by the newest build"
        return f"{'recovered' if e['direction'] == 'slower' else 'lost again'} {at}"
    return STATE_WORDS.get(e.get("state"), "")


def _structural_sentence(s: dict, span: str) -> str:
    if isinstance(s["b"], list):  # kernels or ops added or removed: their names
        return f"{span}: {s['variant']} at {s['shape_key']}: {s['what']}: {', '.join(s['b'])}"
    return f"{span}: {s['variant']} at {s['shape_key']}: {s['what']} {s['a']} \u2192 {s['b']}"


def page1(doc: dict) -> list[str]:
    """Page 1's sentences: every event (by its first build), or one sentence that no time changed; every structural
    change; every link where all variants moved together."""
    labels = [b["label"] for b in doc["builds"]]
    events = sorted((e["start"], event_sentence(e, c, labels)) for c in doc["cells"] for e in c["events"])
    out = [s for _, s in events] or [_no_event(doc)]
    for i, link in enumerate(doc["links"]):
        span = _span(labels, i, i + 1)
        out += [_structural_sentence(s, span) for s in link["structural"]]
        if link["together"]:
            out.append(f"{span}: every variant judged moved {link['together']} together: that is the machine (or "
                       "something every variant shares), not one variant's code")
    if not any(link["structural"] for link in doc["links"]):
        out.append(f"No structural change at any of the {len(doc['links'])} links: no kernel or op added or removed, "
                   "and no change of status, sdpa_auto's dispatch, correctness or compile success")
    return out


def _no_event(doc: dict) -> str:
    """Page 1's sentence where no time changed: the threshold, and how many link verdicts were left inconclusive."""
    every = [lk["verdict"] for c in doc["cells"] for lk in c["links"]]
    verdicts = [v for v in every if v not in ("not comparable", "not judged")]
    open_ = sum(v == "inconclusive" for v in verdicts)
    apart = f" ({len(every) - len(verdicts)} more not comparable or not judged)" if len(every) > len(verdicts) else ""
    shown = (f"No step, one-build excursion or drift of a time beyond \u00b1{format_number(doc['links'][0]['threshold'] * 100)}"
             f" % was shown over the {len(doc['builds'])} builds")
    if open_ == len(verdicts) and verdicts:
        return (f"{shown}, and none was ruled out: all {open_} link verdicts are inconclusive (the rounds spread too "
                "much to decide; a change up to their intervals is possible)")
    return (f"{shown}; {open_} of the {len(verdicts)} judged link verdicts inconclusive (a change up to their "
            f"intervals cannot be ruled out there){apart}")


def multiplicity(doc: dict) -> dict:
    """The page's one multiplicity statement: rows judged over every link and every end-build comparison, and the
    expected number of false "changed" rows among them if nothing changed (each comparison's joint control)."""
    joints = [link["joint"] for link in doc["links"]] + [p["joint"] for p in doc["extra_pairs"]]
    return {"rows": sum(j.get("rows", 0) for j in joints), "expected_false": sum(j.get("expected_false") or 0 for j in joints),
            "links": len(doc["links"]), "extra": len(doc["extra_pairs"])}


def _recipe_changes(link: dict, cell: dict) -> list[dict]:
    """The recipe steps of ``cell``'s forward at ``link`` that are not kept unchanged: added, removed, replaced or
    moved, or kept with a time called slower or faster."""
    forward = (cell["variant"], cell["shape_key"], "forward")
    return [x for r in link.get("recipes") or [] if (r["variant"], r["shape_key"], r["pass"]) == forward
            for g in r["groups"] for x in g["rows"] if x["kind"] != "kept" or x.get("verdict") in CHANGED]


def explained(doc: dict) -> list[dict]:
    """Each step's and excursion's link, and each drift between its end builds, explained: the recipe changes of the variant's forward there, each kernel's
    share of the change (attnprof.analysis.history.kernel_shares; None on a CPU run), the environment differences
    of the link and whether every variant moved together."""
    labels = [b["label"] for b in doc["builds"]]
    out = []
    for c in doc["cells"]:
        for e in c["events"]:
            if e["kind"] == "drift":
                out.append(_drift_explained(e, c, labels))
                continue
            for i in range(e["start"], e["end"]):
                link = doc["links"][i]
                out.append({"variant": c["variant"], "shape_key": c["shape_key"], "span": _span(labels, i, i + 1),
                            "verdict": c["links"][i], "recipe": _recipe_changes(link, c), "env_diff": link["env_diff"],
                            "shares": c["links"][i].get("kernel_shares"), "together": link["together"], "kind": "step"})
    return out


def _drift_explained(e: dict, cell: dict, labels: list[str]) -> dict:
    """A drift explained between its end builds (attnprof.analysis.history's drift evidence): the recipe changes, the
    kernel shares and the environment differences of the end builds."""
    return {"variant": cell["variant"], "shape_key": cell["shape_key"], "span": _span(labels, e["start"], e["end"]),
            "verdict": {"verdict": e["direction"], "ratio": e["ratio"]}, "recipe": _recipe_changes(e, cell),
            "env_diff": e.get("env_diff"), "shares": e.get("kernel_shares"), "together": None, "kind": "drift"}


def history_context(doc: dict, css: str, plots: dict[str, str]) -> dict:
    """The template's context: ``doc`` (history.json), the CSS and each variant's plot (a data URI)."""
    variants = list(dict.fromkeys(c["variant"] for c in doc["cells"]))
    host = doc["time_column"].startswith("cpu_")
    return {"doc": doc, "css": css, "labels": [b["label"] for b in doc["builds"]], "page1": page1(doc),
            "multiplicity": multiplicity(doc), "threshold_pct": doc["links"][0]["threshold"] * 100, "explained": explained(doc),
            "time_words": "host (CPU) time per forward" if host else "device time per forward",
            "interval_words": ("lowest to highest capture" if host else
                               f"{format_number(doc['confidence'] * 100)} % rerun interval"),
            # per variant, a row per shape: per build its time, link verdict and event (analysis.history.build_rows)
            "variants": [{"name": v, "plot": plots.get(v), "rows": [{"shape_key": c["shape_key"], "builds": build_rows(c)}
                                                                    for c in doc["cells"] if c["variant"] == v]}
                         for v in variants]}
