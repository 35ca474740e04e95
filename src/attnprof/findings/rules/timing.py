"""Rules on time: CPU against device time per forward (launch- or device-bound), ratios and
rankings between variants that hold outside the spread of their forwards, where the math
backend's time goes, and the fidelity of the trace against independent timings.

Times in ms per forward (summary.csv): the trace's device time on a GPU (sum of the forward's
kernel, memcpy and memset durations), the forward range's host time on a CPU run; the
independent timings are CUDA events around single calls (perf_counter on a CPU) and CUDA-graph
replays. Spreads are the rerun intervals with repeats (a host time: its range over the captures),
else min-max over the profiled forwards, named by attnprof.findings.ranking.spread_words.
"""

from __future__ import annotations

import re

from attnprof.findings.data import FUSED, NAIVE_INPLACE, SDPA_MATH, RunData
from attnprof.findings.kernel_names import kernel_group
from attnprof.findings.ranking import PASSES, rank
from attnprof.findings.refs import clean, fmt_ref, fmt_ref_range, derived, finding, ref_kernel, ref_launch, ref_summary

#: Two timings of one comparison disagree when their ratios differ by more than this factor.
TIMING_DISAGREEMENT = 1.25


def bound(cpu_min: float | None, cpu_max: float | None, device_min: float | None, device_max: float | None) -> str | None:
    """Which side limits a variant's forwards, from the min-max over its profiled forwards of the
    forward range's host time and of its device time (ms): "launch" when the host's fastest forward
    took longer than the device's slowest (cpu_min > device_max: the host issues the work slower
    than the GPU runs it, in every forward), "device" when the host's slowest forward took less than
    the device's fastest (cpu_max < device_min), "neither" when the two ranges overlap or touch
    (no verdict outside the spread); None when a value is missing."""
    if None in (cpu_min, cpu_max, device_min, device_max):
        return None
    if cpu_min > device_max:
        return "launch"
    if cpu_max < device_min:
        return "device"
    return "neither"


def rule_cpu_cost(d: RunData) -> list[dict]:
    """CPU time vs device time per forward, launch APIs per forward, and which of the two bounds
    the forward (:func:`bound`: only outside the spread of the profiled forwards)."""
    return [_cpu_cost_of(d, v) for v in d.summary["variant"] if d.on_gpu and d.ok(v)]


#: The verdict of :func:`bound` in words ({every}: in every repeat's interval / in every profiled forward; {ranges}).
_BOUND_WORDS = {"launch": "launch-bound at this shape: the host takes longer to issue the work than the GPU to run it, {every} "
                          "({ranges})",
                "device": "device-bound at this shape, {every} ({ranges})",
                "neither": "neither launch- nor device-bound outside the spread: the ranges overlap ({ranges})",
                None: "the per-forward ranges are not recorded: no verdict on what bounds it"}


#: The runtime APIs that launch work on the GPU (kernels, copies, memsets).
_LAUNCH_API = re.compile("Launch|Memcpy|Memset")


def _bound_verdict(d: RunData, nums: dict, side: str | None) -> str:
    """:func:`bound`'s verdict in words, with the ranges it was judged on, each named for what it is (the host time's
    range over the captures, the device time's rerun interval; with one repeat, both the range of the forwards)."""
    host, device = d.spread_words("cpu_ms"), d.spread_words("device_ms")
    ranges = (f"per forward: the host's {host['one']} {fmt_ref_range(nums['cpu_ms_min'], nums['cpu_ms_max'])}, "
              f"the device's {device['one']} {fmt_ref_range(nums['device_ms_min'], nums['device_ms_max'])}")
    every = "in every repeat's interval" if d.between_run("cpu_ms") else "in every profiled forward"
    return _BOUND_WORDS[side].format(every=every, ranges=ranges)


def _cpu_cost_of(d: RunData, variant: str) -> dict:
    cpu, dev = ref_summary(d, variant, "cpu_ms_per_forward", "ms"), ref_summary(d, variant, "device_ms_per_forward", "ms")
    nums = {"cpu_ms": cpu, "device_ms": dev, "cpu_over_device": derived("ratio", [cpu, dev])}
    spread = (*d.spread_columns("cpu_ms"), *d.spread_columns("device_ms"))
    for key, name in zip(("cpu_ms_min", "cpu_ms_max", "device_ms_min", "device_ms_max"), spread):
        nums[key] = ref_summary(d, variant, name, "ms")
    launch_apis = [a for a in d.launches_of(variant)["api"] if _LAUNCH_API.search(a)]
    nums.update({a: ref_launch(d, variant, a) for a in launch_apis})
    side = bound(*(nums[n]["value"] for n in ("cpu_ms_min", "cpu_ms_max", "device_ms_min", "device_ms_max")))
    listing = ", ".join(f"{fmt_ref(nums[a])} {a}" for a in launch_apis)
    text = (f"{variant}: {fmt_ref(cpu)} CPU vs {fmt_ref(dev)} device per forward (ratio {fmt_ref(nums['cpu_over_device'], 2)}, "
            f"medians); {listing} per forward; {_bound_verdict(d, nums, side)}")
    headline = (f"{side}-bound: CPU {fmt_ref(cpu)} vs device {fmt_ref(dev)}" if side in ("launch", "device")
                else f"CPU {fmt_ref(cpu)} vs device {fmt_ref(dev)}: within the spread")
    return finding("cpu_cost", d, [variant], text, nums, [{"kind": "api", "name": a} for a in launch_apis], headline=headline)


