"""A forward's recipe -- the ordered sequence of its work -- and its diff between two result sets.

The recipe of one forward (or backward) is what it ran, in launch order: on a GPU run its kernels,
memcpys and memsets (:func:`attnprof.analysis.trace.gpu_events`, ordered by their start on the device);
on a CPU run, where there is no device work, its top-level aten ops (ops not nested inside another op of
the same forward and thread). :func:`recipe_table` writes one row per step of every complete forward
(rule extract, ``recipe.csv`` and ``recipe_backward.csv``).

The diff (:func:`diff_recipes`) aligns one representative forward of result set A with one of B, per
group of identical forwards (forwards that differ within one capture: :func:`recipe_groups`), with
:class:`difflib.SequenceMatcher` over the steps' labels (:func:`attnprof.analysis.trace.kernel_label`: the
kernel's short name, plus the functor for PyTorch's generic elementwise kernels):

- *kept*: the same label at aligned positions ('equal' opcodes);
- *replaced*: inside a 'replace' opcode, steps of the same role, i.e. the same kernel class
  (``classify``: attnprof.findings.kernel_names.kernel_class, decided from the kernel's own name, never from
  words inside its template arguments) at aligned positions -- a second SequenceMatcher over the classes
  of the opcode's two runs pairs them in order; e.g. an sm80 GEMM replaced by an sm90 one;
- *moved*: a label removed at one place and added at another (a reordering);
- *removed* / *added*: the rest.

Each kept, replaced or moved pair has a time ratio B/A from each result set's repeats
(:func:`repeat_step_times`: per repeat, the median duration of that step over the forwards of the group)
judged by :func:`attnprof.analysis.verdict.judge_rows`; with one repeat on a side the ratio is that repeat's
and no verdict is given.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

import pandas as pd

from attnprof.analysis.stats import CONFIDENCE
from attnprof.analysis.verdict import ONE_SITTING, Sitting, compare_ratio
from attnprof.analysis.trace import kernel_label
from attnprof.model.columns import columns_of

#: recipe.csv's columns, in the order of their declarations (attnprof.model.columns).
RECIPE_COLUMNS = list(columns_of("recipe"))
#: The kinds of a diff row, in the order a diff's ``counts`` lists them.
DIFF_KINDS = ("kept", "replaced", "moved", "removed", "added")
#: Architecture written into a kernel's own name: ``sm90_xmma_...``, ``..._sm80``, ``cutlass_80_...``.
_ARCH = re.compile(r"(?:^|[^a-z0-9])sm_?(\d{2,3})(?![0-9])|cutlass_(\d{2,3})_", re.I)
#: Library of a kernel from its own (short) name: first match wins.
_LIBRARIES = (("pytorch_flash::", "FlashAttention-2 (PyTorch)"), ("fmha_cutlass", "memory-efficient (xFormers/CUTLASS)"),
              ("cudnn", "cuDNN"), ("triton_", "Triton (inductor)"), ("nvjet", "cuBLAS"), ("cublas", "cuBLAS"),
              ("gemm", "cuBLAS/CUTLASS"), ("cutlass", "CUTLASS"), ("at::native::", "PyTorch (ATen)"),
              ("at::", "PyTorch (ATen)"), ("aten::", "PyTorch (ATen op)"))


def _top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops of ``ops`` (columns forward, tid, ts, end) that no other op of the same forward and
    thread contains: walked in start order, an op starting before the end of the last top-level
    op is nested."""
    keep = []
    for _, g in ops.sort_values(["forward", "tid", "ts", "end"], ascending=[True, True, True, False]).groupby(
            ["forward", "tid"], sort=False):
        end = float("-inf")
        for idx, ts, e in zip(g.index, g["ts"], g["end"]):
            if ts >= end:
                keep.append(idx)
                end = e
    return ops.loc[keep]


