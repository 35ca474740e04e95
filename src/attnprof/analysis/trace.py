"""Read a torch.profiler Chrome trace and attribute every GPU event to the forward that launched it.

Trace format (Kineto's Chrome trace export, as written by
``torch.profiler.profile.export_chrome_trace``): ``traceEvents`` is a list of events;
complete events have ``ph == "X"``, ``ts`` and ``dur`` in microseconds, and a ``cat``:

* ``user_annotation`` -- ``record_function`` ranges on the CPU (our forwards, ``ProfilerStep#N``);
* ``cpu_op`` -- aten ops, with ``args["External id"]``;
* ``cuda_runtime`` / ``cuda_driver`` -- API calls (``cudaLaunchKernel``, ``cuLaunchKernelEx``,
  ``cudaMemcpyAsync``...), with ``args["correlation"]`` and the ``External id`` of the op
  that made them;
* ``kernel``, ``gpu_memcpy``, ``gpu_memset`` -- device activity, with the same
  ``args["correlation"]`` as the API call that launched it, and for kernels the launch
  metadata (``grid``, ``block``, ``registers per thread``, ``shared memory``,
  ``est. achieved occupancy %``).

A GPU event belongs to forward *i* when the API call with its correlation id started
inside the *i*-th CPU range named ``range_name``. This attribution does not assume that
every forward launches the same work, unlike dividing totals by the step count.

Flow events (``ph`` ``"s"``/``"f"``, ``cat`` ``"ac2g"``, ``id`` = the call's correlation id) draw
an arrow from an API call to its GPU activity; their finish (``"f"``) lands on the GPU row, or --
for calls that enqueue nothing (``cudaStreamIsCapturing``, ``cudaGetErrorString``...) -- on the
call itself (:func:`flow_finishes`). A CUDA-graph replay is one ``cudaGraphLaunch`` call whose
several GPU events all carry its correlation id (and, from Kineto, a ``graph node id``).

Completeness (see :func:`attnprof.analysis.tables.forward_table`): Kineto can lose GPU records (a
call that enqueues GPU work -- whatever its name, :func:`enqueues_gpu_work` -- whose correlation
id has no kernel/memcpy/memset event) and can write GPU events with impossible times (``ts`` 0,
``dur`` <= 0, a start before the launch call, an end long after the trace, two events overlapping
on one stream). Every such call is therefore matched to its GPU events, and every GPU event's times
are checked (:data:`GPU_CATEGORIES`, :func:`gpu_events` column ``time_ok``).

Reading (issue 10: a 311 MB trace in seconds and well under 1 GB): :func:`load_trace` decodes
only the fields the tables read -- ph, name, cat, ts, dur, pid, tid, a flow's id and, of ``args``, the
correlation and External ids, the callback id, the device, stream, graph node and the launch metadata -- with msgspec into typed
structs, a batch of events at a time, and keeps them as columns, never as one dict per event;
whatever that reader does not take as it is goes to the standard library's json, which gives
the same tables (or the same :class:`TraceError`).
"""

from __future__ import annotations

import codecs
import gc
import gzip
import io
import json
import operator
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: Name families of the runtime/driver API calls known to enqueue GPU work (kernel, memcpy or
#: memset records carrying the call's correlation id): kernel launches (runtime and driver,
#: cooperative, Ex/ExC), CUDA-graph launches, every memcpy and memset call, with any suffix
#: (versions ``_v2``/``_v11060``, per-thread-stream ``_ptsz``/``_ptds``...).
#: ``cu[da]LaunchHostFunc`` enqueues a host function, which leaves no GPU record: not a member.
LAUNCH_API = re.compile(r"^cu(da)?(Graph(Exec)?Launch|Launch(?!HostFunc)|Memcpy|Memset)\w*$")
#: The CUDA-graph launches among them (one call, several GPU events: the graph's nodes).
GRAPH_LAUNCH_API = re.compile(r"^cu(da)?Graph(Exec)?Launch\w*$")
#: Names of API calls that say nothing about the call: Kineto writes ``INVALID`` for a callback id
#: it has no name for; ``(no name)`` is :func:`events_frame`'s for a missing name.
UNNAMED_APIS = ("INVALID", "(no name)", "")
CPU_CATEGORIES = ("user_annotation", "cpu_op", "cuda_runtime", "cuda_driver")
#: Two times closer than this are the same time (us): timestamps are written to the nanosecond,
#: and a start plus a duration carries float rounding (see :func:`same_time_tolerance`).
TIME_TOLERANCE_US = 0.002


def same_time_tolerance(ts) -> np.ndarray:
    """Per time ``ts`` (us, array-like): the difference below which two times are taken as equal --
    :data:`TIME_TOLERANCE_US`, or two float64 steps at that magnitude where those are larger
    (epoch-scale timestamps)."""
    ts = np.abs(np.asarray(ts, dtype=float))
    return np.maximum(TIME_TOLERANCE_US, 2 * np.spacing(np.where(np.isfinite(ts), ts, 0.0)))


METADATA_ARGS = {
    "grid": "grid",
    "block": "block",
    "registers per thread": "registers_per_thread",
    "shared memory": "shared_memory_bytes",
    "est. achieved occupancy %": "est_occupancy_pct",
    "blocks per SM": "blocks_per_sm",
    "warps per SM": "warps_per_sm",
}


class TraceError(ValueError):
    """The file is not a readable torch.profiler Chrome trace."""


#: Keys of a GPU event's ``args`` that :func:`gpu_events` reads, in the order of the
#: ``gpu_args`` tuples of :func:`events_frame`.
GPU_ARG_KEYS = ("device", "External id", "stream", "graph node id", *METADATA_ARGS)
#: The columns of :func:`events_frame` that :func:`launches` and :func:`cpu_ops` keep.
EVENT_COLUMNS = ["name", "cat", "ts", "dur", "pid", "tid", "end", "correlation", "external_id", "cbid"]
#: Columns of :func:`flow_finishes`.
FLOW_COLUMNS = ["correlation", "pid", "tid", "ts"]


def load_trace(path: str | Path) -> dict:
    """Load a Chrome trace, gzipped (``.gz``) or plain JSON, and return it as a dict: the
    file's top-level JSON object, as :func:`json.loads` gives it.

    Raises :class:`TraceError`, whose message names the file and the cause, for every way
    the file can be unreadable: missing or unreadable file, a gzip stream cut short (an
    interrupted write), a corrupt gzip stream, JSON that ends early or is not JSON, text that
    is not UTF-8, JSON nested too deeply, JSON without a ``traceEvents`` list, and events that
    are not JSON objects.

    Two readers (issue 10). The fast one decodes the text with msgspec, a batch of events at
    a time, into typed structs holding only the fields :func:`events_frame` reads, and keeps
    them as columns; it returns a :class:`Trace`, which builds its ``traceEvents`` list only
    when asked for it. A file the fast reader does not take as it is goes to the reference
    reader (the standard library's json, every event a dict), which gives the same tables or
    raises the TraceError: anything msgspec refuses (malformed JSON, NaN/Infinity, lone
    surrogates, deep nesting), text that is not UTF-8, and fields whose types the columns do
    not hold as they are (a string ``ts``, a non-string name, a fractional or boolean id, an id
    of 2**53 or more...)."""
    path = Path(path)
    source, data = _read_file(path)
    decoded = _decode_fast(data)
    if decoded is None:
        return _load_reference(data, path)
    del data  # the text is freed before its columns become a frame
    top, columns = decoded
    return Trace(top, _frame_from_columns(columns), source, path.suffix == ".gz", _flow_frame(columns["flows"]))


def _read_file(path: Path) -> tuple[bytes, bytes | bytearray]:
    """The file's bytes and its text's bytes (the gzip stream decompressed a chunk at a time
    into one buffer; the same object for plain JSON)."""
    try:
        source = path.read_bytes()
        if path.suffix != ".gz":
            return source, source
        data = bytearray()
        with gzip.GzipFile(fileobj=io.BytesIO(source), mode="rb") as fh:
            while chunk := fh.read(1 << 24):
                data += chunk
        return source, data
    except EOFError as exc:
        raise TraceError(f"{path}: truncated trace: the gzip stream ends before its end-of-stream marker "
                         f"(an interrupted write?) ({exc})") from exc
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"{path}: corrupt gzip stream ({exc})") from exc
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc})") from exc