def rule_speed(d: RunData) -> list[dict]:
    """Ratios and rankings between variants, stated as findings only where they hold outside the spread (the rerun
    interval with repeats, else the min-max over the profiled forwards): the math / naive_inplace ratio
    (:func:`_math_ratio`), where the math backend's time goes (:func:`_breakdown`) and the shape's rankings
    (:func:`ranking_finding` of each pass, the one ranking rule of attnprof.findings.ranking)."""
    out = _math_ratio(d)
    if d.on_gpu and d.ok(SDPA_MATH):
        out.extend(_breakdown(d, SDPA_MATH))
    return out + [f for f in (ranking_finding(d, p) for p in PASSES) if f is not None]


def _math_ratio(d: RunData) -> list[dict]:
    """sdpa_math's time over naive_inplace's, beside the same ratio from the independent timing; flagged (kind
    'warning') when the two differ by more than :data:`TIMING_DISAGREEMENT` or the spreads overlap. Nothing when
    either is not ranked (a wrong result, a capture that failed)."""
    if not {SDPA_MATH, NAIVE_INPLACE} <= set(rank(d.summary, d.shape_key)["order"]):
        return []
    col, lo, hi, timing = d.time_columns()
    a, b = ref_summary(d, SDPA_MATH, col, "ms"), ref_summary(d, NAIVE_INPLACE, col, "ms")
    ta, tb = ref_summary(d, SDPA_MATH, "timed_ms_median", "ms"), ref_summary(d, NAIVE_INPLACE, "timed_ms_median", "ms")
    r, rt = derived("ratio", [a, b]), derived("ratio", [ta, tb])
    nums = {"ratio": r, "math": a, "inplace": b, "timed_ratio": rt,
            "math_min": ref_summary(d, SDPA_MATH, lo, "ms"), "math_max": ref_summary(d, SDPA_MATH, hi, "ms"),
            "inplace_min": ref_summary(d, NAIVE_INPLACE, lo, "ms"), "inplace_max": ref_summary(d, NAIVE_INPLACE, hi, "ms")}
    text = (f"{SDPA_MATH} takes {fmt_ref(r, 3)}x the time of {NAIVE_INPLACE} ({fmt_ref(a)} vs {fmt_ref(b)}, {timing}; "
            f"{d.spread_words()['ranges']} {fmt_ref_range(nums['math_min'], nums['math_max'])} and "
            f"{fmt_ref_range(nums['inplace_min'], nums['inplace_max'])}); "
            f"independent timing gives {fmt_ref(rt, 3)}x ({fmt_ref(ta)} vs {fmt_ref(tb)}, median)")
    doubts = _ratio_doubts(d, nums)
    if doubts:
        text += "; not a finding: " + " and ".join(doubts)
    return [finding("speed", d, [SDPA_MATH, NAIVE_INPLACE], text, nums, [{"kind": "metric", "name": col}],
                    kind="warning" if doubts else "observation",
                    headline=f"{fmt_ref(r, 3)}x the time of {NAIVE_INPLACE}" + (" (not robust)" if doubts else ""))]


def _ratio_doubts(d: RunData, nums: dict) -> list[str]:
    """Why the math / naive_inplace ratio is no finding: the timings disagree, or the spreads overlap."""
    doubts = []
    if _disagree(nums["ratio"]["value"], nums["timed_ratio"]["value"]):
        doubts.append(f"the trace and the independent timing disagree by more than {TIMING_DISAGREEMENT}x"
                      + ("" if d.on_gpu else " (on a CPU the profiler's own cost is part of the traced time)"))
    ends = [nums[k]["value"] for k in ("math_min", "math_max", "inplace_min", "inplace_max")]
    if None not in ends and ends[0] <= ends[3] and ends[2] <= ends[1]:
        doubts.append(f"their {d.spread_words()['ranges']} overlap")
    return doubts


def _disagree(r: float | None, rt: float | None) -> bool:
    """Whether two ratios (trace, independent timing) differ by more than :data:`TIMING_DISAGREEMENT`."""
    if r is None or rt is None or r <= 0 or rt <= 0:
        return False
    return max(r / rt, rt / r) > TIMING_DISAGREEMENT