def recipe_table(frames: dict, variant: str, shape_key: str, gpu: bool) -> pd.DataFrame:
    """One row per step of every complete forward (:func:`attnprof.analysis.tables.analyse_trace`'s
    ``frames``; backward frames alike), columns :data:`RECIPE_COLUMNS`: step is 0-based in the
    forward's order; on a GPU run (``gpu``) the forward's kernels, memcpys and memsets ordered by
    their start (category kernel/memcpy/memset, grid and block from the launch metadata), else its
    top-level aten ops ordered by their start (category ``op``). dur_us: the step's duration (us;
    device time on a GPU, inclusive host time of the op on a CPU); time_ok: the trace's times of
    that step are valid (always True for ops). start_us: the step's start, in us after the start of
    its forward's range (``frames["ranges"]``); on a GPU run launch_api, launch_us and launch_dur_us:
    the API call that launched it (by correlation id, as :func:`attnprof.analysis.trace.gpu_events`
    joins them), its start in us after the range's start and its host duration in us (``frames["api"]``;
    NaN where the trace has no such call); empty on a CPU run. Raises KeyError when ``frames`` lacks
    ``ranges`` (or, on a GPU run, ``api``)."""
    comp = frames["completeness"]
    counted = set(comp.index[comp["complete"].astype(bool)])
    if gpu:
        rows = frames["gpu"]
        rows = rows[rows["forward"].isin(counted)].copy()
        rows["time_ok"] = rows["time_ok"].astype(bool)
    else:
        ops = frames["ops"]
        rows = _top_level(ops[ops["forward"].isin(counted)]).copy()
        rows["category"], rows["grid"], rows["block"], rows["time_ok"] = "op", None, None, True
        rows["launch_api"], rows["launch_ts"], rows["launch_dur_us"] = None, float("nan"), float("nan")
    if rows.empty:
        return pd.DataFrame(columns=RECIPE_COLUMNS)
    if gpu:  # the launch call's host duration: the API call of the same correlation id that gpu_events joined
        calls = frames["api"].dropna(subset=["correlation", "ts"])[["correlation", "ts", "dur"]]
        calls = calls.drop_duplicates(["correlation", "ts"]).rename(columns={"ts": "launch_ts", "dur": "launch_dur_us"})
        rows = rows.merge(calls, on=["correlation", "launch_ts"], how="left", validate="many_to_one")
    range_start = rows["forward"].map(frames["ranges"].set_index("forward")["ts"])
    # trace times are us with ns resolution: the offsets too, without the float noise of subtracting large numbers
    rows["start_us"], rows["launch_us"] = (rows["ts"] - range_start).round(3), (rows["launch_ts"] - range_start).round(3)
    rows = rows.sort_values(["forward", "ts"], kind="stable")
    rows["step"] = rows.groupby("forward").cumcount()
    rows["label"] = rows["name"].map(kernel_label) if gpu else rows["name"]
    rows = rows.assign(variant=variant, shape_key=shape_key, dur_us=rows["dur"])
    return rows[RECIPE_COLUMNS].reset_index(drop=True)


def arch_of(name: str) -> str | None:
    """The sm architecture a kernel's own name says it was built for (``sm90``), from its label
    (:func:`attnprof.analysis.trace.kernel_label`: no template arguments but a CUTLASS entry's kernel);
    None when the name says none."""
    m = _ARCH.search(kernel_label(name))
    return f"sm{m.group(1) or m.group(2)}" if m else None


def library_of(name: str, category: str = "kernel") -> str | None:
    """The library a step's own name places it in (FlashAttention-2, cuDNN, cuBLAS, CUTLASS, Triton,
    PyTorch's ATen kernels); memcpy and memset: None (the CUDA runtime); None for an unknown name."""
    if category in ("memcpy", "memset"):
        return None
    short = kernel_label(name).lower()
    return next((lib for key, lib in _LIBRARIES if key in short), None)


def recipe_groups(table: pd.DataFrame) -> list[dict]:
    """Forwards of one capture's recipe table (one variant and shape) grouped by their exact
    sequence of step names, largest group first (ties: the lower first forward): each
    ``{"forwards": [ids], "steps": [{category, name, label, grid, block}, ...]}`` with the
    steps of its first forward. [] for an empty table."""
    if table is None or table.empty:
        return []
    groups: dict[tuple, tuple[pd.DataFrame, list[int]]] = {}  # names -> (the first forward's steps, the forwards)
    for fwd, g in table.sort_values(["forward", "step"]).groupby("forward", sort=True):
        groups.setdefault(tuple(g["name"]), (g, []))[1].append(int(fwd))
    return [{"forwards": fwds, "names": key, "steps": [
                {"category": c, "name": n, "label": lab, "grid": _cell(gr), "block": _cell(bl)}
                for c, n, lab, gr, bl in zip(*(first[col] for col in ("category", "name", "label", "grid", "block")))]}
            for key, (first, fwds) in sorted(groups.items(), key=lambda kv: (-len(kv[1][1]), kv[1][1][0]))]


