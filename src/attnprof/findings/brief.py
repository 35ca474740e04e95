"""Page 1 of a result set in words: the statements of what was found (the fastest variant and its margin, wrong
results, what a dispatcher ran and what it cost on the host, hidden copies, FP32 GEMMs, the backward, torch.compile,
memory-bound shapes, what did not run) and the small print under them, as data that every page and test reads.

Each statement is a dict: ``text`` (the sentence, its numbers with their intervals), ``href`` (the anchor of its
evidence in the report: a summary row ``#v-<shape>-<variant>``, a finding ``#f-<shape>-<i>``, a table) and
``claims`` (what it states, cell by cell: (claim, variant, shape key, pass), the references a test checks against the
tables). :func:`page1` makes them from the run's files; the report (attnprof.render.report) only lays them out.
Deciding what is true (the ranking: attnprof.findings.ranking; the findings: attnprof.findings.rules) happens here or
below, never in render.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import pandas as pd

from attnprof.analysis.stats import SAME_SITTING
from attnprof.analysis.tables import CAPTURE_ONLY_COLUMNS, derive_columns, has_run_interval
from attnprof.analysis.trace import kernel_label
from attnprof.findings.data import RunData, at_shape, records
from attnprof.findings.expectations import WITHIN_NOISE
from attnprof.findings.ranking import PASSES, check_failed, claims as ranking_claims, present, rank, spread_words, time_prefix
from attnprof.findings.rules.timing import rule_fidelity, rule_speed
from attnprof.model.fmt import format_range, format_value
from attnprof.model.gpus import differing_kinds, number_text
from attnprof.model.variants import COMPILED, DISPATCHERS, uncompiled_of


def page1(summary: pd.DataFrame, kernels: pd.DataFrame | None, findings: dict, calibration: dict | None = None,
          repeats: pd.DataFrame | None = None, control: dict | None = None) -> dict:
    """Page 1 of a result set as data, from its summary.csv, kernels.csv, findings.json (``findings``),
    calibration.json, repeats.csv (current format: attnprof.analysis.records.load_repeats) and profiler self-check
    (attnprof.analysis.control.check_control_table of control.csv; None: no control capture). Returns
    ``statements`` (page 1's findings in order, see the module's docstring), ``notes`` (the small print under them:
    :func:`brief_notes`), ``study`` (the shape key the study's expectations were checked at, else the first; None
    for an empty summary), ``shapes`` (shape key -> its findings with their anchors: :func:`shape_findings`),
    ``gpus_used`` (:func:`gpus_used`) and ``memory_bound`` (:func:`memory_bound`)."""
    summary = derive_columns(summary)  # GB/s of a summary.csv written before its formula was declared
    keys = list(dict.fromkeys(summary["shape_key"]))
    stored = {s["shape_key"]: s for s in findings["shapes"]}
    shapes = [{"key": k, "findings": shape_findings((stored.get(k) or {}).get("findings", []), summary, kernels, k)}
              for k in keys]
    study_at = next((k for k in keys if (stored.get(k) or {}).get("expectations")), keys[0] if keys else None)
    study = next((sh for sh in shapes if sh["key"] == study_at), None)
    used, bound = gpus_used(repeats), memory_bound(summary, calibration or {})
    statements = _ordered(in_brief(study, shapes, summary, kernels), memory_bound_brief(summary, calibration or {}, bound),
                          used, control)
    return {"statements": statements, "notes": brief_notes(study, shapes, summary, used), "study": study_at,
            "shapes": {sh["key"]: sh["findings"] for sh in shapes}, "gpus_used": used, "memory_bound": bound}


def shape_findings(stored: list[dict], summary: pd.DataFrame, kernels: pd.DataFrame | None, shape_key: str) -> list[dict]:
    """A shape's findings as every page states them (:func:`timing_findings`: the timing rules made again by this
    engine), each with ``anchor``, the id of its row in the report's findings table (``f-<shape>-<i>``, from 1)."""
    kernels = kernels if kernels is not None else pd.DataFrame(columns=["variant", "shape_key"])
    return [{**item, "anchor": f"f-{shape_key}-{i}"}
            for i, item in enumerate(timing_findings(stored, summary, kernels, shape_key), 1)]


def _ordered(brief: list[dict], memory: list[dict], used: list[dict], control: dict | None) -> list[dict]:
    """Page 1's findings in order: the profiler's failed self-check first (every count below may be the profiler's),
    GPUs of different kinds, then :func:`in_brief`'s, with the memory-bound sentences before the captures that
    published nothing, which close it."""
    at = next((i for i, b in enumerate(brief) if b.get("kind") == "missing"), len(brief))
    brief = brief[:at] + memory + brief[at:]
    if len(used) > 1 and differing_kinds(used):  # page 1 says it among the findings, not in the small print
        brief.insert(0, {"text": gpu_note(used), "href": "#env", "claims": set()})
    if control and control["ok"] is False:
        brief.insert(0, {"text": "The profiler's accounting differs from the counts known by construction of its control "
                                 f"workload ({control['why']}): the kernel, memcpy, memset and op counts of this result set "
                                 "are suspect.", "href": "#self-check", "claims": set()})
    return brief


#: The rules whose findings read summary.csv and kernels.csv only: the report makes them again (:func:`timing_findings`).
TIMING_RULES = ("speed", "fidelity")