def _load_reference(data: bytes | bytearray, path: Path) -> dict:
    """The reference reader: the text as ``open(path, "rt", encoding="utf-8")`` reads it, then
    :func:`json.loads`; a plain dict, every event a dict."""
    try:
        text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc})") from exc
    try:
        trace = json.loads(text)
    except json.JSONDecodeError as exc:
        cause = "truncated trace: the JSON ends early" if exc.pos >= len(text.rstrip()) else "not valid JSON"
        raise TraceError(f"{path}: {cause} ({exc})") from exc
    except RecursionError as exc:
        raise TraceError(f"{path}: not a Chrome trace (JSON nested too deeply)") from exc
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError(f"{path}: not a Chrome trace (no traceEvents list)")
    bad = sum(not isinstance(e, dict) for e in trace["traceEvents"])
    if bad:
        raise TraceError(f"{path}: corrupt trace: {bad} of {len(trace['traceEvents'])} events are not JSON objects")
    return trace


# --- the fast reader --------------------------------------------------------------------------

#: What the fast reader keeps of an event's ``args``: ids (JSON integers, else the reference
#: reader takes the file) and, as they are, the device and the launch metadata.
_Args = msgspec.defstruct("_Args", [
    ("correlation", int | None, None),
    ("external_id", int | None, msgspec.field(default=None, name="External id")),
    ("cbid", int | None, None),
    ("device", Any, None),
    ("stream", Any, None),
    ("graph_node", Any, msgspec.field(default=None, name="graph node id")),
    *((col, Any, msgspec.field(default=None, name=key)) for key, col in METADATA_ARGS.items()),
], gc=False)
_NO_ARGS = _Args()
_gpu_arg_tuple = operator.attrgetter("device", "external_id", "stream", "graph_node", *METADATA_ARGS.values())  # GPU_ARG_KEYS order


class _Event(msgspec.Struct, gc=False):
    """What the fast reader keeps of an event (every other field is skipped unread)."""
    ph: str | None = None
    name: str | None = None
    cat: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: _Args | None = None
    id: Any = None  # flow events' id (the correlation id of the call they link)


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_EVENT = msgspec.json.Decoder(_Event)
_BATCH = 1024  # events decoded at a time: few enough to stay in the CPU cache while their fields are read
_EXACT_IDS = 2.0**53  # ids travel as float64 on their way to Int64: exact below this


class _NotFast(Exception):
    """The fast reader does not take this file as it is; the reference reader will."""


def _is_utf8(data: bytes | bytearray) -> bool:
    """Whether ``data`` is UTF-8 text, checked 16 MiB at a time."""
    if data.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for i in range(0, len(view), 1 << 24):
            decoder.decode(view[i : i + (1 << 24)])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _decode_fast(data: bytes | bytearray) -> tuple[dict, dict] | None:
    """The top-level object (every value but ``traceEvents`` decoded by :func:`json.loads`) and
    the complete events' columns; None where the fast reader does not take the file."""
    if not _is_utf8(data):  # msgspec checks the strings it decodes, not the ones it skips
        return None
    try:
        top = _TOP.decode(data)
        if "traceEvents" not in top:
            return None
        columns = _event_columns(_RAW_LIST.decode(top["traceEvents"]))
        doc = {key: _LAZY if key == "traceEvents" else json.loads(bytes(raw).decode("utf-8")) for key, raw in top.items()}
    except (msgspec.MsgspecError, ValueError, RecursionError, OverflowError, _NotFast):
        return None
    return doc, columns