def _cell(v):
    return None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)


def repeat_step_times(tables: Sequence[pd.DataFrame | None], names: tuple) -> list[list[float]]:
    """Per step of the sequence ``names`` (a group's step names), the list over repeats of that
    step's median duration (us) over the repeat's forwards with exactly this sequence, valid times
    only; ``tables``: the recipe tables of one variant and shape, one per repeat (None: a repeat
    without a table). A repeat without such a forward adds nothing."""
    out: list[list[float]] = [[] for _ in names]
    for table in tables:
        if table is None or table.empty:
            continue
        durs = [list(g["dur_us"].where(g["time_ok"].astype(bool)))
                for _, g in table.sort_values(["forward", "step"]).groupby("forward") if tuple(g["name"]) == names]
        med = pd.DataFrame(durs).median(axis=0, skipna=True)
        for i, v in enumerate(med):
            if pd.notna(v) and v > 0:
                out[i].append(float(v))
    return out


def _step_view(step: dict, classify: Callable[[str, str], str]) -> dict:
    return {**{k: step[k] for k in ("category", "label", "name", "grid", "block")},
            "class": classify(step["name"], step["category"]), "library": library_of(step["name"], step["category"]),
            "arch": arch_of(step["name"]) if step["category"] == "kernel" else None}


def align(a: Sequence[dict], b: Sequence[dict], classify: Callable[[str, str], str] | None = None) -> list[dict]:
    """Align two recipes (lists of steps with at least ``name``, ``label`` and ``category``):
    a list of ``{"kind", "a", "b"}`` with ``a``/``b`` the step's index in its recipe (None where
    absent), in the order of the aligned sequence; kinds :data:`DIFF_KINDS` (module docstring).
    ``classify(name, category) -> class`` gives a step's role inside a 'replace' run (default: its
    category). Uses difflib.SequenceMatcher without its junk heuristic (autojunk=False)."""
    classify = classify or (lambda name, category: category)
    la, lb = [s["label"] for s in a], [s["label"] for s in b]
    rows: list[dict] = []
    for tag, i1, i2, j1, j2 in _opcodes(la, lb):
        if tag == "replace":
            rows += _replace_rows(a, b, range(i1, i2), range(j1, j2), classify)
        else:
            rows += _run_rows(tag, range(i1, i2), range(j1, j2), "kept")
    return _mark_moved(rows, la, lb)


def _opcodes(x: Sequence, y: Sequence) -> list[tuple]:
    """difflib.SequenceMatcher's opcodes turning ``x`` into ``y``, without its junk heuristic."""
    return difflib.SequenceMatcher(None, x, y, autojunk=False).get_opcodes()


def _run_rows(tag: str, ia: range, ib: range, paired: str) -> list[dict]:
    """The rows of one opcode run over steps ``ia`` of A and ``ib`` of B: an "equal" run pairs them in order as
    kind ``paired``; any other run has A's steps removed, then B's added."""
    if tag == "equal":
        return [{"kind": paired, "a": i, "b": j} for i, j in zip(ia, ib)]
    return [{"kind": "removed", "a": i, "b": None} for i in ia] + [{"kind": "added", "a": None, "b": j} for j in ib]


def _replace_rows(a: Sequence[dict], b: Sequence[dict], ia: range, ib: range,
                  classify: Callable[[str, str], str]) -> list[dict]:
    """The rows of a 'replace' run of the label alignment (steps ``ia`` of A against ``ib`` of B): steps of the same
    class paired in order as replaced, the rest removed/added."""
    ca = [classify(a[i]["name"], a[i]["category"]) for i in ia]
    cb = [classify(b[j]["name"], b[j]["category"]) for j in ib]
    rows: list[dict] = []
    for tag, p1, p2, q1, q2 in _opcodes(ca, cb):
        rows += _run_rows(tag, ia[p1:p2], ib[q1:q2], "replaced")
    return rows