def ranking_finding(d: RunData, pass_: str = "forward") -> dict | None:
    """One ranking as a finding (rule speed): the fastest variant when it is ahead outside every interval, else the
    variants tied with it; the variants left out and why; the fused backends by median. None where nothing is
    ranked (no variant with a time for ``pass_``)."""
    r = rank(d.summary, d.shape_key, pass_)
    if not r["order"]:
        return None
    nums = _ranking_numbers(d, r)
    text, headline = _ranking_words(d, r, nums)
    text += _fused_listing(d, r, nums) + _left_out_listing(r)
    prefix = {"forward": ""}.get(pass_, f"{pass_}: ")
    f = finding("speed", d, r["order"][:1], prefix + text, nums, [{"kind": "metric", "name": r["column"]}],
                kind="observation" if len(r["tied"]) < 2 else "warning", headline=prefix + headline)
    f["id"] += {"forward": ""}.get(pass_, f"/{pass_}")  # one id per shape and pass
    f["ranking"] = r
    return f


def _fused_listing(d: RunData, r: dict, nums: dict) -> str:
    """'; fused backends by median: ...' of a forward ranking (their medians added to ``nums``); '' for none."""
    fused = [v for v in r["order"] if v in FUSED] if r["pass"] == "forward" else []
    nums.update({v: ref_summary(d, v, r["column"], "ms") for v in fused})
    return "; fused backends by median: " + ", ".join(f"{v.removeprefix('sdpa_')} {fmt_ref(nums[v])}" for v in fused) if fused else ""


def _left_out_listing(r: dict) -> str:
    """'; left out of the ranking: X (why); ...' of a ranking; '' when it left none out."""
    if not r["left_out"]:
        return ""
    return "; left out of the ranking: " + "; ".join(f"{v} ({why})" for v, why in r["left_out"].items())


def _ranking_numbers(d: RunData, r: dict) -> dict:
    """The cells a ranking rests on: the fastest's median and upper end, the runner-up's median and lower end, and
    the median and lower end of every other variant tied with the fastest."""
    best, col, lo, hi = r["order"][0], r["column"], r["low_column"], r["high_column"]
    nums = {"fastest": ref_summary(d, best, col, "ms"), "fastest_max": ref_summary(d, best, hi, "ms")}
    for i, v in enumerate(dict.fromkeys(r["order"][1:2] + r["tied"][1:])):
        name = "runner_up" if i == 0 else f"tied:{v}"
        nums[name], nums[f"{name}_min"] = ref_summary(d, v, col, "ms"), ref_summary(d, v, lo, "ms")
    return nums


def _ranking_words(d: RunData, r: dict, nums: dict) -> tuple[str, str]:
    """(statement, headline) of a ranking: the fastest, or who ties with the first, with the numbers it rests on."""
    best, w = r["order"][0], d.spread_words()
    timing = d.time_columns()[3].replace("forward", r["pass"])
    text = f"fastest variant: {best} ({fmt_ref(nums['fastest'])}, {timing})"
    if len(r["order"]) == 1:
        return text, "fastest variant"
    second = r["order"][1]
    if r["clear"]:
        return (text + f"; its {w['high']} ({fmt_ref(nums['fastest_max'])}) beats the {w['low']} of {second} "
                       f"({fmt_ref(nums['runner_up_min'])})"), "fastest variant"
    others = r["tied"][1:]
    name = {v: "runner_up" if v == second else f"tied:{v}" for v in others}
    listed = [f"{best} ({fmt_ref(nums['fastest'])})"] + [f"{v} ({fmt_ref(nums[name[v]])})" for v in others]
    ends = "; ".join(f"{v}'s {w['low']} {fmt_ref(nums[name[v] + '_min'])}" for v in others)
    return (f"no clear fastest variant: {', '.join(listed[:-1])} and {listed[-1]} tie within the spread ({best}'s "
            f"{w['high']} {fmt_ref(nums['fastest_max'])} >= {ends}; {timing})"), f"ties with {', '.join(others)} for fastest"


