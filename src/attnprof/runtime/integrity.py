"""Derived files that went missing or were changed after they were made.

Snakemake does not remake a missing file whose readers are all up to date ("Nothing to be done"), and never
notices a file edited by hand. A result set that was published (its report exists) must not keep standing on
a derived file that is gone or no longer what its rule wrote. Two checks, both cheap enough for parse time:

* :func:`lost_files`: the derived files a published result set must hold (its per-capture tables, run tables,
  findings and plots, the caller's list) that do not exist;
* :func:`changed_files`: files whose content no longer matches the SHA-256 their rule recorded when it wrote
  them (:func:`record_checksums`; a sidecar ``<file>.sha256`` under ``<run>/logs/checksums/``): a hand-edited
  or half-written summary, say.

When either finds something (or a capture is lost, attnprof.model.config.lost_captures), the workflow
(workflow/rules/common.smk) bumps the result set's rebuild epoch (:func:`rebuild_epoch`), a parameter of rule
summarize: summarize reruns, and with it everything after it, and Snakemake then remakes every missing input on
the way (the per-capture tables of a lost table, the plots of a lost plot). Once the files are back the epoch
stays, so nothing reruns a second time.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: Folder of the checksum sidecars, inside a result set.
CHECKSUM_DIR = Path("logs") / "checksums"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _sidecar(run_dir: Path, path: Path) -> Path:
    return run_dir / CHECKSUM_DIR / (str(Path(path).resolve().relative_to(run_dir.resolve())) + ".sha256")


def record_checksums(run_dir: str | Path, paths: list[str | Path]) -> None:
    """Write the SHA-256 of each file of ``paths`` (inside result set ``run_dir``) to its sidecar. Called by
    a rule's script after it wrote them. Raises ValueError for a path outside ``run_dir``."""
    run_dir = Path(run_dir)
    for path in map(Path, paths):
        side = _sidecar(run_dir, path)
        side.parent.mkdir(parents=True, exist_ok=True)
        side.write_text(_sha256(path) + "\n")


def changed_files(run_dir: str | Path, paths: list[str | Path]) -> list[str]:
    """The files of ``paths`` that exist, have a recorded checksum and no longer match it (edited by hand,
    or cut short). Files without a sidecar (written before checksums were recorded) are not judged."""
    run_dir = Path(run_dir)
    out = []
    for path in map(Path, paths):
        try:
            recorded = _sidecar(run_dir, path).read_text().strip()
        except (OSError, ValueError):
            continue
        if path.exists() and _sha256(path) != recorded:
            out.append(str(path))
    return sorted(out)


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
    try:
        recorded = side.read_text().strip()
    except (OSError, ValueError):
        return (f"no SHA-256 recorded for it ({side} is missing: made before checksums were recorded, or copied "
                "without its logs/checksums/), so it cannot be checked")
    if _sha256(path) != recorded:
        return (f"damaged: its content is not what its writer wrote (its SHA-256 differs from the one recorded in "
                f"{side}): cut short or edited after it was written")
    return None


def lost_files(published: str | Path, paths: list[str | Path]) -> list[str]:
    """The files of ``paths`` that do not exist, when ``published`` (the result set's report) exists; [] for
    a result set not yet published (a first run makes them anyway)."""
    if not Path(published).exists():
        return []
    return sorted(str(p) for p in paths if not Path(p).exists())


#: The result set's rebuild epoch file (:func:`rebuild_epoch`).
EPOCH_FILE = Path("logs") / "rebuild-epoch"


def rebuild_epoch(run_dir: str | Path, bump: bool) -> str:
    """The result set's rebuild epoch: the token in ``<run_dir>/logs/rebuild-epoch`` ("0" when there is none),
    plus one when ``bump`` (something was lost or changed). Reads only: the workflow writes a bumped token with
    :func:`write_epoch` when a run starts (not in a dry run), so that once the files are back the token, and
    with it summarize's parameter, stays the same."""
    path = Path(run_dir) / EPOCH_FILE
    try:
        previous = path.read_text().strip()
    except OSError:
        previous = "0"
    previous = previous if previous.isdigit() else "0"
    return str(int(previous) + 1) if bump else previous


def write_epoch(run_dir: str | Path, token: str) -> None:
    """Record ``token`` as the result set's rebuild epoch (:func:`rebuild_epoch`)."""
    path = Path(run_dir) / EPOCH_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n")