def _mark_moved(rows: list[dict], la: Sequence[str], lb: Sequence[str]) -> list[dict]:
    """``rows`` with a label removed in one place and added in another made one "moved" row (paired in order of
    appearance), in place of the removed row."""
    removed = [r for r in rows if r["kind"] == "removed"]
    for r in rows:
        if r["kind"] != "added":
            continue
        match = next((m for m in removed if m["kind"] == "removed" and la[m["a"]] == lb[r["b"]]), None)
        if match is not None:
            match.update(kind="moved", b=r["b"])
            r["kind"] = "drop"
    return [r for r in rows if r["kind"] != "drop"]


def write_recipe(table: pd.DataFrame, path) -> None:
    """Write a recipe table (:func:`recipe_table`) to ``path`` as CSV with each step's ``name`` stored once: a
    ``name_id`` column (0, 1, ... in order of first appearance) on every row, the name itself only on the row where its
    id first appears (empty after). A kernel name is a C++ template of up to a few kB and every forward repeats it: on
    the H200 sweep's sdpa_math at seq_len 8192 (10 forwards of 20 steps) the table shrinks from 565 kB to 159 kB, the
    sweep's 63 recipe tables of repeat 1 from 4.5 MB to 1.3 MB. :func:`read_recipe` restores the names."""
    ids, _ = pd.factorize(table["name"], use_na_sentinel=False)
    out = table.assign(name_id=ids)
    shown = ~pd.Series(ids, index=table.index).duplicated()
    out["name"] = table["name"].where(shown.to_numpy(), "")
    out.to_csv(path, index=False)


def read_recipe(path) -> pd.DataFrame:
    """A recipe table written by :func:`write_recipe` (or before it, with every name in full), names restored
    (:func:`restore_names`). Raises what :func:`pandas.read_csv` raises for an unreadable file."""
    return restore_names(pd.read_csv(path))


def restore_names(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (recipe.csv as read) with every step's ``name`` from the row that holds its ``name_id``'s name
    (:func:`write_recipe`), without the ``name_id`` column; a table without one (written before) as it is."""
    if "name_id" not in table.columns:
        return table
    return table.assign(name=table.groupby("name_id")["name"].transform("first")).drop(columns="name_id")


def recipe_table_problem(table: pd.DataFrame) -> str | None:
    """Why a recipe table read back from recipe.csv cannot be diffed, or None: a column the diff reads missing, a forward, step or duration that is not a number (named by column and line), a step without its label or
    category (a row cut short), or a forward whose steps are not numbered 0, 1, ... n - 1 (a file cut short or edited). A header-only table (a pass that did not run) is no problem."""
    missing = [c for c in ("forward", "step", "category", "name", "label", "grid", "block", "dur_us")
               if c not in table.columns]
    if missing:
        return f"columns {missing} missing"
    for col in ("forward", "step", "dur_us"):
        raw = table[col]
        bad = raw.notna() & pd.to_numeric(raw, errors="coerce").isna()
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            return f"column {col}, line {i + 2}: {raw.iloc[i]!r} is not a number"
    if table[["label", "category"]].isna().any().any():
        return "a step without its label or category (a row cut short?)"
    for forward, steps in table.groupby("forward"):
        if sorted(steps["step"].tolist()) != list(range(len(steps))):
            return f"the steps of forward {forward} are not numbered 0 to {len(steps) - 1} (a file cut short or edited?)"
    return None


def diff_recipes(a_tables: Sequence[pd.DataFrame | None], b_tables: Sequence[pd.DataFrame | None],
                 classify: Callable[[str, str], str] | None = None, threshold: float = 0.02,
                 confidence: float = CONFIDENCE, sitting: Sitting = ONE_SITTING) -> dict:
    """The recipe diff of one (variant, shape, pass) between result sets A and B.

    ``a_tables``/``b_tables``: the recipe tables (:func:`recipe_table`) of each repeat, repeat 1
    first (its groups are the ones diffed); ``classify``: a step's role class (see :func:`align`);
    ``threshold``/``confidence``/``sitting``: those of :func:`attnprof.analysis.verdict.judge_rows` for the
    per-step time ratios (the rows' own, so that a step is judged as its row is). Groups are paired by rank (largest with largest); a group without a
    partner is diffed against the other side's largest group. Returns ``{"same": bool (every step
    kept in every group), "counts": {kind: n}, "groups": [{"forwards_a", "forwards_b", "rows": [...]}],
    "note": str}``; each row has kind, a and b (step views: category, label, name, grid, block,
    class, library, arch; None where absent), ratio, ratio_lo, ratio_hi, verdict (None with fewer
    than 2 repeats on a side), repeats_a, repeats_b, launch_changed (grid or block differ)."""
    classify = classify or (lambda name, category: category)
    ga, gb = recipe_groups(_first_table(a_tables)), recipe_groups(_first_table(b_tables))
    out = {"same": True, "counts": dict.fromkeys(DIFF_KINDS, 0), "groups": [], "note": ""}
    if not ga or not gb:
        out.update(same=None, note="no recipe in " + " and ".join(n for n, g in (("A", ga), ("B", gb)) if not g))
        return out
    for x, y in _paired_groups(ga, gb):
        group = _diff_group(x, y, a_tables, b_tables, classify, threshold, confidence, sitting)
        for row in group["rows"]:
            out["counts"][row["kind"]] += 1
        out["groups"].append(group)
    out["same"] = all(out["counts"][k] == 0 for k in DIFF_KINDS if k != "kept") and len(ga) == len(gb)
    if len(ga) != len(gb):
        out["note"] = f"forwards differ: {len(ga)} group(s) of identical forwards in A, {len(gb)} in B"
    return out


def _first_table(tables: Sequence[pd.DataFrame | None] | None) -> pd.DataFrame | None:
    """Repeat 1's recipe table, or the first repeat that has one (a failed pass writes a header only)."""
    return next((x for x in tables or [] if x is not None and len(x)), None)