def _event_columns(raws: list) -> dict:
    """Columns of the complete (``ph == "X"``) events among ``raws`` (each one event's JSON
    text), decoded a batch at a time: name, cat, pid, tid as lists (equal strings and ids
    shared; None where missing), ts, dur, correlation, external_id, cbid as float64 arrays (NaN
    where missing), gpu as (row, tuple of the GPU_ARG_KEYS values) for kernel, memcpy and
    memset events; and flows: (id, pid, tid, ts) of every ``ac2g`` flow finish (``ph == "f"``). The cyclic garbage collector is paused meanwhile: it would otherwise walk
    the growing lists again and again, and nothing made here forms a cycle."""
    decode = _EVENT.decode
    share = {None: None}.setdefault
    name, cat, pid, tid, gpu, flows = [], [], [], [], [], []
    ts, dur, corr, ext, cbid = [], [], [], [], []
    rows = 0
    collecting = gc.isenabled()
    gc.disable()
    try:
        for start in range(0, len(raws), _BATCH):
            batch = list(map(decode, raws[start : start + _BATCH]))
            flows += [(e.id, e.pid, e.tid, e.ts) for e in batch if e.ph == "f" and e.cat == "ac2g"]
            xs = [e for e in batch if e.ph == "X"]
            cats = [share(e.cat, e.cat) for e in xs]
            name += [share(e.name, e.name) for e in xs]
            cat += cats
            pid += [share(e.pid, e.pid) for e in xs]
            tid += [share(e.tid, e.tid) for e in xs]
            # a JSON true/false is no time (numpy would read it as 1.0 or 0.0): NaN, an impossible time
            ts.append(np.array([np.nan if type(e.ts) is bool else e.ts for e in xs], dtype=float))
            dur.append(np.array([np.nan if type(e.dur) is bool else e.dur for e in xs], dtype=float))
            args = [_NO_ARGS if e.args is None else e.args for e in xs]
            for out, ids in ((corr, [a.correlation for a in args]), (ext, [a.external_id for a in args]),
                             (cbid, [a.cbid for a in args])):
                ids = np.array(ids, dtype=float)
                if (np.abs(ids) >= _EXACT_IDS).any():
                    raise _NotFast("an id too large for float64")
                out.append(ids)
            gpu += [(rows + i, _gpu_arg_tuple(args[i])) for i, c in enumerate(cats) if c in GPU_CATEGORIES]
            rows += len(xs)
    finally:
        if collecting:
            gc.enable()
    return {"rows": rows, "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "correlation": corr, "external_id": ext, "cbid": cbid, "gpu": gpu, "flows": flows}


def _frame_from_columns(columns: dict) -> pd.DataFrame:
    """:func:`events_frame` of the fast reader's columns: the same frame as from the events'
    dicts (:func:`_frame_from_dicts`)."""
    if not columns["rows"]:
        return _frame_from_dicts([])
    df = pd.DataFrame({"name": columns["name"], "cat": columns["cat"], "ts": np.concatenate(columns["ts"]),
                       "dur": np.concatenate(columns["dur"]), "pid": columns["pid"], "tid": columns["tid"]})
    gpu_args = np.full(len(df), None, dtype=object)
    for row, values in columns["gpu"]:
        gpu_args[row] = values
    return _finish_frame(df, *(pd.Series(np.concatenate(columns[c])) for c in ("correlation", "external_id", "cbid")),
                         gpu_args, names_as_read=None in columns["name"] or None in columns["cat"])


def _flow_frame(rows: list[tuple]) -> pd.DataFrame:
    """:func:`flow_finishes`' frame of the flow finishes' (id, pid, tid, ts) rows (the fast reader's, or of dicts)."""
    flows = pd.DataFrame(rows, columns=FLOW_COLUMNS, dtype=object)
    return flows.assign(correlation=integer_ids(flows["correlation"]),
                        ts=pd.to_numeric(flows["ts"], errors="coerce").astype(float))


def _frame_from_dicts(events: list) -> pd.DataFrame:
    """:func:`events_frame` of a list of event dicts (the reference reader's, or anyone's)."""
    rows = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    cols = ["name", "cat", "ts", "dur", "pid", "tid", "args"]
    df = pd.DataFrame([{c: e.get(c) for c in cols} for e in rows], columns=cols)
    args = df.pop("args").apply(lambda a: a if isinstance(a, dict) else {})
    gpu_args = [tuple(a.get(k) for k in GPU_ARG_KEYS) if isinstance(c, str) and c in GPU_CATEGORIES else None
                for c, a in zip((e.get("cat") for e in rows), args)]
    return _finish_frame(df, *(args.apply(lambda a, k=k: a.get(k)) for k in ("correlation", "External id", "cbid")), gpu_args)


def _finish_frame(df: pd.DataFrame, correlation: pd.Series, external_id: pd.Series, cbid: pd.Series, gpu_args: np.ndarray | list,
                  names_as_read: bool = True) -> pd.DataFrame:
    """Both readers' last step: ``df`` holds the events' name, cat, ts, dur, pid, tid as read.
    ``names_as_read`` False: every name and cat is a string (the fast reader's, when none is
    missing), which the name and cat rules leave as they are."""
    if names_as_read:
        df["name"] = df["name"].map(lambda n: n if isinstance(n, str) else "(no name)" if n is None else str(n))
        df["cat"] = df["cat"].map(lambda c: c if isinstance(c, str) else None)
    for col in ("ts", "dur"):  # a JSON true/false is no time (pandas would read it as 1.0 or 0.0): NaN
        if df[col].dtype == object:
            df[col] = df[col].map(lambda v: None if isinstance(v, bool) else v)
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    df["end"] = df["ts"] + df["dur"]
    df["correlation"] = integer_ids(correlation)
    df["external_id"] = integer_ids(external_id)
    df["cbid"] = integer_ids(cbid)
    df["gpu_args"] = pd.Series(gpu_args, index=df.index, dtype=object)
    return df


_LAZY = object()  # a Trace's "traceEvents" value until something asks for the list


def _after_build(method):
    """``method`` of dict for a :class:`Trace`: the same, called once its ``traceEvents`` list is built."""
    return lambda self, *args: method(self._built(), *args)


class Trace(dict):
    """What :func:`load_trace`'s fast reader returns: the trace's top-level JSON object as a
    dict, equal to what :func:`json.loads` gives, that also holds the complete events as
    columns (:func:`events_frame` reads them). Its ``traceEvents`` list -- every event a dict,
    as json.loads gives it -- is built from the file's bytes (kept, compressed as read) the
    first time something reads it (``trace["traceEvents"]``, ``get``, ``items``, ``values``,
    ``copy``, comparisons, pickling, ``json.dump``...); from then on the list is what counts
    (the caller may change it) and events_frame reads it, like a plain dict's."""

    __slots__ = ("_frame", "_source", "_gzipped", "_flows")

    def __init__(self, top: dict, frame: pd.DataFrame, source: bytes, gzipped: bool, flows: pd.DataFrame):
        """``top``: the top-level object with :data:`_LAZY` for ``traceEvents``; ``frame``: its
        events_frame; ``source``: the file's bytes, gzip-compressed when ``gzipped``; ``flows``:
        its :func:`flow_finishes`."""
        super().__init__(top)
        self._frame, self._source, self._gzipped, self._flows = frame, source, gzipped, flows

    def columns(self) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """The events' columns and the flow finishes read from the file while ``traceEvents`` has not been built;
        else None."""
        return (self._frame, self._flows) if dict.get(self, "traceEvents") is _LAZY else None

    def _built(self) -> Trace:
        if dict.get(self, "traceEvents") is _LAZY:
            text = gzip.decompress(self._source) if self._gzipped else self._source
            dict.__setitem__(self, "traceEvents", json.loads(text.decode("utf-8"))["traceEvents"])
            self._frame = self._source = self._flows = None
        return self

    def __getitem__(self, key):
        if key == "traceEvents":
            self._built()
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self):  # defined so that dict(trace) and {**trace} go through __getitem__
        return dict.__iter__(self)

    items = _after_build(dict.items)
    values = _after_build(dict.values)
    copy = _after_build(dict.copy)
    pop = _after_build(dict.pop)
    popitem = _after_build(dict.popitem)
    setdefault = _after_build(dict.setdefault)

    def __eq__(self, other):
        if isinstance(other, Trace):
            other._built()
        return dict.__eq__(self._built(), other)

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __or__ = _after_build(dict.__or__)
    __ror__ = _after_build(dict.__ror__)
    __repr__ = _after_build(dict.__repr__)

    def __reduce_ex__(self, protocol):
        return dict, (dict(self._built()),)