def _breakdown(d: RunData, variant: str) -> list[dict]:
    """Where a variant's device time goes, by kernel group (FP32 GEMM, GEMM, mask, cast/copy,
    softmax, other); each group's time per forward is the sum of its kernels' us_per_forward
    (device time over the timing-complete forwards divided by their number)."""
    k = d.kernels_of(variant)
    if k.empty:
        return []
    group_of = k["kernel"].map(lambda name: kernel_group(name) or "other")
    groups = {group: list(names) for group, names in k["kernel"].groupby(group_of, sort=False)}
    nums, parts = {}, []
    for group, names in sorted(groups.items(), key=lambda kv: -k[k["kernel"].isin(kv[1])]["us_per_forward"].sum()):
        per_fwd = derived("sum", [ref_kernel(d, variant, nm, "us_per_forward", "us") for nm in names], "us")
        nums[f"{group}_us_per_forward"] = per_fwd
        parts.append(f"{group} {fmt_ref(per_fwd)} ({len(names)} kernel{'s' if len(names) > 1 else ''})")
    text = f"{variant}: device time per forward by kernel group: " + ", ".join(parts)
    return [finding("speed", d, [variant], text, nums, [{"kind": "kernel", "name": nm} for names in groups.values() for nm in names],
                    headline="time by kernel group: " + ", ".join(p.split(" (")[0] for p in parts[:3]))]


def rule_fidelity(d: RunData) -> list[dict]:
    """Timing fidelity: trace device time vs the independent timings (CUDA events per call, CUDA-graph replay) and
    their spread, per variant that ran; and, for each pair of adjacent variants of the shape's ranking
    (attnprof.findings.ranking.rank: no dispatcher, no wrong result), whether their order holds: the event or
    graph medians order them the other way, or their intervals overlap."""
    col = d.time_columns()[0]
    out = [_fidelity_of(d, v) for v in d.summary["variant"] if d.ok(v) and d.row(v)[col] == d.row(v)[col]]
    order = rank(d.summary, d.shape_key)["order"]
    for a, b in zip(order, order[1:]):
        flips = _flips(d, a, b)
        if flips:
            nums = {f"{a}_trace_ms": ref_summary(d, a, col, "ms"), f"{b}_trace_ms": ref_summary(d, b, col, "ms")}
            out.append(finding("fidelity", d, [a, b], f"ranking {a} ahead of {b} (trace {fmt_ref(nums[f'{a}_trace_ms'])} vs "
                               f"{fmt_ref(nums[f'{b}_trace_ms'])}) does not hold: " + "; ".join(flips), nums,
                               [{"kind": "metric", "name": col}], kind="artefact", headline=f"ranking vs {b} not robust"))
    return out


def _fidelity_of(d: RunData, variant: str) -> dict:
    """One variant's trace time against its independent timings (CUDA events or perf_counter, CUDA graph)."""
    col = d.time_columns()[0]
    row = d.row(variant)
    method, short = ("CUDA events", "events") if d.on_gpu else ("perf_counter", "timed")
    trace, timed = ref_summary(d, variant, col, "ms"), ref_summary(d, variant, "timed_ms_median", "ms")
    lo_, hi_ = ref_summary(d, variant, "timed_ms_min", "ms"), ref_summary(d, variant, "timed_ms_max", "ms")
    nums = {"trace_ms": trace, "timed_ms": timed, "timed_over_trace": derived("ratio", [timed, trace]),
            "timed_min_ms": lo_, "timed_max_ms": hi_}
    graph = ref_summary(d, variant, "graph_ms_median", "ms")
    text = f"{variant}: trace {fmt_ref(trace)}, {method} {fmt_ref(timed)} (min\u2013max {fmt_ref_range(lo_, hi_)})"
    if graph["value"] is not None:
        nums["graph_ms"], nums["graph_over_trace"] = graph, derived("ratio", [graph, trace])
        text += f", CUDA graph {fmt_ref(graph)}"
    elif isinstance(row.get("graph_error"), str):
        text += f"; not capturable in a CUDA graph ({row['graph_error'][:120]})"
    text += f"; {short} / trace = {fmt_ref(nums['timed_over_trace'], 3)}"
    return finding("fidelity", d, [variant], text, nums, [{"kind": "metric", "name": "timed_ms_median"}],
                   headline=f"{short}/trace {fmt_ref(nums['timed_over_trace'], 3)}")


def _flips(d: RunData, a: str, b: str) -> list[str]:
    """Why ranking ``a`` ahead of ``b`` (by trace median) does not hold: the independent timings order them the other
    way, or their intervals overlap ([]: it holds)."""
    _, lo, hi, _ = d.time_columns()
    ra, rb = d.row(a), d.row(b)
    method = "CUDA events" if d.on_gpu else "perf_counter"
    flips = []
    for column, words in (("timed_ms_median", f"{method} medians"), ("graph_ms_median", "CUDA-graph replays")):
        x, y = clean(ra.get(column)), clean(rb.get(column))
        if x is not None and y is not None and x > y:
            flips.append(f"{words} order them the other way")
    a_hi, b_lo = clean(ra.get(hi)), clean(rb.get(lo))
    if a_hi is not None and b_lo is not None and a_hi >= b_lo:
        flips.append(f"their trace times overlap ({d.spread_words()['ranges']}: the first's upper end >= the second's lower end)")
    return flips