def timing_findings(stored: list[dict], summary: pd.DataFrame, kernels: pd.DataFrame, shape_key: str) -> list[dict]:
    """A shape's findings with those of :data:`TIMING_RULES` made again from the tables by this engine
    (attnprof.findings.rules.timing: the one ranking rule), in the place of the stored ones (findings.json of an
    earlier engine ranked dispatchers and wrong results); where none is stored, before the correctness rules, where
    the rules run."""
    d = RunData(shape_key, at_shape(summary, shape_key).reset_index(drop=True), at_shape(kernels, shape_key),
                pd.DataFrame(columns=["variant", "api", "calls_per_forward"]),
                pd.DataFrame(columns=["variant", "op", "calls_per_forward"]), {})
    fresh = rule_speed(d) + rule_fidelity(d)
    after = ("correctness", "grad_correctness", "backward")
    at = next((i for i, f in enumerate(stored) if f["rule"] in TIMING_RULES + after), len(stored))
    return stored[:at] + fresh + [f for f in stored[at:] if f["rule"] not in TIMING_RULES]


def backward_numbers(row: dict, gpu: bool, findings: list[dict]) -> dict:
    """The backward columns the report states for a summary row (config passes): ``bwd_ms`` and its
    quartiles ``bwd_q1``/``bwd_q3`` (device ms per backward on a GPU, host ms on a CPU),
    ``backward_over_forward`` as the row's backward finding (``findings``, rule backward) computed
    it, ``bwd_tflops`` (summary.csv ``backward_tflops``), ``grad_worst`` (the largest of the
    gradients' relative errors against float64, no unit) with ``grad_worst_name`` (dq, dk or dv) and
    ``grad_wrong`` (the gradient check failed: the times are marked). None where absent."""
    kind = "device" if gpu else "cpu"
    ratio = next((f["numbers"]["backward_over_forward"]["value"] for f in findings), None)
    errors = {g: row.get(f"grad_rel_error_{g}") for g in ("dq", "dk", "dv") if present(row.get(f"grad_rel_error_{g}"))}
    worst = max(errors, key=errors.get) if errors else None
    return {"bwd_ms": row.get(f"{kind}_ms_per_backward"), "bwd_q1": row.get(f"{kind}_ms_backward_q1"),
            "bwd_q3": row.get(f"{kind}_ms_backward_q3"), "backward_over_forward": ratio, "bwd_tflops": row.get("backward_tflops"),
            "grad_worst": errors.get(worst), "grad_worst_name": worst, "grad_wrong": check_failed(row.get("grad_rel_error_ok"))}


#: a status of summary.csv in words, for page 1
_STATUS_WORDS = {"out_of_memory": "ran out of memory", "unsupported": "is not supported", "error": "failed",
                 "incomplete_trace": "left an incomplete trace"}


def _interval(row, prefix: str) -> str:
    """' (rerun lo–hi ms)' of a device time, '' where the row has no between-run interval; a host time (``cpu_ms``...)
    has no rerun interval: ' (captures lo–hi ms)', its lowest and highest capture (the label:
    attnprof.findings.ranking.spread_words)."""
    lo, hi = row.get(f"{prefix}_run_lo"), row.get(f"{prefix}_run_hi")
    label = spread_words(prefix, True)["label"]
    return f" ({label} {format_range(lo, hi, 'ms')})" if present(lo) and present(hi) else ""


def _time(row, prefix: str) -> str:
    """A time per forward as page 1 states it: median of the repeats in ms, with its rerun interval."""
    return f"{format_value(row[f'{prefix}_per_forward'])} ms{_interval(row, prefix)}"


def _apart(a, b, prefix: str) -> bool:
    """Whether ``a`` is faster than ``b`` outside both rerun intervals (min–max of the forwards with one repeat)."""
    def ends(r, lo, hi):
        return (r.get(f"{prefix}_run_lo"), r.get(f"{prefix}_run_hi")) if present(r.get(f"{prefix}_run_lo")) else (r.get(lo), r.get(hi))
    _, a_hi = ends(a, f"{prefix}_min", f"{prefix}_max")
    b_lo, _ = ends(b, f"{prefix}_min", f"{prefix}_max")
    return present(a_hi) and present(b_lo) and a_hi < b_lo


def _main_kernel(kernels: pd.DataFrame, variant: str, shape_key: str) -> str:
    """The label of the kernel that takes most of a variant's device time at a shape ('' without kernels)."""
    if kernels is None or not len(kernels) or "us_per_forward" not in kernels:
        return ""
    k = kernels[(kernels["variant"] == variant) & (kernels["shape_key"] == shape_key)]
    if k.empty:
        return ""
    top = k.sort_values("us_per_forward", ascending=False).iloc[0]
    return str(top.get("label") or kernel_label(top["kernel"]))


@dataclass
class _Page1:
    """What page 1's sentences read: the summary's rows (by (variant, shape)), the shapes, the study's shape
    ``skey``, the time they state (``prefix``: device_ms on a GPU, cpu_ms on a CPU) and the shapes' rankings
    (``rankings``: (shape key, pass) -> attnprof.findings.ranking.rank's result, from the ranking findings)."""

    summary: pd.DataFrame
    study: dict | None
    shapes: list[dict]
    kernels: pd.DataFrame | None

    def __post_init__(self):
        self.rows = records(self.summary)
        self.by = {(r["variant"], r["shape_key"]): r for r in self.rows}
        self.keys = list(dict.fromkeys(self.summary["shape_key"]))
        self.skey = self.study["key"] if self.study else self.keys[0]
        self.many = len(self.keys) > 1
        self.prefix = time_prefix(self.summary)
        self.gpu = self.prefix == "device_ms"
        self.where = "device" if self.gpu else "host"
        # what a statement is judged against, in words (attnprof.findings.ranking.spread_words): the rerun
        # intervals, a host time's ranges over the captures, or with one repeat the ranges over the forwards
        self.host_spans = spread_words("cpu_ms", has_run_interval(self.summary, ("cpu_ms",)))["ranges"]
        self.spans = spread_words(self.prefix, has_run_interval(self.summary, (self.prefix,)))["ranges"]
        self.rankings = self._rankings()

    def _rankings(self) -> dict[tuple[str, str], dict]:
        """(shape key, pass) -> the ranking its ranking finding carries; a shape without one (a findings.json of an
        earlier engine): the same rule on the same summary."""
        out = {(f["ranking"]["shape_key"], f["ranking"]["pass"]): f["ranking"]
               for sh in self.shapes for f in sh["findings"] if f.get("ranking")}
        for key, pass_ in itertools.product(self.keys, PASSES):
            out.setdefault((key, pass_), rank(self.summary, key, pass_))
        return out

    @property
    def thing(self) -> str:
        """What a ranking ranks in words: kernels on a GPU; on a CPU there are no kernels to tell apart."""
        return "kernel" if self.gpu else "variant"

    def wrong_at(self, at: list[dict]) -> str:
        """' (wrong at n of N shapes)' of a sweep; '' for one shape."""
        return f" (wrong at {len(at)} of {len(self.keys)} shapes)" if self.many else ""

    def shapes_text(self, n: int) -> str:
        return f"{n} shape{'' if n == 1 else 's'}"