def events_frame(trace: dict) -> pd.DataFrame:
    """Complete (``ph == "X"``) events as a DataFrame with columns name, cat, ts, dur
    (microseconds; NaN where missing or not a number), pid, tid, end, correlation,
    external_id, cbid (``args.cbid``, the CUPTI callback id that names a runtime/driver API;
    <NA> where missing) and gpu_args: for kernel, memcpy and memset events the tuple of their
    ``args`` values of :data:`GPU_ARG_KEYS` (None where missing), None for the other events
    (the events' other ``args`` are not kept). Empty frame (same columns) when the trace holds
    none. A :class:`Trace` gives the columns its fast reader read; any other dict, its
    ``traceEvents`` dicts."""
    read = trace.columns() if isinstance(trace, Trace) else None
    return read[0].copy(deep=False) if read else _frame_from_dicts(trace["traceEvents"])


def flow_finishes(trace: dict) -> pd.DataFrame:
    """The finishes (``ph == "f"``) of the trace's ``ac2g`` flow events, one row each, columns
    :data:`FLOW_COLUMNS`: correlation (the flow's ``id``: the correlation id of the API call it
    starts from; <NA> when not an integer), pid, tid (where the arrow lands) and ts (us). Kineto
    draws an ``ac2g`` arrow from a call to its GPU activity, which lands on the GPU's row (another
    pid than the call's); for calls that enqueue nothing it lands on the call itself. Empty frame
    when the trace has none."""
    read = trace.columns() if isinstance(trace, Trace) else None
    if read:
        return read[1].copy()
    rows = [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "f" and e.get("cat") == "ac2g"]
    return _flow_frame([(e.get("id"), e.get("pid"), e.get("tid"), e.get("ts")) for e in rows])


def integer_ids(values: pd.Series) -> pd.Series:
    """Ids as nullable integers: numbers (or numeric strings) with an integral value; anything
    else (fractions, words, missing) becomes <NA>, which matches nothing."""
    num = pd.to_numeric(values, errors="coerce")
    num = num.where(num.notna() & np.isfinite(num) & (num == np.floor(num)))
    return num.astype("Int64")