def _paired_groups(ga: list[dict], gb: list[dict]) -> list[tuple[dict, dict]]:
    """The groups of A and B (:func:`recipe_groups`) paired by rank, largest with largest; a group without a
    partner paired with the other side's largest group."""
    return [(ga[k] if k < len(ga) else ga[0], gb[k] if k < len(gb) else gb[0]) for k in range(max(len(ga), len(gb)))]


def _diff_group(x: dict, y: dict, a_tables: Sequence[pd.DataFrame | None], b_tables: Sequence[pd.DataFrame | None],
                classify: Callable[[str, str], str], threshold: float, confidence: float, sitting: Sitting) -> dict:
    """The diff of group ``x`` of A against group ``y`` of B: their forwards and one row per aligned step
    (:func:`_diff_row`), timed over every repeat's tables."""
    ta, tb = repeat_step_times(a_tables, x["names"]), repeat_step_times(b_tables, y["names"])
    rows = [_diff_row(r, x["steps"], y["steps"], ta, tb, classify, threshold, confidence, sitting)
            for r in align(x["steps"], y["steps"], classify)]
    return {"forwards_a": len(x["forwards"]), "forwards_b": len(y["forwards"]), "rows": rows}


def _diff_row(r: dict, steps_a: Sequence[dict], steps_b: Sequence[dict], ta: list[list[float]], tb: list[list[float]],
              classify: Callable[[str, str], str], threshold: float, confidence: float, sitting: Sitting) -> dict:
    """One row of a group's recipe diff from an :func:`align` row ``r``: both step views, the kind (a kept step
    whose name changed is replaced), whether the launch changed and, where both sides have the step, the ratio of
    its repeat times (``ta``/``tb``: :func:`repeat_step_times`) with the verdict rule's interval and verdict (one step alone: its own variance)."""
    sa = _step_view(steps_a[r["a"]], classify) if r["a"] is not None else None
    sb = _step_view(steps_b[r["b"]], classify) if r["b"] is not None else None
    kind = r["kind"]
    if kind == "kept" and sa["name"] != sb["name"]:
        # the same kernel by its short name, another instantiation by its template arguments (a tile, a
        # head_dim, a dtype): the same role, another kernel
        kind = "replaced"
    row = {"kind": kind, "a": sa, "b": sb, "ratio": None, "ratio_lo": None, "ratio_hi": None, "verdict": None,
           "repeats_a": None, "repeats_b": None,
           "launch_changed": bool(sa and sb and (sa["grid"], sa["block"]) != (sb["grid"], sb["block"]))}
    if sa and sb:
        c = compare_ratio(ta[r["a"]], tb[r["b"]], threshold, confidence, sitting)
        row.update(ratio=c["ratio"], ratio_lo=c["lo"], ratio_hi=c["hi"], repeats_a=c["n_a"], repeats_b=c["n_b"],
                   verdict=c["verdict"] if min(c["n_a"], c["n_b"]) >= 2 else None)
    return row
