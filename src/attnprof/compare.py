"""Compare result sets (e.g. before and after a PyTorch upgrade, or two GPU kinds).

The first result set is the baseline; every other one is compared with it, per (variant,
shape) present in both: kernels per forward, kernels added and removed (names normalised
by stripping template arguments and parameter lists), aten ops added and removed, time
ratios judged against noise, status changes, what ``sdpa_auto`` dispatched to, the backward
pass (kernels and time per backward, same noise rule) and torch.compile's first call where both
result sets have them, and the environment and config differences.

Noise threshold for a time ratio: the larger robust relative spread of the two runs -- the
inter-quartile range over the median, ``(q3 - q1) / median``, of the per-forward times (falling
back to ``(max - min) / median`` for result sets written before quartiles were recorded) -- and
never less than ``noise_floor`` (default 5 %). The inter-quartile range ignores the one slow
forward that a min-max spread would let hide a real change. A ratio outside ``1 ± threshold``
is called faster/slower; inside, "within noise". A trace ratio that the independent timing does
not confirm (its median ratio, ``timed_ms_median``, judged against the same threshold) is
"inconsistent".
"""

from __future__ import annotations


import pandas as pd

from .trace import short_kernel_name

#: Changes smaller than this fraction are noise (config ``compare.noise_floor``'s default).
NOISE_FLOOR = 0.05


