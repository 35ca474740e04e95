"""The records a result set is built from -- a capture's status.json, the run's env.json and calibration.json --
read with one clear error per way they can be wrong, and each capture record checked against what else says
which capture it is.

A capture record decides which variant and shape its trace belongs to: one record in the wrong folder duplicates
a variant and deletes another, one naming another shape publishes numbers under a shape never profiled, one from
another GPU or torch build publishes them under the run's GPU. :func:`check_capture_record` compares the record

* with its folder (attnprof.model.plan.Layout): ``variant``, ``shape_key`` (and the shape fields the key
  is made of) and ``repeat``;
* with its trace: the GPU the trace was recorded on (Kineto's ``deviceProperties`` names), the CUDA runtime
  (``cuda_runtime_version``, against the CUDA build in ``torch_version``, e.g. ``+cu130``), and whether the trace
  is a GPU trace at all (GPU events, ``deviceProperties``) -- what a Chrome trace from torch.profiler says about
  the machine; its ``baseTimeNanoseconds``, ``displayTimeUnit`` or ``trace_id`` identify nothing;
* with env.json: ``device`` (cuda/cpu), the GPU (``device_name`` against ``gpu_name``) and the torch build
  (``torch_version`` against ``torch``).

A disagreement raises :class:`RecordError` naming the record, the other file and the field. Every function here
is pure: parsed dicts and paths in, None or an exception out (:func:`load_record` and the readers of each kind,
:func:`load_status`, :func:`load_env`, :func:`load_repeats`, read files: status.json, env.json and repeats.csv in
the current format, attnprof.model.formats, so that what follows reads one format).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from attnprof.model.formats import current_record, current_table
from attnprof.model.names import repeat_dir
from attnprof.model.plan import Layout


class RecordError(ValueError):
    """A record (status.json, env.json, calibration.json) that cannot be used: unreadable, incomplete, or
    disagreeing with its folder, its trace or env.json. The message names the file(s), the key and the cause."""


#: Keys every capture record has, the record of a capture process that died included (attnprof.measure.capture).
STATUS_KEYS = ("variant", "shape_key", "device", "status")
#: Keys of env.json that the capture records are checked against (rule summarize).
ENV_CHECK_KEYS = ("device", "torch", "gpu_name")
#: Keys of env.json the report states (report/report.html.j2); :func:`env_keys` adds the GPU's or the CPU's.
ENV_KEYS = ("device", "torch", "gpu_name", "python", "snakemake", "config.profiler.range_name",
            "config.profiler.warmup_calls", "config.profiler.schedule.wait", "config.profiler.schedule.warmup",
            "config.profiler.schedule.active", "config.timing.repeats", "config.timing.input_sets")
#: Keys every calibration.json has; a measured one (no ``skipped``) also has :data:`CALIBRATION_MEASURED_KEYS`.
CALIBRATION_KEYS = ("device",)
CALIBRATION_MEASURED_KEYS = ("gemm_tflops_bf16", "gemm_tflops_fp16", "copy_tb_per_s", "copy_bytes", "gemm_n", "method")

#: Trace event categories attnprof reads (attnprof.analysis.trace: CPU_CATEGORIES and GPU_CATEGORIES).
READ_CATEGORIES = ("user_annotation", "cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset")
GPU_EVENT_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: Categories Kineto writes that attnprof does not need (flows, GPU-side annotations, Python frames...).
OTHER_KINETO_CATEGORIES = ("ac2g", "fwdbwd", "Trace", "gpu_user_annotation", "python_function", "cpu_instant_event",
                           "overhead", "cuda_sync", "cuda_profiler_range", "external_correlation", "gpu_memory",
                           "cpu_memory", "memory", "mtia_runtime", "mtia_ccp_events", "xpu_runtime", "xpu_driver",
                           "privateuse1_runtime", "privateuse1_driver", "collective_comm", "hpu_op", "glow_runtime")

_FIX_CAPTURE = "put the record back beside its own trace, or delete this capture's folder to capture it again"


def _missing(record: Mapping, dotted: str) -> str | None:
    """The first part of ``dotted`` (``config.profiler.range_name``) that ``record`` lacks (``config.profiler``), or
    the part that is not an object (``config (not an object)``); None when ``record`` has the value."""
    value, seen = record, []
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return f"{'.'.join(seen)} (not an object)"
        if part not in value:
            return ".".join([*seen, part])
        value, seen = value[part], [*seen, part]
    return None


def missing_keys(record: Mapping, required_keys: Iterable[str]) -> list[str]:
    """The ``required_keys`` (dotted for nested ones: ``config.timing.repeats``) that ``record`` lacks, each as the
    first part that is missing (``config.timing`` when there is no timing at all), in order, without repeats."""
    return list(dict.fromkeys(m for key in required_keys if (m := _missing(record, key)) is not None))


def _text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordError(f"{path}: no such file") from None
    except OSError as exc:
        raise RecordError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except EOFError:
            raise RecordError(f"{path}: truncated: the gzip stream ends early (an interrupted write?)") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise RecordError(f"{path}: not a gzip file ({exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not JSON (not UTF-8 text: {exc.reason} at byte {exc.start})") from None


def load_record(path: str | Path, required_keys: Iterable[str] = (), kind: str | None = None) -> dict:
    """The JSON object in ``path`` (gzipped when it ends in ``.gz``), which must hold every key of
    ``required_keys`` (dotted for nested keys); with ``kind`` (status, env: a file with a format version), in the
    current format (attnprof.model.formats.current_record, before the keys are checked). Raises :class:`RecordError`
    whose message starts with the path and says the cause: no such file, unreadable, empty, truncated (the JSON ends
    early: an interrupted write), not JSON, not a JSON object, or the key(s) missing -- never a bare JSONDecodeError
    or KeyError; and attnprof.model.formats.FormatError (a ValueError) for a format version it cannot read."""
    path = Path(path)
    record = _parsed(path)
    if kind is not None:
        record = current_record(kind, record, path)
    missing = missing_keys(record, required_keys)
    if missing:
        keys = ", ".join(f"'{k}'" for k in missing)
        raise RecordError(f"{path}: no key {keys}" if len(missing) == 1 else f"{path}: no keys {keys}")
    return record


def _parsed(path: Path) -> dict:
    """The JSON object in ``path`` (:func:`load_record`), or RecordError naming the cause."""
    text = _text(path)
    if not text.strip():
        raise RecordError(f"{path}: empty file (an interrupted write?)")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        # the text ends inside a value: at the error, or in a string that runs to the end
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise RecordError(f"{path}: truncated: the JSON ends after {len(text)} characters, inside the record "
                              "(an interrupted write?)") from None
        raise RecordError(f"{path}: not JSON ({exc.msg}: line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise RecordError(f"{path}: not a record (JSON nested too deeply)") from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: not a record (a JSON {type(record).__name__}, not an object)")
    return record


def env_keys(env: Mapping) -> tuple[str, ...]:
    """The keys of env.json the report needs: :data:`ENV_KEYS`, and the GPU's (driver, cuda_build, cudnn) on a GPU
    run, the CPU's (cpu) otherwise."""
    return ENV_KEYS + (("driver", "cuda_build", "cudnn") if env.get("gpu_name") else ("cpu",))