def forward_ranges(events: pd.DataFrame, range_name: str) -> pd.DataFrame:
    """The CPU ``record_function`` ranges named ``range_name``, in time order (ranges without
    a valid start last), as columns forward (0-based), ts, end, cpu_us (the range's duration:
    host time of one forward), tid, and range_ok: False when the range has no finite start, a
    missing, zero or negative duration (a forward takes time: a zero-length range holds no
    forward, also on a CPU run, where no GPU event would betray it), or overlaps another such
    range of its thread (forwards are sequential: an overlap means a corrupt trace or a different
    program). Ranges that touch -- one ends where the next begins, within
    :func:`same_time_tolerance` -- do not overlap. Work is attributed only to ranges that are ok."""
    r = events[(events["cat"] == "user_annotation") & (events["name"] == range_name)]
    r = r.sort_values("ts", na_position="last").reset_index(drop=True)
    out = pd.DataFrame({"forward": r.index, "ts": r["ts"], "end": r["end"], "cpu_us": r["dur"], "tid": r["tid"]})
    ok = np.isfinite(out["ts"]) & np.isfinite(out["end"]) & (out["cpu_us"] > 0)
    overlap = pd.Series(False, index=out.index)
    for _, rr in out[ok].groupby("tid"):
        rr = rr.sort_values("ts")
        prev_end = rr["end"].cummax().shift()
        # starts before an earlier range of the thread has ended (touching is not overlapping)
        hit = rr["ts"] < prev_end - same_time_tolerance(rr["ts"])
        overlap[rr.index[hit]] = True
        overlap[rr.index[hit.shift(-1, fill_value=False)]] = True
    out["range_ok"] = ok & ~overlap
    return out


def assign_forward(ts: pd.Series, tid: pd.Series, ranges: pd.DataFrame) -> pd.Series:
    """Index of the forward range (``range_ok`` ones only) that contains each (ts, tid) --
    same thread, range start <= ts <= range end -- or -1 when none does. Vectorised with
    numpy.searchsorted per thread; ranges of one thread do not overlap (forward_ranges)."""
    out = pd.Series(-1, index=ts.index, dtype="int64")
    for thread, rr in ranges[ranges["range_ok"]].groupby("tid"):
        rr = rr.sort_values("ts")
        sel = (tid == thread).fillna(False).to_numpy(bool) & np.isfinite(ts.to_numpy(float))  # no thread (<NA>): none
        t = ts.to_numpy(float)[sel]
        i = np.searchsorted(rr["ts"].to_numpy(float), t, side="right") - 1
        inside = (i >= 0) & (t <= rr["end"].to_numpy(float)[np.clip(i, 0, None)])
        out.iloc[np.flatnonzero(sel)] = np.where(inside, rr["forward"].to_numpy()[np.clip(i, 0, None)], -1)
    return out


def launches(events: pd.DataFrame, ranges: pd.DataFrame, assign, flows: pd.DataFrame) -> pd.DataFrame:
    """CUDA runtime and driver API calls (columns :data:`EVENT_COLUMNS`) with the forward they
    ran in (-1: outside any) and what the trace says about the GPU work they enqueue:

    - ``linked``: the trace links this call to GPU work: a kernel, memcpy or memset event carries
      its correlation id, or an ``ac2g`` flow from it lands on another process's row than the
      call's (the GPU's; :func:`flow_finishes`, ``flows``);
    - ``enqueues``: the call enqueues GPU work, so that finding none of it means lost GPU records
      (:func:`enqueues_gpu_work`);
    - ``graph_launch``: the call replays a CUDA graph (name of :data:`GRAPH_LAUNCH_API`, or GPU
      events with a ``graph node id`` carry its correlation id): it owns several GPU events.

    ``assign``: the rule that maps (ts, tid) to a range (:func:`assign_forward`; the backward
    ranges use :func:`attnprof.analysis.backward.assign_backward`)."""
    api = _in_ranges(events, LAUNCH_CATEGORIES, ranges, assign)
    gpu = events[events["cat"].isin(GPU_CATEGORIES)]
    api["linked"] = _linked_calls(api, gpu, flows, events[events["cat"].isin(NONWORK_CATEGORIES)])
    api["enqueues"] = enqueues_gpu_work(api, events)
    node = gpu["gpu_args"].map(lambda a: a[_NODE] is not None).astype(bool)
    graph_corr = gpu.loc[node, "correlation"].dropna()
    api["graph_launch"] = (_matches(api["name"], GRAPH_LAUNCH_API) | api["correlation"].isin(graph_corr).fillna(False)).astype(bool)
    return api


_NODE = GPU_ARG_KEYS.index("graph node id")


def _in_ranges(events: pd.DataFrame, categories, ranges: pd.DataFrame, assign) -> pd.DataFrame:
    """The events of ``categories`` (columns :data:`EVENT_COLUMNS`) with the range ``assign`` puts each in (-1: none)."""
    out = events.loc[events["cat"].isin(categories), EVENT_COLUMNS].copy()
    out["forward"] = assign(out["ts"], out["tid"], ranges)
    return out


def _matches(names: pd.Series, pattern: re.Pattern) -> pd.Series:
    """``names`` (as strings) that ``pattern`` matches from their start; each distinct name tried once."""
    names = names.astype(str)
    hit = {n: bool(pattern.match(n)) for n in names.unique()}
    return names.map(hit).astype(bool)


#: Categories of GPU-side records that are no GPU work (Kineto's synchronization and event records).
NONWORK_CATEGORIES = ("cuda_sync", "cuda_event")


