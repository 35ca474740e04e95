"""Format versions of a result set's records, and the one place that reads an older version as the current one.

Three files carry a format version (:data:`CURRENT`, attnprof.model.names ``FORMATS``: the writers' number, kept
apart from the migrations so that editing one reruns only the readers): ``status.json`` and ``env.json`` (a
top-level integer key ``"format"``) and ``repeats.csv`` (a constant column ``format``). A file without it is version 1.
Every reader gets them in the current format through :func:`current_record` (parsed JSON objects) or
:func:`current_table` (repeats.csv as pandas reads it; only its ``columns``, a column's ``tolist`` and ``assign`` are
used, so the model layer imports no pandas): one migration function per version step (:data:`_STEPS`), in memory,
nothing written back. A version newer than this code knows, or a version key that is not a whole number >= 1,
raises :class:`FormatError` naming the file, the version found and the command that fixes it. What each version
records and what an older file is read as: docs/results.md, "Format versions".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from attnprof.model.names import CAPTURE_FILES, FORMAT_KEY, RUN_FILES, repeat_of
from attnprof.model.names import FORMATS as CURRENT

#: The file name of each kind (a key of :data:`CURRENT`), for messages.
FILES = {kind: {**RUN_FILES, **CAPTURE_FILES}[kind] for kind in CURRENT}
#: The command that brings this attnprof up to date (README: an editable install in .venv).
UPGRADE = "git pull && .venv/bin/pip install -e ."
#: The command that writes repeats.csv again from the result set's captures, in the current format.
RESUMMARIZE = ".venv/bin/snakemake --profile workflow/profiles/render {run_dir}/report.pdf --forcerun summarize"
#: How to get a damaged record back, per kind ({folder}: the file's folder, {run_dir}: its result set's): status.json
#: and env.json are primary records, repeats.csv is derived.
_RESTORE = {"status": "copy it again from where the result set was captured, or delete {folder} to capture it again",
            "env": "copy it again from where the result set was captured",
            "repeats": f"write it again from the captures: {RESUMMARIZE}"}
#: The compare defaults a version-1 env.json without them was read with (attnprof.analysis.compare NOISE_FLOOR and
#: NOISE_FLOOR_HOST; tests/test_formats.py holds them equal).
COMPARE_DEFAULTS = {"noise_floor": 0.02, "noise_floor_host": 0.20}
#: The repeats.csv columns added after the table was first written (version 1 may lack them).
REPEATS_ADDED = ("started_at", "gpu_uuid", "gpu_name", "gpu_power_limit_w", "gpu_max_sm_clock_mhz")


#: The fields each kind's current version records (dotted: nested in an object), checked after the migrations: a
#: record of the current version without one was edited or cut short, never written so (issue 43 item 12).
FIELDS = {"status": ("repeat", "capture_started_at"),
          "env": ("captures_control", "config.repeats", "config.compare.noise_floor",
                  "config.compare.noise_floor_host", "config.top_up")}


class FormatError(ValueError):
    """A file in a format version this code cannot read: newer than it knows, or a version key that is no version.
    The message names the file, the version found and the command that fixes it."""


def _restore(kind: str, path) -> str:
    """How to get file ``path`` of ``kind`` back as its writer wrote it (:data:`_RESTORE`; repeats.csv's folder is its
    result set's)."""
    return _RESTORE[kind].format(folder=Path(path).parent, run_dir=Path(path).parent)


def _refusal(kind: str, path, found) -> FormatError:
    """The error for ``path`` (a file of ``kind``) whose format version ``found`` this code cannot read."""
    known = CURRENT[kind]
    if isinstance(found, int) and not isinstance(found, bool) and found > known:
        fix = f"upgrade attnprof ({UPGRADE}) and run again"
        if kind == "repeats":
            fix += f", or {_restore(kind, path)} with this one"
        return FormatError(f"{path}: format {found} is newer than this attnprof reads ({FILES[kind]} formats 1 to "
                           f"{known}): it was written by a later attnprof. Fix: {fix}")
    return FormatError(f"{path}: format {found!r} is not a format version ({FILES[kind]} formats are whole numbers 1 "
                       f"to {known}; none means 1): the file was edited or damaged. Fix: "
                       f"{_restore(kind, path)}")


def _checked(kind: str, path, found) -> int:
    """``found`` (a file's format version) when this code reads it, else :func:`_refusal`'s error."""
    if isinstance(found, int) and not isinstance(found, bool) and 1 <= found <= CURRENT[kind]:
        return found
    raise _refusal(kind, path, found)


def _migrated(kind: str, doc, path, version: int):
    """``doc`` of format ``version`` brought to the current one, step by step."""
    for step in range(version, CURRENT[kind]):
        doc = _STEPS[kind][step](doc, path)
    return doc


def current_record(kind: str, record: Mapping, path) -> dict:
    """JSON record ``record`` of ``kind`` (status, env), read from ``path``, in the current format (a new dict; a
    record of the current format is returned as a copy). Raises :class:`FormatError` for a version it cannot read."""
    version = _checked(kind, path, record.get(FORMAT_KEY, 1))
    current = _migrated(kind, dict(record), path, version)
    fields = FIELDS.get(kind, ()) if version == CURRENT[kind] else ()  # a migration fills in what it lacks
    if missing := [field for field in fields if _lacks(current, field.split("."))]:
        raise FormatError(f"{path}: format {version} records {', '.join(repr(f) for f in missing)}, which this file "
                          f"lacks: it was edited or cut short after it was written. Fix: {_restore(kind, path)}")
    return current


def _lacks(record, keys: list) -> bool:
    """Whether object ``record`` lacks the nested key ``keys`` (an object on the way that is missing, or a value there
    that is no object, is left to the readers' own check of it: "no key 'config'")."""
    if len(keys) > 1 and keys[0] not in record:
        return False
    for key in keys:
        if not isinstance(record, Mapping):
            return False
        if key not in record:
            return True
        record = record[key]
    return False


def current_table(kind: str, table, path):
    """Table ``table`` of ``kind`` (repeats: a pandas DataFrame, as read from ``path``) in the current format. Its
    version is the one value of its ``format`` column (1 without the column; the current one for a table without
    rows). Raises :class:`FormatError` for a version it cannot read, or a column that holds several."""
    if FORMAT_KEY not in table.columns:
        return _migrated(kind, table, path, 1)
    found = list(dict.fromkeys(table[FORMAT_KEY].tolist()))
    if len(found) > 1:
        raise _refusal(kind, path, found)
    return _migrated(kind, table, path, _checked(kind, path, found[0]) if found else CURRENT[kind])


# --- the migrations, one per version step ------------------------------------------------------------------------

def _status_1_to_2(record: dict, path) -> dict:
    """status.json 1 -> 2: ``repeat`` from the record's folder, ``capture_started_at`` from ``started_at``."""
    record.setdefault("repeat", repeat_of(Path(path).parent.name) or 1)
    record.setdefault("capture_started_at", record.get("started_at"))
    return {**record, FORMAT_KEY: 2}


def _env_1_to_2(record: dict, path) -> dict:
    """env.json 1 -> 2: ``config.repeats``, the compare defaults, ``config.top_up`` (off: a result set made before
    top-up added no rounds; attnprof.analysis.verdict) and ``captures_control`` (a config that is not an object is
    left to the readers' own check of it)."""
    config = record.get("config")
    if not isinstance(config, dict):
        return {**record, FORMAT_KEY: 2, "captures_control": False}
    compare = config.get("compare") if isinstance(config.get("compare"), dict) else {}
    config = {"repeats": 1, "top_up": {"rounds": 0, "time_s": 0.0}, **config, "compare": {**COMPARE_DEFAULTS, **compare}}
    return {**record, FORMAT_KEY: 2, "config": config, "captures_control": "environments" in config}


def _repeats_1_to_2(table, path):
    """repeats.csv 1 -> 2: the columns added since the first repeats.csv, empty, and ``format``."""
    added = {col: float("nan") for col in REPEATS_ADDED if col not in table.columns}
    return table.assign(**added, **{FORMAT_KEY: 2})


#: kind -> {version: the function that makes a record of that version one of the next}.
_STEPS: dict[str, dict[int, Callable]] = {
    "status": {1: _status_1_to_2},
    "env": {1: _env_1_to_2},
    "repeats": {1: _repeats_1_to_2},
}