def load_status(path: str | Path, required_keys: Iterable[str] = STATUS_KEYS) -> dict:
    """A capture's status.json through :func:`load_record`, in the current format, with ``required_keys``."""
    return load_record(path, required_keys, "status")


def load_env(path: str | Path, required_keys: Iterable[str] | None = None) -> dict:
    """env.json through :func:`load_record`, in the current format, with ``required_keys`` (default: what the report
    states, :func:`env_keys`)."""
    if required_keys is not None:
        return load_record(path, required_keys, "env")
    env = load_record(path, ENV_KEYS, "env")
    return load_record(path, env_keys(env), "env") if missing_keys(env, env_keys(env)) else env


def load_repeats(path: str | Path):
    """repeats.csv (a pandas DataFrame) in the current format (attnprof.model.formats.current_table)."""
    import pandas as pd

    return current_table("repeats", pd.read_csv(path), path)


def load_calibration(path: str | Path) -> dict:
    """calibration.json through :func:`load_record`: ``device`` always; the measured numbers unless ``skipped``
    says why there are none (a CPU run)."""
    calibration = load_record(path, CALIBRATION_KEYS)
    if "skipped" not in calibration:
        load_record(path, CALIBRATION_MEASURED_KEYS)
    return calibration


# --- agreement ------------------------------------------------------------------------------------------