def _linked_calls(api: pd.DataFrame, gpu: pd.DataFrame, flows: pd.DataFrame, nonwork: pd.DataFrame) -> pd.Series:
    """Per API call: a GPU event carries its correlation id, or an ac2g flow of its correlation id
    lands somewhere else than on the call itself (another thread's row -- the GPU stream's -- or
    another time) and there not on a record of :data:`NONWORK_CATEGORIES` (``nonwork``: those
    events). Kineto's flows of calls without GPU work (``cudaStreamIsCapturing``,
    ``cudaFuncSetAttribute``...) land on the call: its own thread, at its own start; those of
    synchronizations and event records land on their ``cuda_sync``/``cuda_event`` records."""
    linked = api["correlation"].isin(gpu["correlation"].dropna()).fillna(False).astype(bool)
    if len(flows):
        f = flows.dropna(subset=["correlation"]).rename(columns={"tid": "f_tid", "ts": "f_ts"})[["correlation", "f_tid", "f_ts"]]
        calls = api.loc[api["correlation"].notna(), ["correlation", "tid", "ts"]].reset_index()
        m = calls.merge(f, on="correlation")
        if len(m):
            other_thread = np.array([a != b for a, b in zip(m["tid"], m["f_tid"])], dtype=bool)
            other_time = ~(np.abs(m["f_ts"].to_numpy(float) - m["ts"].to_numpy(float)) <= same_time_tolerance(m["ts"]))
            # and not onto a record of GPU-side bookkeeping (Kineto's cuda_sync and cuda_event records of
            # synchronizations and event records carry the call's correlation and get its flow): no GPU work. A flow
            # that lands where no event is (its kernel's record was lost) still links the call to GPU work.
            starts: dict = {}
            for t, x in zip(nonwork["tid"], nonwork["ts"].to_numpy(float)):
                starts.setdefault(t, []).append(x)
            starts = {t: np.sort(np.array(v)) for t, v in starts.items()}

            def on_record(t, x, tol):
                a = starts.get(t)
                if a is None or not np.isfinite(x):
                    return False
                i = np.searchsorted(a, x)
                return any(0 <= j < len(a) and abs(a[j] - x) <= tol for j in (i - 1, i))

            f_ts = m["f_ts"].to_numpy(float)
            lands = ~np.array([on_record(t, x, tol) for t, x, tol in zip(m["f_tid"], f_ts, same_time_tolerance(f_ts))],
                              dtype=bool)
            linked.loc[m.loc[(other_thread | other_time) & lands, "index"].unique()] = True
    return linked


def enqueues_gpu_work(api: pd.DataFrame, events: pd.DataFrame) -> pd.Series:
    """Per API call of ``api`` (:func:`launches`' frame, with its ``linked`` and ``forward``
    columns): whether the call enqueues GPU work -- decided from what the trace says, not from
    a fixed list of names. A call enqueues GPU work when

    1. the trace links it to GPU work (``linked``); or
    2. it has a real name (not :data:`UNNAMED_APIS`) and that name is of a family known to enqueue
       work (:data:`LAUNCH_API`: launches, graph launches, memcpys, memsets with any suffix), or the
       trace links some call of that name (in any range, or outside) to GPU work; or
    3. it has no real name (Kineto's ``INVALID``) and either its callback id (``args.cbid``, which
       names the API exactly) is that of a call of its category that the trace links to GPU work,
       or it stands where another range has a linked call: the same k-th call among those issued
       by aten ops of the same name in its range (for calls that carry no callback id).

    A call that enqueues work and whose correlation id no GPU event carries lost its GPU
    records (:func:`attnprof.analysis.completeness.completeness`). Calls that enqueue nothing
    (``cudaStreamIsCapturing``, ``cudaGetDevice``, ``cudaEventRecord``, synchronizations,
    ``cudaFuncSetAttribute``, ``cudaMalloc``...) are none of these. Bool Series on api's index."""
    names = api["name"].astype(str)
    linked = api["linked"].astype(bool)
    named = ~names.isin(UNNAMED_APIS)
    known = set(names[linked & named])
    out = linked | (named & (_matches(names, LAUNCH_API) | names.isin(known)))
    unnamed = ~named & ~linked
    if unnamed.any():
        cbid = api["cbid"]
        known_cbid = set(zip(api.loc[linked & cbid.notna(), "cat"], cbid[linked & cbid.notna()].astype(int)))
        by_cbid = [c is not pd.NA and (cat, int(c)) in known_cbid for cat, c in zip(api["cat"], cbid)]
        out |= unnamed & pd.Series(by_cbid, index=api.index, dtype=bool)
        inside = api[api["forward"] >= 0].sort_values("ts", kind="stable")
        if len(inside):
            ops = events[events["cat"] == "cpu_op"].dropna(subset=["external_id"]).drop_duplicates("external_id")
            op = inside["external_id"].map(ops.set_index("external_id")["name"]).astype(object).fillna("")
            k = inside.assign(op=op).groupby(["forward", "op"]).cumcount()
            place = pd.Series(list(zip(op, k)), index=inside.index)
            known_place = set(place[linked[inside.index]])
            at_linked_place = place.map(lambda p: p in known_place).reindex(api.index, fill_value=False).astype(bool)
            out |= unnamed & at_linked_place
    return out.astype(bool)


def cpu_ops(events: pd.DataFrame, ranges: pd.DataFrame, assign=assign_forward) -> pd.DataFrame:
    """aten ops (``cpu_op``) with the forward they ran in (-1: outside any); ``assign`` as in :func:`launches`."""
    return _in_ranges(events, ["cpu_op"], ranges, assign)


