"""The GPUs of a node as data: one :class:`Gpu` per GPU nvidia-smi lists, which of them ``CUDA_VISIBLE_DEVICES`` and the
config key ``gpus`` leave to a run, and whether a run's GPUs are alike. Pure functions (no process, no file): the
discovery and the claims that use them are :mod:`attnprof.measure.gpus`."""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass

from attnprof.model.fmt import format_number

#: The nvidia-smi fields each :class:`Gpu` holds, in this order (``nvidia-smi --query-gpu=... --format=csv,noheader,nounits``).
QUERY = "index,uuid,name,power.limit,clocks.max.sm,memory.total"


@dataclass(frozen=True)
class Gpu:
    """One GPU of the node as nvidia-smi lists it: ``index`` (nvidia-smi's, PCI bus order), ``uuid`` ('GPU-...'),
    ``name`` ('NVIDIA H200'), ``power_limit_w`` (W), ``max_sm_clock_mhz`` (MHz), ``memory_mib`` (MiB); the last three
    None where nvidia-smi gives none ('[N/A]')."""

    index: int
    uuid: str
    name: str
    power_limit_w: float | None = None
    max_sm_clock_mhz: float | None = None
    memory_mib: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """nvidia-smi's CSV answer to :data:`QUERY` (``--format=csv,noheader,nounits``) -> the GPUs, in its order.
    Raises ValueError naming the line when a line does not hold the six fields or its index is no integer."""
    gpus = []
    for n, row in enumerate(csv.reader(line for line in text.splitlines() if line.strip()), 1):
        fields = [f.strip() for f in row]
        if len(fields) != 6 or not fields[0].isdigit():
            raise ValueError(f"nvidia-smi line {n} is not '{QUERY}': {','.join(row)!r}")
        gpus.append(Gpu(int(fields[0]), fields[1], fields[2], *(_number(f) for f in fields[3:])))
    return gpus


def bare_uuid(uuid) -> str:
    """A GPU UUID as UUIDs are compared here: lower case, without nvidia-smi's 'GPU-' (torch reports it without;
    CUDA_VISIBLE_DEVICES and the config key ``gpus`` take either)."""
    return str(uuid).lower().removeprefix("gpu-")


def names_gpu(prefix, gpu: Gpu) -> bool:
    """Whether ``prefix`` (a UUID or its beginning, with or without 'GPU-', any case) names ``gpu``; an empty one
    names none."""
    key = bare_uuid(prefix)
    return bool(key) and bare_uuid(gpu.uuid).startswith(key)


def _matches(entry: str, gpu: Gpu) -> bool:
    """Whether one entry of CUDA_VISIBLE_DEVICES names ``gpu``: its index, or its UUID or a unique prefix of it, with
    or without 'GPU-' (as CUDA reads it)."""
    return int(entry) == gpu.index if entry.isdigit() else names_gpu(entry, gpu)


def visible_gpus(gpus: list[Gpu], cuda_visible_devices: str | None) -> list[Gpu]:
    """The GPUs of ``gpus`` that ``CUDA_VISIBLE_DEVICES`` makes visible, in its order; all of them when it is unset.

    As CUDA reads the variable (CUDA C Programming Guide, "CUDA Environment Variables"): a comma-separated list of
    indices or UUIDs (a unique prefix suffices, 'GPU-' optional), read up to the first entry that names no GPU;
    empty or starting with such an entry: no GPU. Indices are nvidia-smi's, which are CUDA's under
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; with CUDA's default order (fastest first) an index may name another GPU on
    a node of mixed GPUs: name them by UUID there. A MIG instance ('MIG-...') is kept as a device of its own,
    named by its UUID (``index`` -1, ``name`` '': its model is not in nvidia-smi's GPU list, so the run takes it from
    what CUDA reports, and the report says its GPUs' kinds are not known)."""
    if cuda_visible_devices is None:
        return list(gpus)
    out: list[Gpu] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if entry.upper().startswith("MIG-"):
            if not any(g.uuid == entry for g in out):  # its model is not in nvidia-smi's GPU list: not known here
                out.append(Gpu(-1, entry, ""))
            continue
        found = [g for g in gpus if entry and _matches(entry, g)]
        if len(found) != 1 or found[0] in out:
            break  # CUDA stops at the first entry it cannot read (an ambiguous prefix, a duplicate, a stranger)
        out.append(found[0])
    return out


