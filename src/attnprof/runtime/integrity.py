"""Derived files that went missing or were changed after they were made.

Snakemake does not remake a missing file whose readers are all up to date ("Nothing to be done"), and never
notices a file edited by hand. A result set that was published (its report exists) must not keep standing on
a derived file that is gone or no longer what its rule wrote. Two checks, both cheap enough for parse time:

* :func:`lost_files`: the derived files a published result set must hold (its per-capture tables, run tables,
  findings and plots, the caller's list) that do not exist;
* :func:`changed_files`: files whose content no longer matches the SHA-256 their rule recorded when it wrote
  them (:func:`record_checksums`; a sidecar ``<file>.sha256`` under ``<run>/logs/checksums/``): a hand-edited
  or half-written summary, say.

When either finds something (or a capture is lost, :func:`lost_captures`), the workflow
(workflow/rules/common.smk) bumps the result set's rebuild epoch (:func:`rebuild_epoch`), a parameter of rule
summarize: summarize reruns, and with it everything after it, and Snakemake then remakes every missing input on
the way (the per-capture tables of a lost table, the plots of a lost plot). Once the files are back the epoch
stays, so nothing reruns a second time.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import glob
import hashlib
import json
import sys
from pathlib import Path

from attnprof.model.config import subset_message
from attnprof.model.names import CAPTURE_FILES, RUN_FILES
from attnprof.model.plan import (CHECKSUMMED, Layout, captured_rounds, load_top_up, recorded_grid, recorded_top_up_rounds,
                                 rounds_of)
from attnprof.model.variants import CONTROL

#: Folder of the checksum sidecars, inside a result set.
CHECKSUM_DIR = Path("logs") / "checksums"


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _sidecar(run_dir: Path, path: Path) -> Path:
    return run_dir / CHECKSUM_DIR / (str(Path(path).resolve().relative_to(run_dir.resolve())) + ".sha256")


class Ties:
    """What ties a derived file to its result set (docs/trust.md): the SHA-256 of the result set's identity (env.json's
    ``run``) and of the capture records (status.json) it was derived from: its own capture's for a per-capture table,
    every capture's for a file of the whole result set. Two result sets never share a capture record (each records
    when its capture ran), so a sidecar of another result set's file, or of a file made from other captures, does not
    match. Each record is hashed once per instance."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.layout, self.run = Layout.around(self.run_dir)
        self._hash = functools.cache(lambda path: _sha256(Path(path)) if Path(path).is_file() else "-")

    def _records(self, path: Path) -> list[str]:
        """The capture records ``path`` was derived from (:class:`Ties`); none for a plot (a timeline is drawn from
        one shape's first round, before env.json and the other captures are made: a plot is checked by its content)."""
        if cap := self.layout.capture_of(path, self.layout.TABLES):
            return [self.layout.capture_file("status", self.run, shape=cap["shape_key"], variant=cap["variant"],
                                             repeat=cap["repeat"])]
        if path.resolve().relative_to(self.run_dir.resolve()).parts[0] == self.layout.PLOTS:
            return []
        folder = self.layout.run_dir(self.run)  # escaped: a folder's name may hold [ or *
        pattern = self.layout.capture_file("status", self.run, shape="*", variant="*", repeat="*")
        return sorted(glob.glob(glob.escape(folder) + pattern[len(folder):]))

    def of(self, path: str | Path) -> str:
        """The tie (32 hex digits) of derived file ``path`` of this result set: a per-capture table's, its capture
        record (which extract may read before env.json is written); any other's, env.json's ``run`` and every record."""
        records = self._records(Path(path))
        parts = [f"{Path(r).relative_to(self.run_dir)}={self._hash(r)}" for r in records]
        if Path(path).resolve().relative_to(self.run_dir.resolve()).parts[0] not in (self.layout.TABLES, self.layout.PLOTS):
            parts.insert(0, f"run={_env_field(self.layout, self.run, 'run')}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _env_field(layout, run: str, key: str):
    """``key`` of result set ``run``'s env.json; None where it cannot be read or holds none."""
    try:
        return json.loads(Path(layout.run_file("env", run)).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def record_checksums(run_dir: str | Path, paths: list[str | Path]) -> None:
    """Write the SHA-256 of each file of ``paths`` (inside result set ``run_dir``) to its sidecar, with the file's
    size and modification time (a file with both unchanged is not read again) and its tie to the result set and its
    captures (:class:`Ties`). Called after a rule wrote them. Raises ValueError for a path outside ``run_dir``."""
    run_dir, ties = Path(run_dir), Ties(run_dir)
    for path in map(Path, paths):
        side = _sidecar(run_dir, path)
        side.parent.mkdir(parents=True, exist_ok=True)
        st = path.stat()
        side.write_text(f"{_sha256(path)} {st.st_size} {st.st_mtime_ns} {ties.of(path)}\n")


def _differs(path: Path, recorded: list[str]) -> bool:
    st = path.stat()
    if len(recorded) >= 3 and recorded[1] != str(st.st_size):
        return True  # cut short or grown: no need to read it
    if len(recorded) >= 3 and recorded[2] == str(st.st_mtime_ns):
        return False  # as its rule left it
    return _sha256(path) != recorded[0]


def changed_files(run_dir: str | Path, paths: list[str | Path]) -> list[str]:
    """The files of ``paths`` that exist, have a recorded checksum and no longer match it (edited by hand,
    or cut short). Files without a sidecar (written before checksums were recorded) are not judged."""
    return _judged(run_dir, paths, lambda path, recorded, ties: _differs(path, recorded))


def foreign_files(run_dir: str | Path, paths: list[str | Path]) -> list[str]:
    """The files of ``paths`` whose sidecar ties them to another result set or to other captures than this one's
    (:class:`Ties`: copied in from elsewhere with their sidecars, or made before a capture was made again). A sidecar
    written before ties were recorded (three fields) is not judged here."""
    return _judged(run_dir, paths, lambda path, recorded, ties: len(recorded) > 3 and recorded[3] != ties.of(path))


def _judged(run_dir, paths, test) -> list[str]:
    """The files of ``paths`` that exist, have a sidecar and fail ``test(path, sidecar fields, ties)``, sorted."""
    run_dir, ties = Path(run_dir), Ties(run_dir)
    return sorted(str(p) for p in map(Path, paths)
                  if (recorded := _recorded(run_dir, p)) and p.exists() and test(p, recorded, ties))


def _recorded(run_dir: Path, path: Path) -> list[str]:
    """The fields of ``path``'s sidecar (the SHA-256, the size and modification time, the tie to the result set and
    its captures); [] where it has none (or lies outside ``run_dir``) or it cannot be read."""
    try:
        return _sidecar(run_dir, path).read_text().split()
    except (OSError, ValueError):
        return []


def file_problem(run_dir: str | Path, path: str | Path) -> str | None:
    """Why file ``path`` of result set ``run_dir`` cannot be trusted to be what its writer wrote, or None when its
    content matches the SHA-256 its writer recorded (:func:`record_checksums`). Unlike :func:`changed_files`, which
    leaves a file without a sidecar unjudged (a rebuild makes it anyway), this is for a reader that cannot rebuild
    (compare): a file it cannot check is a problem too. The reasons: the file is missing; no checksum was
    recorded for it; or it is damaged (its content differs from what its writer wrote: cut short, even at a line
    boundary, or edited)."""
    run_dir, path = Path(run_dir), Path(path)
    side = _sidecar(run_dir, path)
    if not path.is_file():
        return "missing"
    if not (recorded := _recorded(run_dir, path)):
        return (f"no SHA-256 recorded for it ({side} is missing: made before checksums were recorded, or copied "
                "without its logs/checksums/), so it cannot be checked")
    if _sha256(path) != recorded[0]:
        return (f"damaged: its content is not what its writer wrote (its SHA-256 differs from the one recorded in "
                f"{side}): cut short or edited after it was written")
    if len(recorded) < 4:
        return f"not tied to its result set: {side} was written before sidecars recorded the captures a file came from"
    if recorded[3] != Ties(run_dir).of(path):
        return (f"not this result set's: {side} ties it to another result set or to other captures than those in "
                f"{run_dir} (copied in from elsewhere with its sidecar, or made before a capture was deleted or made "
                "again)")
    return None


def lost_files(published: str | Path, paths: list[str | Path]) -> list[str]:
    """The files of ``paths`` that do not exist, when ``published`` (the result set's report) exists, and that the
    published result set held: [] for a result set not yet published (a first run makes them anyway); a per-capture
    table or a shape's plot whose capture or shape the published result set did not have yet (a shape or variant
    added to the config since) never existed, so it is not lost (issue 43 item 4: "215 derived files are gone")."""
    published = Path(published)
    if not published.exists():
        return []
    missing = [Path(p) for p in paths if not Path(p).exists()]
    # the captures listed in the run tables published beside the report
    held = set().union(*(_captures_in(published.parent / RUN_FILES[t]) for t in ("repeats", "control") if missing))
    return sorted(str(p) for p in missing if _was_published(p, published.parent, held))


def _captures_in(table: str | Path) -> set[tuple[str, str, str]]:
    """{(shape_key, variant, repeat)} of the rows of run table ``table`` (repeats.csv, control.csv: one row per
    capture); empty where it does not exist or cannot be read."""
    try:
        with open(table, newline="") as fh:
            return {(r["shape_key"], r["variant"], r["repeat"]) for r in csv.DictReader(fh)}
    except (OSError, KeyError, csv.Error):
        return set()


def _was_published(path: Path, run_dir: Path, held: set) -> bool:
    """Whether derived file ``path`` belonged to the published result set in ``run_dir``: a per-capture table's
    capture, or a shape plot's shape, is among ``held`` (the captures its run tables list); a run-wide file always
    was."""
    if cap := Layout.capture_of(path, Layout.TABLES):
        return (cap["shape_key"], cap["variant"], str(cap["repeat"])) in held
    if path.parent.parent == run_dir / Layout.PLOTS:
        return path.parent.name in {shape for shape, _, _ in held}
    return True


#: The result set's rebuild epoch file of earlier versions (read, never written: rule rebuild writes markers).
EPOCH_FILE = Path("logs") / "rebuild-epoch"


def lost_captures(layout, run: str, table: str) -> list[str]:
    """The capture files (``CAPTURE_FILES``: trace and status record) that run table ``table`` (repeats, control:
    one row per capture) of result set ``run`` was made from and that are gone: for each of its rows (shape_key,
    variant, repeat), ``layout.capture_file``. [] when the table does not exist or cannot be read."""
    return sorted(p for s, v, k in _captures_in(layout.run_file(table, run)) for name in CAPTURE_FILES
                  if not Path(p := layout.capture_file(name, run, shape=s, variant=v, repeat=k)).exists())


def rebuild_epoch(layout, run: str, bump: bool) -> str:
    """Result set ``run``'s rebuild epoch: the highest of its rebuild markers (``layout.rebuild_marker``, written by
    rule rebuild; an earlier version's ``logs/rebuild-epoch`` token counts too; "0" when there is none), plus one
    when ``bump`` (something was lost or changed). Reads only."""
    marker = Path(layout.rebuild_marker(run, "*"))
    found = [p.name.removeprefix(marker.name.removesuffix("*")) for p in marker.parent.glob(marker.name)]
    with contextlib.suppress(OSError):
        found.append((Path(layout.run_dir(run)) / EPOCH_FILE).read_text().strip())
    previous = max((int(t) for t in found if t.isdigit()), default=0)
    return str(previous + 1 if bump else previous)


def record_outputs(layout, wildcards, outputs) -> None:
    """After a job: the SHA-256 sidecars of its derived outputs inside a result set (per-capture tables, plots, run
    tables, findings, the report), so that a hand edit or a cut-short copy of any of them is noticed at the next
    run. Captures, env.json, the calibration and logs are primary records or not results: no sidecar."""
    run = getattr(wildcards, "run", None)
    if not run:
        return
    run_dir = Path(layout.run_dir(run))
    record_checksums(run_dir, [p for p in map(Path, outputs) if p.is_file() and _is_derived(run_dir, p, layout)])


def _is_derived(run_dir: Path, path: Path, layout) -> bool:
    try:
        rel = path.resolve().relative_to(run_dir.resolve())
    except ValueError:
        return False
    primary = {Path(layout.run_file(n, "x")).name for n in ("env", "calibration")}
    # the derived folders' files (per-capture tables, plots) and the run's files but its primary records
    return rel.parts[0] in (layout.TABLES, layout.PLOTS) or (len(rel.parts) == 1 and rel.name not in primary)


class ResultSetState:
    """What each result set of a plan (attnprof.model.plan.Plan) holds, and whether its derived files are whole:
    read once per result set, when a target first asks for it; nothing is written (rule rebuild writes the marker).

    A result set whose report exists must not stand on a derived file that is gone or no longer what its rule wrote
    (checked against its SHA-256 sidecar), nor on lost captures: its rebuild marker then moves to a new epoch,
    rule rebuild writes it (after remaking every lost per-capture table), and summarize, which reads it, reruns by
    modification time with everything after it. Errors about a result set (an env.json that cannot tell its grid,
    a config that would replace its report with a partial one) end the run with the message alone."""

    def __init__(self, plan):
        self.plan, self.layout = plan, plan.layout
        self._grids, self._checked, self._said = {}, {}, set()
        # the rows of a result set that got rounds added (attnprof.analysis.verdict): its top_up.json where it has
        # one; the Snakefile sets a reader that waits for this run's own (its checkpoint) first
        self.top_up_record = self._recorded_top_up

    def grid(self, run: str):
        if run not in self._grids:
            try:
                self._grids[run] = self.plan.grid_of(run)
            except ValueError as exc:
                refuse(str(exc))
        return self._grids[run]

    def _files(self, run, name, kind, shapes, variants, repeats):
        path = self.layout.table_file if kind == "table" else self.layout.capture_file
        return [path(name, run, shape=s, variant=v, repeat=k) for s in shapes for v in variants for k in repeats]

    def per_capture(self, run: str, name: str, kind: str = "table", all_repeats: bool = False) -> list[str]:
        """File or table ``name`` of every capture of ``run``'s grid: repeat 1 only unless ``all_repeats`` (then
        every round of each cell: its base rounds, and those top-up added, :meth:`rounds`)."""
        g = self.grid(run)
        if not all_repeats:
            return self._files(run, name, kind, g.shapes, g.variants, [1])
        rounds = self.rounds(run)
        return [f for s in g.shapes for v in g.variants
                for f in self._files(run, name, kind, [s], [v], range(1, rounds.get((s, v), g.repeats) + 1))]

    def base_rounds(self, run: str, name: str, kind: str = "table") -> list[str]:
        """File or table ``name`` of every capture of ``run``'s base rounds (config repeats), top-up's none."""
        g = self.grid(run)
        return self._files(run, name, kind, g.shapes, g.variants, range(1, g.repeats + 1))

    def top_up_inputs(self) -> dict:
        """Checkpoint top_up's inputs: the base rounds' status records and forward tables of every A/B result set
        whose rows may get rounds added (keys '<run>/status', '<run>/forwards')."""
        return {f"{run}/{name}": self.base_rounds(run, name, kind) for run in self.plan.top_up_runs()
                for name, kind in (("status", "capture"), ("forwards", "table"))}

    def rounds(self, run: str) -> dict:
        """{(shape, variant): rounds in all} of the cells of ``run`` that got rounds added (attnprof.analysis.verdict);
        every other cell has the grid's repeats."""
        return rounds_of(self._top_up(run), self.grid(run).repeats) if self._top_up_on(run) else {}

    def _top_up_on(self, run: str) -> bool:
        """Whether result set ``run`` was captured with top-up on: this config's (config top_up.rounds), another's
        by its env.json. A top_up.json left from an earlier run with it on then adds no rounds: compare judges such a
        result set in one look (attnprof.analysis.verdict.design_of), which rounds chosen by a look 1 would bias."""
        if run in self.plan.this_runs:
            return run in self.plan.top_up_runs()
        return recorded_top_up_rounds(self.layout, run) > 0

    def _top_up(self, run: str) -> dict | None:
        """``run``'s top_up.json; in this config's A/B run, refused where another environment's record names other
        rows or rounds (every environment's rounds are paired: the checkpoint writes one record to each)."""
        record = self.top_up_record(run)
        for other in self.plan.top_up_runs() if run in self.plan.top_up_runs() else ():
            if (self.top_up_record(other) or {}).get("rows") != (record or {}).get("rows"):
                refuse(f"{self.layout.run_file('top_up', run)} and {self.layout.run_file('top_up', other)} name "
                       "different rows or rounds (edited by hand?), but both environments must capture the same "
                       f"rounds to pair them: {self._top_up_fix()}")
        return record

    def _top_up_fix(self) -> str:
        files = " ".join(self.layout.run_file("top_up", r) for r in self.plan.top_up_runs())
        return (f"rm -f {files} && snakemake {files} (the top_up checkpoint writes them anew; a plain rerun does not "
                "notice that they are gone), then run again")

    def check_top_up_kept(self, run: str) -> None:
        """Refuse this A/B run's result set ``run`` whose top_up.json is gone although it was summarized with it:
        Snakemake does not rerun a checkpoint whose output was deleted when only input functions ask for it, so the
        result set would be read with its base rounds only. Names the file and the command that writes it again."""
        path = Path(self.layout.run_file("top_up", run))
        if run in self.plan.top_up_runs() and not path.exists() and Path(self.layout.run_file("summary", run)).exists():
            refuse(f"{path} is gone: it records which rows got rounds added, and without it this result set would be "
                   f"read with its base rounds only: {self._top_up_fix()}")

    def _recorded_top_up(self, run: str) -> dict | None:
        """``run``'s top_up.json, checked against its grid, its design (this config's top_up.rounds, or the one its
        env.json records) and the captures on disk (attnprof.model.plan.load_top_up)."""
        g = self.grid(run)
        added = self.plan.top_up["rounds"] if run in self.plan.this_runs else recorded_top_up_rounds(self.layout, run)
        try:
            return load_top_up(self.layout.run_file("top_up", run), g, added, captured_rounds(self.layout, run, g))
        except ValueError as exc:
            refuse(str(exc))

    def control_capture(self, run: str, name: str, kind: str = "table") -> list[str]:
        g = self.grid(run)
        return self._files(run, name, kind, g.control_shapes, [CONTROL], range(1, g.repeats + 1))

    def at_shape(self, run: str, shape: str, name: str, kind: str = "capture") -> list[str]:
        """Capture file or table ``name`` of every variant of ``run`` at ``shape``, repeat 1 (the timeline's)."""
        return self._files(run, name, kind, [shape], self.grid(run).variants, [1])

    def control_table(self, run: str) -> list[str]:
        """``run``'s control.csv, or none for a result set made before the control."""
        return [self.layout.run_file("control", run)] if self.grid(run).control_shapes else []

    def plots(self, run: str) -> list[str]:
        return self.layout.plots_of(run, self.grid(run).shapes)

    def derived(self, run: str) -> list[str]:
        """Every derived file a published result set holds: per-capture tables (the control's too), run tables,
        findings, plots."""
        return self.tables(run) + [self.layout.run_file(n, run) for n in CHECKSUMMED] + self.plots(run)

    def check(self, run: str) -> dict:
        """{subset, lost_captures, lost, changed, epoch} of result set ``run`` (cached)."""
        if run not in self._checked:
            self._checked[run] = self._check(run)
        return self._checked[run]

    def _check(self, run: str) -> dict:
        g, lay = self.grid(run), self.layout
        # captures are made again only in this config's own result sets (one from elsewhere is never captured here)
        captures = [f for n in ("repeats", "control") if run in self.plan.this_runs for f in lost_captures(lay, run, n)]
        derived = self.derived(run)
        # every result set is judged by what is gone and by its checksums; one from elsewhere that holds none of its
        # per-capture tables (an example holds its traces, not its tables) derives them all anyway
        whole = run in self.plan.this_runs or any(Path(t).exists() for t in self.tables(run))
        lost = lost_files(lay.run_file("html", run), derived) if whole else []
        judged = derived + [lay.run_file("html", run), lay.run_file("pdf", run)]
        changed = changed_files(lay.run_dir(run), judged)
        lost += [p for p in foreign_files(lay.run_dir(run), judged) if p not in changed]  # made again, as if lost
        bump = bool(captures or lost or changed)
        return {"subset": self._subset(run, g), "lost_captures": captures, "lost": lost, "changed": changed,
                "epoch": rebuild_epoch(lay, run, bump), "bump": bump, "gone": self._gone_captures(run)}

    def _gone_captures(self, run: str) -> list[str]:
        """The capture files (trace, status) of a result set from elsewhere that its grid (env.json: its shapes,
        variants, repeats, the rounds top-up added, the control) holds and that are gone: nothing captures them here
        (a re-render would count what is left as the whole). [] for this config's own (captured again)."""
        if run in self.plan.this_runs:
            return []
        files = [f for name in CAPTURE_FILES for f in self.per_capture(run, name, "capture", all_repeats=True)
                 + self.control_capture(run, name, "capture")]
        return sorted(f for f in files if not Path(f).exists())

    def _subset(self, run, g):
        """A config with fewer shapes or variants than this config's result set ``run`` was made with (its
        env.json) must not silently replace that result set's report with a partial one."""
        if run not in self.plan.this_runs:
            return None
        try:  # a ValueError too where it has no env.json (yet)
            recorded = recorded_grid(self.layout, run)
        except ValueError:
            return None
        if _env_field(self.layout, run, "device") != self.plan.device:
            return None
        return subset_message(self.layout.run_dir(run), list(g.shapes), list(g.variants), list(recorded.shapes),
                              list(recorded.variants))

    def marker(self, run: str, dryrun: bool = False, recorded: bool = True, command: str = "") -> list[str]:
        """Summarize's input: result set ``run``'s rebuild marker ([] while it never needed one), after saying once
        what of it is lost or changed. ``recorded``: Snakemake has a record of the result set's summary here (a
        result set copied here has none): without one, a new input reruns nothing (Snakemake reruns a job for a
        missing input only with its record, and for a newer one only if it exists, which nothing may write while
        Snakemake plans), so the run ends with the command that makes it all again (``command`` --forcerun
        summarize)."""
        state = self.check(run)
        if state["subset"]:
            refuse(state["subset"])
        self._refuse_gone(run, state["gone"])
        if edited := [p for p in state["changed"] if self.layout.capture_of(p, self.layout.TABLES)]:
            refuse(f"{len(edited)} per-capture tables of {self.layout.run_dir(run)} were changed after extract wrote "
                   f"them ({', '.join(edited[:5])}{', ...' if len(edited) > 5 else ''}); a deleted table is made again "
                   f"from its trace: rm {' '.join(edited)} and run again")
        if state["bump"] and not recorded:
            refuse(f"{_gone_text(self.layout.run_dir(run), state)}; Snakemake has no record of this result set here "
                   f"(it was copied), so nothing would make them again by itself: run {command} --forcerun summarize "
                   "(summarize and everything after it are made again, and every lost table first)")
        if run not in self._said:
            self._said.add(run)
            _announce(self.layout.run_dir(run), state, dryrun)
        path = self.layout.rebuild_marker(run, state["epoch"])
        return [path] if state["bump"] or Path(path).exists() else []

    def _refuse_gone(self, run: str, gone: list[str]) -> None:
        """End the run naming the captures ``gone`` from result set ``run`` from elsewhere (:meth:`_gone_captures`)."""
        if gone:
            refuse(f"{len(gone)} capture files of {self.layout.run_dir(run)} are gone ({', '.join(gone[:5])}"
                   f"{', ...' if len(gone) > 5 else ''}), which its env.json (its grid, repeats and control) and "
                   f"top_up.json say it holds; it was captured elsewhere, so nothing captures them again here, and a "
                   f"re-render would read what is left as the whole. Copy {self.layout.run_dir(run)} again from "
                   "where it was captured, whole, then run again")

    def remade(self, run: str) -> list[str]:
        """What of result set ``run`` is made again (the marker's text)."""
        state = self.check(run)
        return state["lost_captures"] + state["lost"] + state["changed"]

    def tables(self, run: str) -> list[str]:
        """Every per-capture table of ``run`` (the control's too): inputs of rule rebuild, so that extract makes a
        lost one again before summarize reruns."""
        g = self.grid(run)
        return (self.layout.tables_of(run, g.shapes, g.variants, g.repeats)
                + self.layout.tables_of(run, g.control_shapes, [CONTROL], g.repeats))

    def compare_inputs(self, name: str) -> dict:
        """Per result set (keys '<run>/<name>'): summary, kernels, env, findings, repeats, the control, and every
        capture's recipe tables (where the result set has its captures) and ops table (repeat 1)."""
        runs = self.plan.compare_runs_of(name)
        if len(runs) < 2:
            refuse("compare needs at least two result sets: set compare.runs (e.g. --configfile compare.yaml)")
        return {k: v for run in runs for k, v in self._compare_files(run).items()}

    def history_inputs(self) -> dict:
        """:meth:`compare_inputs`' files of every result set of config history.runs (keys '<run>/<name>')."""
        if len(self.plan.history_runs) < 2:
            refuse("history needs at least two result sets in build order: set history.runs (e.g. --configfile "
                   "history.yaml)")
        return {k: v for run in self.plan.history_runs for k, v in self._compare_files(run).items()}

    def _compare_files(self, run: str) -> dict:
        g, lay = self.grid(run), self.layout
        names = ["summary", "kernels", "env", "findings", "repeats"] + (["control"] if g.control_shapes else [])
        files = {f"{run}/{n}": lay.run_file(n, run) for n in names}
        if run in self.plan.this_runs or lay.has_captures(run):
            for table in ("recipe", "recipe_backward"):
                files[f"{run}/{table}"] = self.per_capture(run, table, all_repeats=True)
        files[f"{run}/ops"] = self.per_capture(run, "ops")
        return files


def _gone_text(run_dir: str, state: dict) -> str:
    gone = state["lost"] + [f"{p} (changed after it was written)" for p in state["changed"]]
    lost = state["lost_captures"]
    return "; ".join(filter(None, [
        f"{len(gone)} derived files of {run_dir} are gone or were changed after they were made "
        f"({', '.join(gone[:10])}{f', and {len(gone) - 10} more' if len(gone) > 10 else ''})" if gone else "",
        f"{len(lost)} capture files that {run_dir} was made from are gone "
        f"({', '.join(lost[:3])}{', ...' if len(lost) > 3 else ''})" if lost else ""]))


def _announce(run_dir: str, state: dict, dryrun: bool) -> None:
    if state["lost"] or state["changed"]:
        print(f"attnprof: {_gone_text(run_dir, {**state, 'lost_captures': []})}: they are made again"
              + (" (a dry run plans it; nothing is written)" if dryrun else ""), file=sys.stderr)
    if state["lost_captures"]:
        print(f"attnprof: {_gone_text(run_dir, {**state, 'lost': [], 'changed': []})}: they are captured again",
              file=sys.stderr)


def refuse(message: str):
    """End the run with ``message`` alone (an input function's exception would come wrapped in a traceback)."""
    print(f"attnprof: {message}", file=sys.stderr)
    raise SystemExit(1)