def gpu_events(events: pd.DataFrame, ranges: pd.DataFrame, assign=assign_forward) -> pd.DataFrame:
    """Kernels, memcpys and memsets joined to the API call that launched them (by
    correlation id) and to that call's forward and issuing aten op (by External id).

    Columns: name, category ('kernel'|'memcpy'|'memset'), ts, dur, end (us), forward
    (-1 when the launch was outside every forward or missing), launch_api, launch_ts (us,
    start of the launching API call), op, device (``args.device``: the GPU it ran on, the
    ``id`` of a ``deviceProperties`` entry; NaN when absent), stream (``args.stream``, else the
    event's tid: the row Kineto draws it on), graph_replay (the event is a node of a CUDA-graph
    replay: its launch is a graph launch, :func:`launches`, or it carries a ``graph node id``),
    stream_overlap (the event overlaps another GPU event of the same device and stream by more
    than :func:`same_time_tolerance`: a stream runs its work in order, so both times are
    impossible), time_ok (False for impossible times: ts or dur missing or not finite, ts <= 0,
    dur <= 0, a start before the launch call started, an end later than the trace's CPU span
    again after its last CPU event, or stream_overlap), duplicate (another GPU event carries the
    same correlation id: one launch, one GPU record -- except under a graph launch, whose nodes
    share its id: there only a second event of the same graph node, or the same name, start and
    duration, is a duplicate), orphan_forward (for an event whose launch record is missing: the
    forward of the aten op its own ``External id`` names, else -1), and the launch metadata
    columns of METADATA_ARGS (NaN where the trace carries none). ``assign``: the (ts, tid) ->
    range rule, as in :func:`launches`."""
    gpu = events[events["cat"].isin(GPU_CATEGORIES)].copy()
    gpu["category"] = gpu["cat"].map(GPU_CATEGORIES)
    arg = pd.DataFrame(gpu["gpu_args"].tolist(), index=gpu.index, columns=list(GPU_ARG_KEYS))
    gpu["device"] = integer_ids(arg["device"])
    gpu["stream"] = arg["stream"].where(arg["stream"].notna(), gpu["tid"]).astype(object)
    gpu["graph_node"] = arg["graph node id"]
    gpu["own_external_id"] = integer_ids(arg["External id"])  # an orphan's: names the aten op that issued it
    gpu = gpu.join(arg[list(METADATA_ARGS)].rename(columns=METADATA_ARGS))
    for col in ("grid", "block"):
        gpu[col] = gpu[col].apply(lambda g: "x".join(str(int(x)) for x in g) if isinstance(g, list) else None)
    api = _in_ranges(events, LAUNCH_CATEGORIES, ranges, assign)[["correlation", "name", "forward", "external_id", "ts"]]
    api = api.dropna(subset=["correlation"]).drop_duplicates("correlation")
    api["graph_launch"] = _matches(api["name"], GRAPH_LAUNCH_API)
    api = api.rename(columns={"name": "launch_api", "external_id": "launch_external_id", "ts": "launch_ts"})
    gpu = gpu.merge(api, on="correlation", how="left")
    # the CPU side of the trace spans [cpu_start, cpu_end]: GPU work launched in it cannot end
    # later than one more such span after it (real traces end within tens of us)
    cpu = events[events["cat"].isin(CPU_CATEGORIES)]
    cpu_ts, cpu_end = cpu["ts"][np.isfinite(cpu["ts"])], cpu["end"][np.isfinite(cpu["end"])]
    latest = cpu_end.max() + (cpu_end.max() - cpu_ts.min()) if len(cpu_ts) and len(cpu_end) else np.inf
    time_ok = (np.isfinite(gpu["ts"]) & np.isfinite(gpu["dur"]) & (gpu["ts"] > 0) & (gpu["dur"] > 0)
               & ~(gpu["ts"] < gpu["launch_ts"]) & ~(gpu["end"] > latest))
    has_corr = gpu["correlation"].notna()
    node = gpu["graph_node"].notna()
    graph = (gpu["graph_launch"].astype("boolean").fillna(False).astype(bool) | node) & has_corr
    gpu["duplicate"] = has_corr & gpu.duplicated("correlation", keep=False)
    if graph.any():  # a graph launch's events share its correlation id: duplicates are repeated nodes
        graph = gpu["correlation"].isin(gpu.loc[graph, "correlation"]).fillna(False).astype(bool)
        key = gpu.assign(graph_node=gpu["graph_node"].astype(str))
        graph_dup = has_corr & ((node & key.duplicated(["correlation", "graph_node"], keep=False))
                                | gpu.duplicated(["correlation", "name", "ts", "dur"], keep=False))
        gpu["duplicate"] = np.where(graph, graph_dup, gpu["duplicate"])
    gpu["graph_replay"] = graph | node
    # records repeated under one correlation id are a record defect (duplicate), not a time defect
    gpu["stream_overlap"] = same_stream_overlaps(gpu, time_ok & ~gpu["duplicate"])
    gpu["time_ok"] = time_ok & ~gpu["stream_overlap"]
    # a GPU event whose launch record is missing: its own External id names the aten op that issued it
    ops = events[events["cat"] == "cpu_op"].dropna(subset=["external_id"]).drop_duplicates("external_id").set_index("external_id")
    gpu["orphan_forward"] = -1
    orphan = gpu["launch_api"].isna()
    if orphan.any() and len(ops):
        own_ext = gpu.loc[orphan, "own_external_id"]
        fwd = assign(own_ext.map(ops["ts"]).astype(float), own_ext.map(ops["tid"]), ranges)
        gpu.loc[orphan, "orphan_forward"] = fwd.values
    gpu["op"] = gpu["launch_external_id"].map(ops["name"])
    gpu["forward"] = gpu["forward"].fillna(-1).astype("int64")
    cols = ["name", "category", "ts", "dur", "end", "forward", "launch_api", "launch_ts", "op", "correlation", "device",
            "stream", "graph_replay", "stream_overlap", "time_ok", "duplicate", "orphan_forward", *METADATA_ARGS.values()]
    return gpu[cols].sort_values("ts").reset_index(drop=True)