def _named_gpus(visible: list[Gpu], entry) -> list[Gpu]:
    """The GPUs of ``visible`` that one entry of config ``gpus`` names: an index into ``visible`` (none when out of
    range), else a UUID or a prefix of one (:func:`names_gpu`)."""
    if isinstance(entry, int) and not isinstance(entry, bool):
        return [visible[entry]] if 0 <= entry < len(visible) else []
    return [g for g in visible if names_gpu(entry, g)]


def select_gpus(visible: list[Gpu], choice) -> list[Gpu]:
    """The GPUs of ``visible`` that the config key ``gpus`` chooses: 'all' (every visible GPU), or a list of
    indices into ``visible`` (0 is the first visible GPU, as ``cuda:0``) or of UUIDs (or unique prefixes).
    Raises ValueError naming the entry and the visible GPUs when an entry names none, names several, or repeats."""
    if choice == "all":
        return list(visible)
    if isinstance(choice, str):  # one name where a list is wanted
        choice = [choice]
    listed = ", ".join(f"{i}: {g.uuid} ({g.name})" for i, g in enumerate(visible)) or "none"
    out: list[Gpu] = []
    for entry in choice:
        found = _named_gpus(visible, entry)
        if len(found) != 1:
            what = "names no visible GPU" if not found else f"names {len(found)} GPUs"
            raise ValueError(f"gpus: {entry!r} {what}; the visible GPUs are {listed}\n  fix: gpus: all, or a list "
                             "of those indices or UUIDs (a unique prefix suffices)")
        if found[0] in out:
            raise ValueError(f"gpus: {entry!r} names {found[0].uuid} a second time\n  fix: list each GPU once, by "
                             "index or by UUID")
        out.append(found[0])
    return out


def known_number(x) -> float | None:
    """A GPU field as a number, or None where it is not known: NaN (an empty csv cell), text, a bool, None."""
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else None


def number_text(x) -> str:
    """A GPU field in the report's one number format (:func:`attnprof.model.fmt.format_number`), '?' where it is
    not known (:func:`known_number`)."""
    return "?" if known_number(x) is None else format_number(x)


def differing_kinds(gpus: list[dict]) -> list[str]:
    """The GPUs of a run (:meth:`Gpu.as_dict` records) grouped by kind -- what must agree for two GPUs' times to be
    compared as alike: the model, its power limit and its highest SM clock (a GPU capped lower runs the same kernels
    slower) -- when there is more than one kind: one line per kind ('NVIDIA H200, 700 W, 1980 MHz: GPU-1, GPU-2');
    [] when they are alike (or fewer than two)."""
    kinds: dict[tuple, list[str]] = {}
    for g in gpus:
        key = (g.get("name") or None, known_number(g.get("power_limit_w")), known_number(g.get("max_sm_clock_mhz")))
        kinds.setdefault(key, []).append(g.get("uuid"))
    if len(kinds) < 2:
        return []
    return [f"{name or 'unknown model'}, {number_text(power)} W, {number_text(clock)} MHz: {', '.join(uuids)}"
            for (name, power, clock), uuids in kinds.items()]


def mixed_models(gpus: list[Gpu]) -> str | None:
    """Why ``gpus`` cannot make one result set: they are of more than one model (a result set, its run id and its
    rankings are one GPU model's), as a message naming each model's GPUs and a fix; None when they are of one model
    (or their models are not known: MIG instances)."""
    models = {name: [g.uuid for g in gpus if g.name == name] for name in dict.fromkeys(g.name for g in gpus if g.name)}
    if len(models) < 2:
        return None
    listed = "; ".join(f"{name}: {', '.join(uuids)}" for name, uuids in models.items())
    return (f"gpus: the chosen GPUs are of {len(models)} models ({listed}); a result set holds one model's "
            "measurements\n  fix: choose the GPUs of one model, e.g. --config 'gpus=[0]' or CUDA_VISIBLE_DEVICES, and "
            "run the other model into a result set of its own")