def in_brief(study: dict | None, shapes: list[dict], summary: pd.DataFrame, kernels: pd.DataFrame | None = None) -> list[dict]:
    """Page 1's findings, 3 to 6 sentences, each with its number, its rerun interval, ``href`` (the anchor of its
    evidence) and ``claims`` (what it states, cell by cell: (claim, variant, shape key, pass)): correctness failures
    first (rel_error_ok false, then grad_rel_error_ok false), then the fastest variant and its margin over the next,
    from the shapes' ranking findings (attnprof.findings.ranking, the rule the findings table states too: a dispatcher
    and a variant with a wrong result are never ranked), what a dispatcher dispatched to and what it costs on the
    host, a hidden copy, FP32 GEMMs, the backward and torch.compile, backwards that failed, and captures that did
    not run."""
    if summary.empty:
        return []
    p = _Page1(summary, study, shapes, kernels)
    out = _wrong_brief(p) + _wrong_grad_brief(p) + _fastest_brief(p) + _dispatch_brief(p) + _work_brief(p)
    return out + _backward_brief(p) + _compile_brief(p) + _backward_failed_brief(p) + _missing_brief(p)


def _by_variant(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by variant, in their order."""
    return {v: [r for r in rows if r["variant"] == v] for v in dict.fromkeys(r["variant"] for r in rows)}


def _wrong_brief(p: _Page1) -> list[dict]:
    """A variant whose result failed the float64 check: named first, left out of every ranking."""
    return [_wrong_sentence(p, v, at) for v, at in _by_variant([r for r in p.rows if check_failed(r.get("rel_error_ok"))]).items()]


def _wrong_sentence(p: _Page1, variant: str, at: list[dict]) -> dict:
    worst = max(at, key=lambda r: r.get("rel_error") or 0)
    return {"text": f"{variant} computes a wrong result: relative error {format_value(worst.get('rel_error'), 2)} against the "
                    f"float64 reference at {worst['shape_key']}{p.wrong_at(at)}; it is left out of every ranking.",
            "href": f"#v-{worst['shape_key']}-{variant}", "claims": {("wrong", variant, r["shape_key"], "forward") for r in at}}


def _wrong_grad_brief(p: _Page1) -> list[dict]:
    """The backward's gradients (config passes with backward): a wrong gradient leads as a wrong result does."""
    return [_wrong_grad_sentence(p, v, at) for v, at in _by_variant([r for r in p.rows if check_failed(r.get("grad_rel_error_ok"))]).items()]


def _wrong_grad_sentence(p: _Page1, variant: str, at: list[dict]) -> dict:
    worst_row = max(at, key=lambda r: backward_numbers(r, p.gpu, [])["grad_worst"] or 0)
    nums = backward_numbers(worst_row, p.gpu, [])
    what = f"{nums['grad_worst_name']} relative error {format_value(nums['grad_worst'], 2)}" if nums["grad_worst_name"] else "relative error"
    return {"text": f"{variant} computes wrong gradients in its backward: {what} against the float64 reference at "
                    f"{worst_row['shape_key']}{p.wrong_at(at)}; its backward times are shown, marked, are not those of a "
                    "correct backward and are not ranked.",
            "href": f"#backward-{worst_row['shape_key']}",
            "claims": {("wrong", variant, r["shape_key"], "backward") for r in at}}


def _ranked(r: dict) -> bool:
    """Whether a ranking names a fastest variant: the first ahead outside every interval, or the only one ranked."""
    return len(r["order"]) == 1 or r["clear"]


def _fastest_brief(p: _Page1) -> list[dict]:
    """The fastest variant, shape by shape, as the shapes' forward rankings state it, and the wrong results they left
    out."""
    per_shape = {k: r for k in p.keys if (r := p.rankings[(k, "forward")])["order"]}
    if not per_shape:
        return []
    r = per_shape.get(p.skey) or next(iter(per_shape.values()))
    text = _fastest_text(p, per_shape, r) + _wrong_left_out(per_shape.values())
    return [{"text": text + ".", "href": "#sweep" if p.many else "#study", "claims": _stated(per_shape.values())}]


def _wrong_left_out(rankings) -> str:
    """' (wrong results left out: X, Y)' of the variants ``rankings`` left out for a wrong result; '' for none."""
    wrong = sorted({v for r in rankings for v, why in r["left_out"].items() if why.startswith("wrong")})
    return f" (wrong results left out: {', '.join(wrong)})" if wrong else ""


def _stated(rankings) -> set[tuple]:
    """What page 1 states of ``rankings``: each one's fastest or tied variants (attnprof.findings.ranking.claims)."""
    return {c for r in rankings for c in ranking_claims(r) if c[0] != "ranked"}


def _fastest_text(p: _Page1, per_shape: dict, r: dict) -> str:
    """The sentence of :func:`_fastest_brief` for ranking ``r`` (the study shape's): the only one ranked, the fastest
    and its margin, or the variants tied."""
    if len(r["order"]) == 1:
        best = p.by[(r["order"][0], r["shape_key"])]
        return (f"Only {best['variant']} is ranked at {r['shape_key']} (the others: {_left_out_words(r)}): "
                f"{_time(best, p.prefix)} {p.where} time per forward")
    if r["clear"]:
        others = _elsewhere(p, per_shape, r["order"][0])
        return _lead(p, per_shape, r, others) + _margin(p, per_shape, r) + ("; elsewhere " + "; ".join(others) if others else "")
    return _tie_words(p, r)


def _left_out_words(r: dict) -> str:
    return "; ".join(f"{v}, {why}" for v, why in r["left_out"].items()) or "none in this result set"


def _what(p: _Page1, variant: str, key: str) -> str:
    """A variant with the library's words for its fused kernel (the fusion finding), else its main kernel's name."""
    fused = next((f["headline"].split(": ", 1)[-1] for f in (p.study or {}).get("findings", [])
                  if f["rule"] == "fusion" and f["variants"][:1] == [variant]), "")
    kname = _main_kernel(p.kernels, variant, key) if p.gpu else ""
    return variant + (f" ({fused})" if fused else (f" (kernel {kname})" if kname else ""))


def _lead(p: _Page1, per_shape: dict, r: dict, others: list[str]) -> str:
    """'The fastest kernel at KEY is X: its time': the winner at the study's shape, whose key it names once; 'The
    fastest kernel is X, at all n shapes: its time at KEY' where it wins at every shape of a sweep (``others``, from
    :func:`_elsewhere`, empty)."""
    best, key = r["order"][0], r["shape_key"]
    time = f"{_time(p.by[(best, key)], p.prefix)} {p.where} time per forward"
    if p.many and not others:
        return f"The fastest {p.thing} is {_what(p, best, key)}, at all {len(per_shape)} shapes: {time} at {key}"
    return f"The fastest {p.thing} at {key} is {_what(p, best, key)}: {time}"


def _elsewhere(p: _Page1, per_shape: dict, best: str) -> list[str]:
    """The other winners ('W is fastest at n shapes') and the shapes without a clear fastest; [] where ``best`` wins
    at all."""
    firsts = [q["order"][0] for q in per_shape.values() if _ranked(q)]
    unclear = len(per_shape) - len(firsts)
    others = [f"{w} is fastest at {p.shapes_text(firsts.count(w))}" for w in dict.fromkeys(firsts) if w != best]
    return others + ([f"no clear fastest at {p.shapes_text(unclear)} (the {p.spans} overlap)"] if unclear else [])


def _margin(p: _Page1, per_shape: dict, r: dict) -> str:
    """', r× faster than the next variant, Y, at T', and the range of the margins where the same variant wins."""
    key, col = r["shape_key"], r["column"]
    best, nxt = p.by[(r["order"][0], key)], p.by[(r["order"][1], key)]
    label = _main_kernel(p.kernels, nxt["variant"], key) if p.gpu else ""
    text = (f", {format_value(nxt[col] / best[col])}\u00d7 faster than the next variant, {nxt['variant']}"
            + (f" ({label})" if label and len(label) <= 40 else "") + f", at {_time(nxt, p.prefix)}" + _unranked(p, r))
    margins = [q["median"][q["order"][1]] / q["median"][q["order"][0]] for q in per_shape.values()
               if q["clear"] and q["order"][0] == best["variant"]]
    if p.many and len(margins) > 1:
        text += (f"; where it is ahead outside the {p.spans} ({p.shapes_text(len(margins))}), its margin is "
                 f"{format_range(min(margins), max(margins), '×')}")
    return text


def _unranked(p: _Page1, r: dict) -> str:
    """'; V, T ms, is not ranked (why)' for each variant left out of ranking ``r`` (a dispatcher, a wrong result)
    whose median lies between the first and the next: a reader looking for it between them learns why it is not there."""
    key, col = r["shape_key"], r["column"]
    first, nxt = (p.by[(v, key)][col] for v in r["order"][:2])
    skipped = [(v, row) for v, why in r["left_out"].items()
               if (row := p.by.get((v, key))) and present(row.get(col)) and first <= row[col] < nxt]
    return "".join(f"; {v}, {format_value(row[col])} ms, is not ranked ({r['left_out'][v]})" for v, row in skipped)


def _tie_words(p: _Page1, r: dict) -> str:
    """No fastest outside the intervals: the first by median and the variants tied with it."""
    key, col = r["shape_key"], r["column"]
    best = p.by[(r["order"][0], key)]
    tied = [p.by[(v, key)] for v in r["tied"][1:]]
    listing = ", ".join(f"{t['variant']}, {_time(t, p.prefix)} ({format_value(t[col] / best[col])}\u00d7)" for t in tied)
    return (f"No {p.thing} is fastest outside the {p.spans} at {key}: by median {best['variant']}, "
            f"{_time(best, p.prefix)} {p.where} time per forward, tied with {listing}")


def _dispatch_brief(p: _Page1) -> list[dict]:
    """Each dispatcher (attnprof.model.variants.DISPATCHERS): where it went (its dispatch findings) and what it costs
    on the host against the variant it dispatched to, only outside the intervals."""
    went: dict[str, dict[str, list[str]]] = {}
    for sh in p.shapes:
        for f in sh["findings"]:
            if f["rule"] == "dispatch" and len(f["variants"]) == 2:
                went.setdefault(f["variants"][0], {}).setdefault(f["variants"][1], []).append(sh["key"])
    present = set(p.summary["variant"])
    return [_dispatch_sentence(p, disp, went[disp]) for disp in DISPATCHERS if disp in present and went.get(disp)]


def _dispatch_sentence(p: _Page1, disp: str, targets: dict[str, list[str]]) -> dict:
    target = max(targets, key=lambda t: len(targets[t]))
    n_ok = sum(1 for k in p.keys if p.by.get((disp, k), {}).get("status") == "ok")
    text = (f"{disp} is a dispatcher, not a kernel: it dispatches to {target} (the same kernel)"
            + (f" at {len(targets[target])} of {n_ok} shapes" if p.many else ""))
    others = [f"{t} at {', '.join(v)}" for t, v in targets.items() if t != target]
    if others:
        text += f", to {'; '.join(others)}"
    return {"text": text + _host_cost(p, disp, target) + ".", "href": f"#v-{p.skey}-{disp}",
            "claims": {("dispatches to " + t, disp, k, "forward") for t, ks in targets.items() for k in ks}}


def _host_cost(p: _Page1, disp: str, target: str) -> str:
    """What a dispatcher costs on the host against its target at the study's shape, only outside the intervals."""
    a, b = p.by.get((disp, p.skey)), p.by.get((target, p.skey))
    if not (_host_ms(a) and _host_ms(b)):
        return ""
    more = a["cpu_ms_per_forward"] - b["cpu_ms_per_forward"]
    if not (_apart(b, a, "cpu_ms") if more > 0 else _apart(a, b, "cpu_ms")):
        # a difference inside the intervals is no finding: say so, without the numbers of a non-result
        return f"; its host time per forward is not told apart from {target}'s by this run (the {p.host_spans} overlap)"
    if not p.gpu and (timed := _timed_against(a, b)) and (timed[0] > timed[1]) != (more > 0):
        return (f"; its host time per forward is not told apart from {target}'s by this run (the trace's "
                f"{_time(a, 'cpu_ms')} against {_time(b, 'cpu_ms')}; perf_counter's medians the other way: "
                f"{format_value(timed[0])} against {format_value(timed[1])} ms)")
    higher = sum(1 for k in p.keys if 0 < _host_ms(p.by.get((target, k))) < _host_ms(p.by.get((disp, k))))
    return (f", and costs {format_value(abs(more))} ms {'more' if more > 0 else 'less'} host time per forward at "
            f"{p.skey}: {_time(a, 'cpu_ms')} against {_time(b, 'cpu_ms')}"
            + (f"; by median more at {higher} of {len(p.keys)} shapes" if p.many else ""))


def _timed_against(a: dict, b: dict) -> tuple[float, float] | None:
    """The independent timings' medians (perf_counter around single calls on a CPU, ms) of rows ``a`` and ``b``, or
    None where either has none."""
    x, y = a.get("timed_ms_median"), b.get("timed_ms_median")
    return (x, y) if present(x) and present(y) else None


def _host_ms(row: dict | None) -> float:
    """A row's host time per forward; 0 where there is no row or no time (no sentence, no shape counted)."""
    value = (row or {}).get("cpu_ms_per_forward")
    return value if present(value) else 0.0


def _work_brief(p: _Page1) -> list[dict]:
    """Hidden copies and FP32 GEMMs at the study's shape, as the findings state them."""
    out = []
    for f in (p.study or {}).get("findings", []):
        r = p.by.get((f["variants"][0] if f["variants"] else "", p.skey))
        if r is not None and f["rule"] == "hidden_copy":
            out.append(_copy_sentence(p, f, r))
        elif r is not None and f["rule"] == "precision" and "FP32" in f["headline"]:
            out.append(_precision_sentence(p, f, r))
    return out


def _copy_sentence(p: _Page1, f: dict, r: dict) -> dict:
    v = r["variant"]
    fix = next((o for o in p.rows if o["shape_key"] == p.skey and o["variant"] != v and o["status"] == "ok"
                and o.get("memcpy_per_forward") == 0 and o["variant"].startswith(v)), None)
    text = f"{v} launches a {f['headline']}: {_time(r, p.prefix)} per forward"
    if fix is not None:
        text += (f"; {fix['variant']}, without the copy, {_time(fix, p.prefix)}"
                 + ("" if _apart(fix, r, p.prefix) else f"; the {p.spans} overlap"))
    return {"text": text + ".", "href": f"#{f['anchor']}", "claims": set()}


def _precision_sentence(p: _Page1, f: dict, r: dict) -> dict:
    v = r["variant"]
    text = (f"{v} launches {format_value(r.get('kernels_per_forward'))} kernels per forward, its GEMMs in FP32 "
            f"({f['headline']}), and takes {_time(r, p.prefix)}")
    ranking = p.rankings.get((p.skey, "forward"))
    if ranking and _ranked(ranking) and v in ranking["median"]:  # set beside the fastest only where there is one
        best = ranking["order"][0]
        text += f", {format_value(ranking['median'][v] / ranking['median'][best])}\u00d7 {best}'s time"
    return {"text": text + ".", "href": f"#{f['anchor']}", "claims": set()}


def _backward_failed_brief(p: _Page1) -> list[dict]:
    """Backwards that did not run (summary.csv ``backward_status`` not ok, where the forward ran), each with
    PyTorch's reason (``backward_reason``)."""
    failed = [r for r in p.rows if r.get("status") == "ok" and r.get("backward_status") not in _BACKWARD_RAN]
    return [_backward_failed_sentence(v, at) for v, at in _by_variant(failed).items()]


#: backward_status of a row whose backward ran, or was not asked for (empty, NaN read back as None).
_BACKWARD_RAN = (None, "", "ok")


def _backward_failed_sentence(variant: str, at: list[dict]) -> dict:
    status = at[0]["backward_status"]
    reason = short_reason(at[0].get("backward_reason"))[:300] or "no reason recorded"
    return {"text": f"{variant}'s backward {_STATUS_WORDS.get(status, status)} at {', '.join(r['shape_key'] for r in at)} "
                    f"(PyTorch: \u201c{reason}\u201d); it has no backward numbers there and is not ranked.",
            "href": f"#backward-{at[0]['shape_key']}", "claims": {("not run", variant, r["shape_key"], "backward") for r in at}}


def _missing_brief(p: _Page1) -> list[dict]:
    """Captures that published nothing, by variant and status, with the shapes by key (never summed up as a
    seq_len: the cause may be the head_dim, the dtype or the heads)."""
    failed = p.summary[p.summary["status"] != "ok"]
    out = []
    for (variant, status), fr in failed.groupby(["variant", "status"], sort=False):
        recs = records(fr)
        gib = [r["oom_bytes"] / 2**30 for r in recs if present(r.get("oom_bytes"))]
        why = " (PyTorch's reasons in its row)" if status == "unsupported" else ""
        out.append({"text": f"{variant} {_STATUS_WORDS.get(status, status)} at {', '.join(fr['shape_key'])}{why}"
                            + (f", asking for up to {format_value(max(gib))} GiB" if gib else "") + "; it has no numbers there.",
                    "href": f"#v-{recs[0]['shape_key']}-{variant}" if not p.many else "#sweep", "kind": "missing",
                    "claims": {("not run", variant, r["shape_key"], "forward") for r in recs}})
    return out


def memory_bound(summary: pd.DataFrame, calibration: dict) -> dict[str, float]:
    """shape key -> the GPU's measured ridge point (FLOP/B) for the shapes whose arithmetic intensity
    (summary.csv ``flop_per_byte``: forward FLOPs over the minimum traffic) is under it. The ridge is the
    measured GEMM throughput of the shape's dtype over the measured copy bandwidth (calibration.json
    ``gemm_tflops_<dtype>`` / ``copy_tb_per_s``: TFLOP/s over TB/s = FLOP per byte; the roofline model, Williams,
    Waterman and Patterson, CACM 52(4), 2009). {} on a CPU run or without a calibration of that dtype."""
    copy = calibration.get("copy_tb_per_s")
    if summary.empty or not present(copy) or "flop_per_byte" not in summary:
        return {}
    out = {}
    for key, rows in summary.groupby("shape_key", sort=False):
        first = records(rows.head(1))[0]
        tflops = calibration.get(f"gemm_tflops_{first.get('dtype')}")
        if present(tflops) and present(first.get("flop_per_byte")) and first["flop_per_byte"] < tflops / copy:
            out[key] = tflops / copy
    return out


def memory_bound_brief(summary: pd.DataFrame, calibration: dict, bound: dict[str, float] | None = None) -> list[dict]:
    """Page 1's sentence for each shape whose arithmetic intensity (``flop_per_byte``: forward FLOPs over the minimum
    traffic) is under the measured ridge point of the GPU (calibration.json: ``gemm_tflops_<dtype>`` over
    ``copy_tb_per_s``, in FLOP/B; the roofline model, Williams, Waterman and Patterson, CACM 52(4), 2009): there
    memory throughput, not TFLOP/s, says how close a kernel is to the hardware. It names the fastest variant by
    device time (no dispatcher, no wrong result) and its ``gbps`` (summary.csv; derived: the minimum traffic over the
    device time) with the rerun interval that the device time's gives, as % of the measured copy bandwidth.
    ``bound``: :func:`memory_bound` of the same summary and calibration, when the caller has it already.
    [] on a CPU run, without a calibration, or where every shape is compute-bound."""
    if "gbps" not in summary:
        return []
    bound = memory_bound(summary, calibration) if bound is None else bound
    out = [_memory_sentence(summary, calibration, key, ridge) for key, ridge in bound.items()]
    return [o for o in out if o]


def _memory_sentence(summary: pd.DataFrame, calibration: dict, key: str, ridge: float) -> dict | None:
    """One memory-bound shape's sentence: the first of its ranking (attnprof.findings.ranking.rank: no dispatcher, no
    wrong result), called the fastest only where it is ahead outside the intervals."""
    r = rank(summary, key)
    rec = {x["variant"]: x for x in records(at_shape(summary, key))}
    best = rec[r["order"][0]] if r["order"] else {}
    if not present(best.get("gbps")):
        return None
    who = "the fastest" if _ranked(r) else "by median the first (tied within the intervals)"
    text = (f"Memory-bound at {key} ({format_value(best['flop_per_byte'])} FLOP/B, under the measured ridge of {format_value(ridge)}): "
            f"{who}, {best['variant']}, moves {format_value(best['gbps'])} GB/s{_gbps_rerun(best)}, "
            f"{format_value(100 * best['gbps'] / (calibration['copy_tb_per_s'] * 1e3), 2)} % of the measured copy bandwidth")
    # the sweep table shows GB/s at a memory-bound shape; a one-shape run has it in the timing-fidelity table
    href = f"#sweep-{best['variant']}" if summary["shape_key"].nunique() > 1 else f"#fidelity-{key}"
    return {"text": text + ".", "href": href, "claims": _stated([r])}


def _gbps_rerun(row: dict) -> str:
    """' (rerun lo–hi GB/s)' of a row's GB/s: the same bytes over the ends of its device time's rerun interval."""
    lo, hi = row.get("device_ms_run_lo"), row.get("device_ms_run_hi")
    if not (present(lo) and present(hi) and lo > 0):
        return ""
    scale = row["gbps"] * row["device_ms_per_forward"]  # GB/s x ms: the same bytes over another time
    return f" ({spread_words('device_ms', True)['label']} {format_range(scale / hi, scale / lo, 'GB/s')})"


def _backward_brief(p: _Page1) -> list[dict]:
    """The fastest backward, as the study shape's backward ranking states it (variants whose gradients passed the
    float64 check, no dispatcher), its time with rerun interval and TFLOP/s, the next, and how many gradients were
    checked (:func:`_gradients_checked`)."""
    r = p.rankings.get((p.skey, "backward"))
    if not r or len(r["order"]) < 2:
        return []
    best, nxt = (p.by[(v, p.skey)] for v in r["order"][:2])
    head = (f"Backward: {best['variant']} is fastest at {p.skey}" if r["clear"]
            else f"Backward: no variant is fastest outside the {p.spans} at {p.skey}; by median {best['variant']}")
    tflops = best.get("backward_tflops") if p.gpu else None
    text = (head + f", {_backward_time(p, best)} per backward"
            + (f", {format_value(tflops)} TFLOP/s (2.5× the forward's FLOPs)" if present(tflops) else "")
            + f"; next {nxt['variant']}, {_backward_time(p, nxt)}" + ("" if r["clear"] else f" (the {p.spans} overlap)"))
    return [{"text": text + _gradients_checked(p.rows) + ".", "href": f"#backward-{p.skey}", "claims": _stated([r])}]


def _backward_time(p: _Page1, row: dict) -> str:
    """A backward's time per backward with its rerun interval (device ms on a GPU, host ms on a CPU)."""
    prefix = p.prefix.split("_")[0]  # device / cpu
    return f"{format_value(row[f'{prefix}_ms_per_backward'])} ms{_interval(row, f'{prefix}_ms_backward')}"


def _gradients_checked(rows: list[dict]) -> str:
    """'. Gradients ... checked in n captures: m within tolerance'; '' where none was checked."""
    checked = [row["grad_rel_error_ok"] for row in rows if row.get("grad_rel_error_ok") in (True, False)]
    if not checked:
        return ""
    return (f". Gradients dq, dk, dv checked against float64 in {len(checked)} captures: {checked.count(True)} "
            "within tolerance")


def _compile_brief(p: _Page1) -> list[dict]:
    """One sentence for every compiled variant (page 1 keeps its table of contents): its kernels and time per
    forward against the variant it compiles, and its first call, kept out of those numbers."""
    parts, first_calls, href = [], [], None
    for r in p.rows:
        if r["shape_key"] != p.skey or r["variant"] not in COMPILED or r.get("status") != "ok":
            continue
        href = href or f"#v-{p.skey}-{r['variant']}"
        parts.append(_compiled_part(p, r))
        if present(r.get("compile_first_call_s")):
            first_calls.append(f"{r['variant']} {format_value(r['compile_first_call_s'])} s"
                               + (f" (first backward {format_value(r['compile_backward_first_call_s'])} s)"
                                  if present(r.get("compile_backward_first_call_s")) else ""))
    if not parts:
        return []
    text = "torch.compile: " + "; ".join(parts)
    if first_calls:
        text += "; first calls (the compile), kept out of these numbers: " + ", ".join(first_calls)
    return [{"text": text + ".", "href": href, "claims": set()}]


def _compiled_part(p: _Page1, r: dict) -> str:
    base = p.by.get((uncompiled_of(r["variant"]), p.skey))
    n = r.get("kernels_per_forward")
    part = f"{r['variant']} launches {format_value(n)} kernel{'' if n == 1 else 's'} per forward, {_time(r, p.prefix)}"
    if base is not None and base.get("status") == "ok" and present(base.get(f"{p.prefix}_per_forward")):
        part += (f", against {base['variant']}'s {format_value(base.get('kernels_per_forward'))} kernels and {_time(base, p.prefix)}"
                 + ("" if _apart(r, base, p.prefix) else f" (the {p.spans} overlap)"))
    return part


def gpus_used(repeats: pd.DataFrame | None) -> list[dict]:
    """The GPUs the run's captures ran on, from repeats.csv (each capture's ``gpu_uuid``, ``gpu_name``,
    ``gpu_power_limit_w``, ``gpu_max_sm_clock_mhz``: what its own record says, not env.json, which a later run may
    have rewritten): one dict per UUID (uuid, name, power_limit_w, max_sm_clock_mhz; None where not recorded), in UUID
    order (repeats.csv in the current format: attnprof.analysis.records.load_repeats); [] for a CPU run, a result set
    captured before GPUs were recorded (their cells empty) or without repeats.csv (None)."""
    if repeats is None:
        return []
    out = {}
    for _, r in repeats.dropna(subset=["gpu_uuid"]).iterrows():
        uuid = str(r["gpu_uuid"]).strip()
        out.setdefault(uuid, {**{col.removeprefix("gpu_"): None if pd.isna(v := r.get(col)) else v
                                 for col in CAPTURE_ONLY_COLUMNS}, "uuid": uuid})
    return [out[u] for u in sorted(out)]


def gpu_note(used: list[dict]) -> str | None:
    """Page 1's sentence on a run captured on several GPUs (:func:`gpus_used`): how many, and whether they are alike
    (model, power limit, highest SM clock: :func:`attnprof.model.gpus.differing_kinds`); when they are not, that a
    variant's time mixes them and a ranking compares across them. None for one GPU or none."""
    if len(used) < 2:
        return None
    kinds = differing_kinds(used)
    if any(not g.get("name") for g in used):
        return (f"Captured on {len(used)} GPUs, one capture per GPU at a time; their capture records do not say what "
                "some of them are (a MIG instance, an older record), so whether they are alike is not known: a variant's "
                "repeats may have run on different ones.")
    if kinds:
        return (f"Captured on {len(used)} GPUs of different kinds ({'; '.join(kinds)}): a variant's time mixes the GPUs "
                "its repeats ran on, so a ranking or a ratio here compares across GPU kinds.")
    g = used[0]
    return (f"Captured on {len(used)} GPUs, alike ({g['name']}, {number_text(g.get('power_limit_w'))} W power limit, "
            f"{number_text(g.get('max_sm_clock_mhz'))} MHz highest SM clock), one capture per GPU at a time; a variant's repeats "
            "may run on different GPUs, so its rerun interval holds the spread between GPUs too.")


def short_repeats(summary: pd.DataFrame) -> str:
    """Page 1's words for the rows with times whose times are not of every repeat (summary.csv ``repeats_note``: a
    repeat not ok, missing, a copy, a time its trace lacks, a contradicted host draw): '' when every such row counted
    every repeat. A row that did not run (out of memory, unsupported, failed) has no time: its status says why, on
    page 1 and in its row, not here."""
    if "repeats_note" not in summary:
        return ""
    noted = summary[summary["repeats_note"].map(lambda v: isinstance(v, str) and bool(v)) & (summary["status"] == "ok")]
    if noted.empty:
        return ""
    named = "; ".join(f"{r.variant} at {r.shape_key}: {str(r.repeats_note)[:160]}" for r in noted.head(4).itertuples())
    more = f" and {len(noted) - 4} more" if len(noted) > 4 else ""
    return f" Not every repeat was counted in {len(noted)} row{'s' if len(noted) != 1 else ''} ({named}{more})."


def brief_notes(study: dict | None, shapes: list[dict], summary: pd.DataFrame, used: list[dict] | None = None) -> list[str]:
    """The small print under page 1's findings: on which GPUs (a run on several alike ones, :func:`gpu_note`; GPUs of
    different kinds are a finding of page 1 instead), what a time and its rerun interval are, and whether every trace
    was complete."""
    notes = _alike_gpus(used or [])  # gpus_used
    host, device = spread_words("cpu_ms", True), spread_words("device_ms", True)
    if has_run_interval(summary) and not has_run_interval(summary, ("device_ms",)):  # a CPU run: host times only
        n = int(summary["repeats"].max())
        notes.append(f"Times are host times per forward, the median of {n} repeats (each a fresh capture process); "
                     f"\u201c{host['label']}\u201d gives the lowest and highest capture: a host time has no {device['one']} "
                     "(docs/statistics.md); a ranking is called only outside those ranges." + short_repeats(summary))
    elif has_run_interval(summary):
        n = int(summary["repeats"].max())
        notes.append(f"Times are per forward, the median of {n} repeats (each a fresh capture process); \u201c{device['label']}\u201d "
                     f"is the 95 % interval the median of a rerun with as many repeats will hold on the {SAME_SITTING} (another "
                     "day or machine moves times beyond it: compare adds that); a ranking is called only outside it. Host "
                     f"times: the median over captures, with the lowest and highest (\u201c{host['label']}\u201d)."
                     + short_repeats(summary))
    elif "repeats" in summary:
        notes.append("One repeat per variant and shape: no time has a between-run interval (config repeats).")
    warned = [f for sh in shapes for f in sh["findings"] if f["rule"] in ("trace_quality", "status") and f["kind"] == "warning"]
    notes.append(f"{len(warned)} captures have an incomplete trace or a missing check (named in each variant's row)." if warned
                 else "Every capture's trace was complete.")
    return notes


def _alike_gpus(used: list[dict]) -> list[str]:
    """The small print's note on a run captured on several GPUs of one kind ([] for one GPU, or GPUs of different
    kinds, which page 1 states among its findings)."""
    return [gpu_note(used)] if len(used) > 1 and not differing_kinds(used) else []


def expectations_words(checks: list[dict]) -> str:
    """The study comparison in words: how many of its claims hold, which do not, which the rerun intervals leave open."""
    if not checks:
        return ""
    by = {verdict: [c for c in checks if c["verdict"] == verdict] for verdict in ("same", "different", WITHIN_NOISE)}
    diff, noise = by["different"], by[WITHIN_NOISE]
    text = f"{len(by['same'])} of the {len(checks)} claims hold on this run."
    if diff:
        text += " " + ("It does not confirm: " if len(diff) == 1 else f"{len(diff)} do not: ") + "; ".join(map(_claim_observed, diff)) + "."
    if noise:
        text += (" Within the rerun intervals, so neither confirmed nor refuted: "
                 + "; ".join(f"\u201c{c['claim']}\u201d" for c in noise) + ".")
    return text


def _claim_observed(check: dict) -> str:
    """'“claim” (observed 2 ms)' of an expectation check."""
    observed = check.get("observed") or {}
    unit = f" {observed['unit']}" if observed.get("unit") else ""
    return f"\u201c{check['claim']}\u201d (observed {format_value(observed.get('value'))}{unit})"


#: The advice every CUDA out-of-memory message of PyTorch ends with (c10/cuda/CUDACachingAllocator.cpp: "If reserved
#: but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ... See documentation
#: for Memory Management (...)"): the same for every out-of-memory capture, and half of its message.
_OOM_ADVICE = re.compile(r"\s*If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF.*\Z", re.S)


def short_reason(text) -> str:
    """Jinja filter: a capture's reason as the report prints it: PyTorch's out-of-memory message without its closing
    advice on fragmentation (what was asked, what was free and what was held stay; the capture's status.json keeps
    the whole message); any other reason as it is."""
    if not isinstance(text, str):
        return "" if text is None else str(text)
    short = _OOM_ADVICE.sub("", text)
    return short if short == text else short + " (PyTorch's advice on fragmentation left out: see the capture's status.json)"