def normalise_kernel(name: str) -> str:
    """Kernel name without template arguments and parameters (see short_kernel_name)."""
    return short_kernel_name(name)


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def env_diff(a: dict, b: dict) -> list[dict]:
    """Keys of env.json (config flattened as config.x.y) whose values differ: [{key, a, b}]."""
    fa, fb = _flatten(a), _flatten(b)
    return [{"key": k, "a": fa.get(k), "b": fb.get(k)} for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def _time_columns(summary: pd.DataFrame) -> tuple[str, str, str, str]:
    """(median, min, max, label) of the timing compared: device time on GPU runs, CPU time else."""
    if summary["device_ms_per_forward"].notna().any():
        return "device_ms_per_forward", "device_ms_min", "device_ms_max", "device time per forward (trace)"
    return "cpu_ms_per_forward", "cpu_ms_min", "cpu_ms_max", "CPU time per forward (trace)"


def _spread(row: pd.Series, med: str, lo: str, hi: str) -> float:
    """Relative spread of one timing: (q3 - q1) / median where the quartile columns exist
    (``<prefix>_q1``/``_q3`` beside ``lo``), else (max - min) / median; 0 when unknown."""
    prefix = lo.removesuffix("_min")
    q1, q3 = row.get(f"{prefix}_q1"), row.get(f"{prefix}_q3")
    if not row.get(med):
        return 0.0
    if q1 is not None and q3 is not None and not (pd.isna(q1) or pd.isna(q3)):
        return float((q3 - q1) / row[med])
    if lo not in row or pd.isna(row.get(lo)) or pd.isna(row.get(hi)):
        return 0.0
    return float((row[hi] - row[lo]) / row[med])


def _judge(ratio: float, threshold: float) -> str:
    return "slower" if ratio > 1 + threshold else "faster" if ratio < 1 - threshold else "within noise"


def _dispatch(findings: dict, shape_key: str) -> str | None:
    for shape in findings.get("shapes", []):
        if shape["shape_key"] == shape_key:
            for f in shape["findings"]:
                if f["rule"] == "dispatch":
                    return f["headline"]
    return None


def compare_pair(a: dict, b: dict, noise_floor: float = NOISE_FLOOR) -> dict:
    """Compare result set ``b`` with baseline ``a``. Each is a dict with keys name, summary,
    kernels, ops (DataFrames as written by the pipeline), env and findings (parsed JSON).
    Returns a JSON-serialisable dict: rows (one per variant and shape in both), env_diff."""
    sa, sb = a["summary"], b["summary"]
    med, lo, hi, label = _time_columns(sa)
    rows = []
    keys = sa[["variant", "shape_key"]].merge(sb[["variant", "shape_key"]]).itertuples(index=False)
    for variant, shape_key in keys:
        ra = sa[(sa["variant"] == variant) & (sa["shape_key"] == shape_key)].iloc[0]
        rb = sb[(sb["variant"] == variant) & (sb["shape_key"] == shape_key)].iloc[0]
        row = {"variant": variant, "shape_key": shape_key, "status_a": ra["status"], "status_b": rb["status"],
               "kernels_a": _num(ra.get("kernels_per_forward")), "kernels_b": _num(rb.get("kernels_per_forward"))}

        def names(frame, col, fn=lambda x: x):
            if frame is None or len(frame) == 0:
                return set()
            f = frame[(frame["variant"] == variant) & (frame["shape_key"] == shape_key)]
            return {fn(n) for n in f[col]}

        ka, kb = names(a["kernels"], "kernel", normalise_kernel), names(b["kernels"], "kernel", normalise_kernel)
        oa, ob = names(a.get("ops"), "op"), names(b.get("ops"), "op")
        row.update(kernels_added=sorted(kb - ka), kernels_removed=sorted(ka - kb), ops_added=sorted(ob - oa), ops_removed=sorted(oa - ob))
        ta, tb = _num(ra.get(med)), _num(rb.get(med))
        row.update(time_a_ms=ta, time_b_ms=tb, timing=label)
        if ta and tb:
            ratio = tb / ta
            threshold = max(noise_floor, _spread(ra, med, lo, hi), _spread(rb, med, lo, hi))
            verdict = _judge(ratio, threshold)
            ia, ib = _num(ra.get("timed_ms_median")), _num(rb.get("timed_ms_median"))
            timed_ratio = ib / ia if ia and ib else None
            # the independent timing confirms a change when its median ratio lies beyond the same threshold
            # (its own min-max spread over single calls is not robust; its quartiles are not recorded)
            if timed_ratio is not None and verdict != "within noise":
                if _judge(timed_ratio, threshold) != verdict:
                    verdict = "inconsistent"  # the independent timing does not confirm the trace
            row.update(ratio=ratio, noise_threshold=threshold, timed_ratio=timed_ratio, verdict=verdict)
        else:
            row.update(ratio=None, noise_threshold=None, timed_ratio=None, verdict="not comparable")
        row.update(_backward_change(ra, rb, med, noise_floor), **_compile_change(ra, rb))
        rows.append(row)
    shapes = sorted(set(sa["shape_key"]) & set(sb["shape_key"]))
    dispatch = [{"shape_key": s, "a": _dispatch(a["findings"], s), "b": _dispatch(b["findings"], s)} for s in shapes]
    notes = []
    pa, pb = ((x["env"].get("config") or {}).get("passes") or ["forward"] for x in (a, b))
    if ("backward" in pa) != ("backward" in pb):
        notes.append(f"{a['name'] if 'backward' in pa else b['name']} profiled the backward too: its forwards ran with "
                     "grad (saving what the backward needs; flash and efficient also write their log-sum-exp), the other's "
                     "under no_grad, so forward ratios compare slightly different work")
    return {"a": a["name"], "b": b["name"], "rows": rows, "dispatch": dispatch, "env_diff": env_diff(a["env"], b["env"]),
            "notes": notes,
            "only_in_a": sorted(set(sa["variant"] + "/" + sa["shape_key"]) - set(sb["variant"] + "/" + sb["shape_key"])),
            "only_in_b": sorted(set(sb["variant"] + "/" + sb["shape_key"]) - set(sa["variant"] + "/" + sa["shape_key"]))}


def _backward_change(ra: pd.Series, rb: pd.Series, forward_col: str, noise_floor: float) -> dict:
    """The backward pass of one (variant, shape) in both result sets (config passes): kernels per
    backward (``bwd_kernels_a``/``_b``), ms per backward (device on a GPU run, host on a CPU run, as
    the forward), their ratio b/a and its verdict against the same noise rule as the forward (the
    larger of the noise floor and each run's IQR / median of per-backward times). All None when either
    result set did not profile this backward."""
    col = forward_col.replace("per_forward", "per_backward")
    lo, hi = col.replace("per_backward", "backward_min"), col.replace("per_backward", "backward_max")
    ta, tb = _num(ra.get(col)), _num(rb.get(col))
    sa, sb = _text(ra.get("backward_status")), _text(rb.get("backward_status"))
    out = {"bwd_status_a": sa, "bwd_status_b": sb,
           "bwd_kernels_a": _num(ra.get("kernels_per_backward")), "bwd_kernels_b": _num(rb.get("kernels_per_backward")),
           "bwd_a_ms": ta, "bwd_b_ms": tb, "bwd_ratio": None, "bwd_noise_threshold": None, "bwd_verdict": None}
    if ta and tb:
        threshold = max(noise_floor, _spread(ra, col, lo, hi), _spread(rb, col, lo, hi))
        out.update(bwd_ratio=tb / ta, bwd_noise_threshold=threshold, bwd_verdict=_judge(tb / ta, threshold))
    elif sa or sb:  # profiled in one or both, but no time in one of them: say so rather than drop the row
        out["bwd_verdict"] = "not comparable"
    return out


def _text(v) -> str | None:
    """A table cell as text, None for an empty one (None, NaN: pandas' own test)."""
    return None if pd.isna(v) else str(v)


def _compile_change(ra: pd.Series, rb: pd.Series) -> dict:
    """A torch.compile variant's first call (compile) in both result sets, in seconds, with
    inductor's cache verdicts; one measurement each, so no noise verdict: a cache hit against a
    miss explains most of a difference. None when either has no compile record."""
    a, b = _num(ra.get("compile_first_call_s")), _num(rb.get("compile_first_call_s"))
    return {"compile_a_s": a, "compile_b_s": b, "compile_ratio": b / a if a and b else None,
            "compile_cache_a": _text(ra.get("compile_cache")) if a else None,
            "compile_cache_b": _text(rb.get("compile_cache")) if b else None}


def _num(v) -> float | None:
    """A table cell as a float, None for an empty one (None, NaN: pandas' own test)."""
    return None if pd.isna(v) else float(v)


def compare_runs(runs: list[dict], noise_floor: float = NOISE_FLOOR) -> dict:
    """Compare every result set after the first with the first (the baseline)."""
    if len(runs) < 2:
        raise ValueError("compare needs at least two result sets")
    return {"baseline": runs[0]["name"], "noise_floor": noise_floor,
            "pairs": [compare_pair(runs[0], other, noise_floor) for other in runs[1:]]}