def shape_key_of(record: Mapping) -> str | None:
    """The shape key that a record's own shape fields (batch, heads, seq_len, head_dim, dtype, causal, kv_heads,
    q_len, causal_alignment) make; None when they are missing or make no shape."""
    from attnprof.model.variants import Shape

    fields = {f.name: record[f.name] for f in dataclasses.fields(Shape) if f.name in record}
    try:
        return Shape(**fields).key
    except (TypeError, ValueError):  # TypeError: a field without a default (batch ... dtype) missing
        return None


def cuda_of_torch(torch_version) -> tuple[int, int] | None:
    """(major, minor) of the CUDA a torch build names in its local version: '2.11.0+cu130' -> (13, 0),
    '2.7.1+cu128' -> (12, 8); (0, 0) for '+cpu' (no CUDA); None when the version names neither."""
    if not isinstance(torch_version, str):
        return None
    if torch_version.endswith("+cpu"):
        return (0, 0)
    m = re.search(r"\+cu(\d+)(\d)$", torch_version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def cuda_of_runtime(version) -> tuple[int, int] | None:
    """(major, minor) of a CUDA runtime version as CUDA writes it (Kineto's ``cuda_runtime_version``):
    13000 -> (13, 0), 12080 -> (12, 8); None when it is not a positive integer."""
    if isinstance(version, bool) or not isinstance(version, int) or version <= 0:
        return None
    return version // 1000, version % 1000 // 10


def _shape_text(record: Mapping) -> str:
    keys = ("batch", "heads", "kv_heads", "q_len", "seq_len", "head_dim", "dtype", "causal", "causal_alignment")
    return ", ".join(f"{k} {record[k]}" for k in keys if record.get(k) is not None)


def check_capture_record(status: Mapping, status_path: str | Path, trace_device_properties: Sequence[Mapping] | None,
                         env: Mapping | None = None, *, env_path: str | Path | None = None,
                         trace_path: str | Path | None = None, trace_meta: Mapping | None = None,
                         trace_categories: Mapping[str, int] | None = None) -> None:
    """Raise :class:`RecordError` unless the capture record ``status`` (read from ``status_path``) agrees with

    * its folder (attnprof.model.plan.Layout.capture_of): ``variant``, ``shape_key``, ``repeat`` (a record in the current format,
      :func:`load_status`, has one); and its shape fields make its ``shape_key`` (:func:`shape_key_of`);
    * its trace (``trace_path``), when given: ``trace_device_properties`` (Kineto's ``deviceProperties``, a list;
      None: not checked) must name the record's ``device_name`` on a GPU capture; ``trace_meta`` (the trace's
      top-level keys other than ``traceEvents``) its ``cuda_runtime_version`` must have the CUDA major version that
      ``torch_version`` was built for; ``trace_categories`` (event category -> count of complete events) must hold no
      GPU events on a CPU capture, and a GPU capture that ran (ok, incomplete_trace) must have a GPU trace;
    * ``env`` (env.json, read from ``env_path``), when given: ``device``, ``gpu_name`` (against ``device_name``, on a
      GPU capture) and ``torch`` (against ``torch_version``).

    A key missing on either side is not compared (records of captures that died lack ``torch_version``). The
    message names ``status_path``, the other file and the field."""
    where = str(status_path)
    _check_folder(status, where, Layout.capture_of(status_path))
    made = shape_key_of(status)
    if made is not None and made != status.get("shape_key"):
        raise RecordError(f"{where} says shape_key {status.get('shape_key')!r} but its own shape fields "
                          f"({_shape_text(status)}) make {made!r}; the record was edited or is corrupt: capture it again")
    trace = str(trace_path) if trace_path is not None else "its trace"
    if trace_device_properties is not None:
        _check_trace_gpu(status, where, trace, trace_device_properties)
    if trace_meta is not None:
        _check_trace_cuda(status, where, trace, trace_meta)
    if trace_categories is not None:
        _check_trace_kind(status, where, trace, trace_categories, bool(trace_device_properties),
                          bool((trace_meta or {}).get("cuda_runtime_version")))
    if env is not None:
        _check_env(status, where, env, str(env_path) if env_path is not None else "env.json")


def _check_folder(status: Mapping, where: str, folder: dict | None) -> None:
    """The record's variant, shape_key and repeat against its folder's (Layout.capture_of; None: not in one)."""
    if not folder:
        return
    if status.get("variant") != folder["variant"]:
        raise RecordError(f"{where} says variant {status.get('variant')!r} but lies in the folder of "
                          f"{folder['variant']!r}; {_FIX_CAPTURE}")
    if status.get("shape_key") != folder["shape_key"]:
        raise RecordError(f"{where} says shape_key {status.get('shape_key')!r} but lies in the folder of shape "
                          f"{folder['shape_key']!r}; {_FIX_CAPTURE}")
    if str(status.get("repeat")) != str(folder["repeat"]):
        raise RecordError(f"{where} says repeat {status.get('repeat')!r} but lies in the folder of repeat "
                          f"{folder['repeat']} ({repeat_dir(folder['repeat'])}); {_FIX_CAPTURE}")


def _check_trace_gpu(status: Mapping, where: str, trace: str, props: Sequence[Mapping]) -> None:
    """A GPU record's device_name must be one the trace's deviceProperties name."""
    name = status.get("device_name")
    names = list(dict.fromkeys(str(p.get("name")) for p in props if p.get("name")))
    if status.get("device") == "cuda" and name and names and name not in names:
        raise RecordError(f"{where} says device_name {name!r} but its trace {trace} was recorded on "
                          f"{' and '.join(map(repr, names))} (deviceProperties name); {_FIX_CAPTURE}")


def _check_trace_cuda(status: Mapping, where: str, trace: str, meta: Mapping) -> None:
    """The CUDA major version torch_version was built for against the trace's cuda_runtime_version."""
    torch = status.get("torch_version")
    built, ran = cuda_of_torch(torch), cuda_of_runtime(meta.get("cuda_runtime_version"))
    if built is not None and ran is not None and built[0] != ran[0]:
        cuda = "no CUDA" if built == (0, 0) else f"CUDA {built[0]}.{built[1]}"
        raise RecordError(f"{where} says torch_version {torch!r} ({cuda}) but its trace {trace} was recorded with "
                          f"CUDA runtime {ran[0]}.{ran[1]} (cuda_runtime_version "
                          f"{meta.get('cuda_runtime_version')}): another torch build; {_FIX_CAPTURE}")


def _check_trace_kind(status: Mapping, where: str, trace: str, categories: Mapping[str, int], has_props: bool,
                      has_cuda_runtime: bool) -> None:
    """A CPU record's trace holds no GPU events; a GPU capture that ran has a GPU trace."""
    device = status.get("device")
    gpu_events = sum(n for c, n in categories.items() if c in GPU_EVENT_CATEGORIES)
    if device == "cpu" and gpu_events:
        raise RecordError(f"{where} says device 'cpu' but its trace {trace} holds {gpu_events} GPU events "
                          f"({', '.join(GPU_EVENT_CATEGORIES)}): a GPU capture's trace; {_FIX_CAPTURE}")
    cpu_trace = sum(categories.values()) and not gpu_events and not has_props and not has_cuda_runtime
    if device == "cuda" and status.get("status") in ("ok", "incomplete_trace") and cpu_trace:
        raise RecordError(f"{where} says device 'cuda' but its trace {trace} has no GPU events, no "
                          f"deviceProperties and no cuda_runtime_version: a CPU capture's trace; {_FIX_CAPTURE}")


def _check_env(status: Mapping, where: str, env: Mapping, other: str) -> None:
    """The record's device, GPU model and torch build against env.json's (``other``: its path)."""
    device, name, torch = status.get("device"), status.get("device_name"), status.get("torch_version")
    fix = "a capture from another machine or environment: capture it again here, or move it to its own result set"
    if env.get("device") and device and device != env["device"]:
        raise RecordError(f"{where} says device {device!r} but {other} says device {env['device']!r}; {fix}")
    if device == "cuda" and name:
        _check_env_gpu(name, where, env, other, fix)
    if torch and env.get("torch") and torch != env["torch"]:
        raise RecordError(f"{where} says torch_version {torch!r} but {other} says torch {env['torch']!r}; {fix}")


def _check_env_gpu(name: str, where: str, env: Mapping, other: str, fix: str) -> None:
    """A GPU record's device_name against env.json's GPU models: one of those it lists (``gpus``: a run on several
    GPUs lists them all), else its ``gpu_name``."""
    names = list(dict.fromkeys(str(g.get("name")) for g in env.get("gpus") or [] if isinstance(g, dict) and g.get("name")))
    if names and name not in names:
        raise RecordError(f"{where} says device_name {name!r} but {other} lists the run's GPUs as "
                          f"{' and '.join(map(repr, names))} (gpus); {fix}")
    if not names and env.get("gpu_name") and name != env["gpu_name"]:
        raise RecordError(f"{where} says device_name {name!r} but {other} says gpu_name {env['gpu_name']!r}; {fix}")


def trace_schema_problem(categories: Mapping[str, int], expect_gpu: bool) -> str | None:
    """Why a trace whose complete events fall in ``categories`` (category -> count) is in a schema attnprof does
    not know, or None: it has events, but none in a category attnprof reads (:data:`READ_CATEGORIES`); or, where
    GPU events are expected (``expect_gpu``), none in a GPU category while some are in categories that neither
    attnprof nor Kineto's known ones name -- rather than a capture without GPU activity. An empty trace is no
    schema problem (a capture that did not run leaves one)."""
    cats = {str(c): n for c, n in categories.items() if n}
    if not cats:
        return None
    if not set(cats) & set(READ_CATEGORIES):
        seen = ", ".join(f"{c} ({n})" for c, n in sorted(cats.items(), key=lambda kv: -kv[1])[:8])
        return (f"a trace in a schema attnprof does not know: none of its {sum(cats.values())} complete events is in a "
                f"category attnprof reads ({', '.join(READ_CATEGORIES)}); its categories: {seen}")
    return _unknown_gpu_schema(cats) if expect_gpu else None


def _unknown_gpu_schema(cats: Mapping[str, int]) -> str | None:
    """Why a trace expected to hold GPU events (``cats``: its non-empty categories) is in an unknown schema: none in
    a GPU category while some are in categories that neither attnprof nor Kineto's known ones name; else None."""
    unknown = [c for c in cats if c not in READ_CATEGORIES and c not in OTHER_KINETO_CATEGORIES]
    if not unknown or set(cats) & set(GPU_EVENT_CATEGORIES):
        return None
    return (f"a trace in a schema attnprof does not know: no events in the GPU categories "
            f"({', '.join(GPU_EVENT_CATEGORIES)}) but {sum(cats[c] for c in unknown)} in categories it does not "
            f"know ({', '.join(unknown[:8])}); not a capture without GPU activity")


def devices_used(device_props: Sequence[Mapping], gpu_device_ids: Iterable) -> list[dict]:
    """The ``deviceProperties`` entries (``device_props``) of the GPUs the trace's GPU events ran on
    (``gpu_device_ids``: their ``args.device``): the GPU a record must name. All entries when no GPU event
    says its device (a CPU trace, or an older trace without it)."""
    used = {d for d in gpu_device_ids if d is not None and d == d}
    return [dict(p) for p in device_props if not used or p.get("id") in used]