def same_stream_overlaps(gpu: pd.DataFrame, considered: pd.Series) -> pd.Series:
    """Per GPU event of ``gpu`` (columns ts, end, device, stream, pid): True where the event
    overlaps another one of the same device (``device``, else the event's pid) and stream by more
    than :func:`same_time_tolerance` -- both events of each such pair. Only events where
    ``considered`` is True take part (the others are False). Events on different streams may
    overlap (that is concurrency); on one stream they cannot."""
    out = np.zeros(len(gpu), dtype=bool)
    sel = np.flatnonzero(considered.to_numpy(bool))
    sub = gpu.iloc[sel]
    device = sub["device"].astype(object).where(sub["device"].notna(), sub["pid"])
    lanes = pd.Series(list(zip(device.map(repr), sub["stream"].map(repr))), index=sub.index)
    for _, rows in pd.Series(np.arange(len(sub)), index=sub.index).groupby(lanes):
        pos = rows.to_numpy()
        pos = pos[np.argsort(sub["ts"].to_numpy(float)[pos], kind="stable")]
        ts, end = sub["ts"].to_numpy(float)[pos], sub["end"].to_numpy(float)[pos]
        reach = np.maximum.accumulate(end)  # the latest end so far
        holder = np.maximum.accumulate(np.where(end >= reach, np.arange(len(pos)), 0))  # the event that reaches it
        hit = ts[1:] < reach[:-1] - same_time_tolerance(ts[1:])
        out[sel[pos[1:][hit]]] = True
        out[sel[pos[holder[:-1][hit]]]] = True
    return pd.Series(out, index=gpu.index)


def busy_time(ts: pd.Series, dur: pd.Series, group: pd.Series) -> pd.Series:
    """Time (us) covered by the union of the intervals [ts, ts + dur] of each ``group`` (labels on the same
    index) -- the time the GPU was busy with them, however many streams ran at once: the sum of their
    durations less every part already covered by an earlier-starting interval (so it equals the sum, up to
    float rounding, when none overlaps). A Series indexed by label."""
    df = pd.DataFrame({"g": group, "ts": ts.astype(float), "dur": dur.astype(float)}).sort_values(["g", "ts"], kind="stable")
    df["end"] = df["ts"] + df["dur"]
    reach = df.groupby("g", sort=False)["end"].cummax()
    prev = reach.groupby(df["g"], sort=False).shift()  # latest end of the earlier-starting intervals
    covered = (np.minimum(df["end"], prev) - df["ts"]).clip(lower=0.0).fillna(0.0)
    return df.groupby("g")["dur"].sum() - covered.groupby(df["g"]).sum()


def device_properties(trace: dict) -> list[dict]:
    """The ``deviceProperties`` block Kineto writes, one entry per visible GPU with its
    ``id`` (GPU name, SM count, registers per SM...); empty list for CPU-only traces (a
    single object is taken as a list of one; entries that are not objects are dropped). Pick
    the entry of the device a kernel ran on with :func:`properties_of`."""
    props = trace.get("deviceProperties") or []
    props = [props] if isinstance(props, dict) else props if isinstance(props, list) else []
    return [p for p in props if isinstance(p, dict)]


def properties_of(props: list[dict], device) -> dict:
    """The ``deviceProperties`` entry whose ``id`` is ``device`` (a GPU event's
    ``args.device``); {} when ``device`` is missing or no entry has that id -- never
    another device's entry, whose limits would give wrong occupancy and architecture."""
    if device is None or pd.isna(device):
        return {}
    return next((p for p in props if isinstance(p, dict) and p.get("id") == int(device)), {})


def short_kernel_name(name: str) -> str:
    """Kernel name without return type, template arguments and parameter list, e.g.
    ``void pytorch_flash::flash_fwd_kernel<Traits<...>, true>(Params)`` ->
    ``pytorch_flash::flash_fwd_kernel``. Names without templates come back unchanged
    except for a trailing parameter list."""
    name = name.replace("(anonymous namespace)", "{anonymous}").replace("->", "\u2192")
    out, depth_angle, depth_paren = [], 0, 0
    for ch in name:
        if ch == "<":
            depth_angle += 1
        elif ch == ">":
            depth_angle = max(0, depth_angle - 1)
        elif ch == "(" and depth_angle == 0:
            depth_paren += 1
        elif ch == ")" and depth_angle == 0:
            depth_paren = max(0, depth_paren - 1)
        elif depth_angle == 0 and depth_paren == 0:
            out.append(ch)
    short = "".join(out).strip().removeprefix("void ")
    return short.replace("{anonymous}::", "").strip() or name.replace("\u2192", "->")


_GENERIC = ("elementwise_kernel", "reduce_kernel")
_WRAPPERS = {"AUnaryFunctor", "BUnaryFunctor", "gpu_kernel_impl", "gpu_kernel_impl_nocast", "gpu_kernel"}
_FUNCTOR = re.compile(r"(\w*(?:Functor\w*|_kernel_cuda|_kernel_impl|_kernel)\b)(<\w+>)?")
#: CUTLASS entry points whose first template argument is the real kernel (cutlass::Kernel2<cutlass_80_simt_sgemm_...>)
_CUTLASS_ENTRY = {"cutlass::Kernel", "cutlass::Kernel2", "cutlass::device_kernel"}


def kernel_label(name: str) -> str:
    """Readable label for plots, tables and classification: the short name
    (:func:`short_kernel_name`); for PyTorch's generic elementwise/reduce kernels also the
    functor or op they run (``MulFunctor``, ``FillFunctor<bool>``, ``masked_fill_kernel``,
    ``direct_copy_kernel_cuda``...), which the short name hides; for CUTLASS entry points
    (``cutlass::Kernel2<K>``) the kernel K they instantiate. Memcpy/memset names lose only
    their parenthesised direction (``Memcpy DtoD (Device -> Device)`` -> ``Memcpy DtoD``)."""
    short = short_kernel_name(name)
    inner = name[name.find("<") + 1 :] if "<" in name else ""
    if short in _CUTLASS_ENTRY and inner:
        return f"{short} [{re.split(r'[<,>]', inner, maxsplit=1)[0].strip()}]"
    if not short.endswith(_GENERIC):
        return short
    for match in _FUNCTOR.finditer(inner):
        word = match.group(1)
        if word and not word.endswith(_GENERIC) and word not in _WRAPPERS:
            return f"{short.split('::')[-1]} [{word}{match.group(2) or ''}]"
    return short
