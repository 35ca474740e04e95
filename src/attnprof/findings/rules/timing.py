"""Rules on time: CPU against device time per forward (launch- or device-bound), ratios and
rankings between variants that hold outside the spread of their forwards, where the math
backend's time goes, and the fidelity of the trace against independent timings.

Times in ms per forward (summary.csv): the trace's device time on a GPU (sum of the forward's
kernel, memcpy and memset durations), the forward range's host time on a CPU run; the
independent timings are CUDA events around single calls (perf_counter on a CPU) and CUDA-graph
replays. Spreads are min-max over the profiled forwards.
"""

from __future__ import annotations

from attnprof.findings.data import FUSED, NAIVE_INPLACE, SDPA_MATH, RunData
from attnprof.findings.kernel_names import kernel_group
from attnprof.findings.refs import clean, fmt_ref, derived, finding, ref_kernel, ref_launch, ref_summary

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
    out = []
    for variant in d.summary["variant"]:
        if not d.ok(variant) or not d.on_gpu:
            continue
        cpu, dev = ref_summary(d, variant, "cpu_ms_per_forward", "ms"), ref_summary(d, variant, "device_ms_per_forward", "ms")
        nums = {"cpu_ms": cpu, "device_ms": dev, "cpu_over_device": derived("ratio", [cpu, dev])}
        spread = (*d.spread_columns("cpu_ms"), *d.spread_columns("device_ms"))
        for key, name in zip(("cpu_ms_min", "cpu_ms_max", "device_ms_min", "device_ms_max"), spread):
            nums[key] = ref_summary(d, variant, name, "ms")
        apis = d.launches_of(variant)
        launch_apis = [a for a in apis["api"] if "Launch" in a or "Memcpy" in a or "Memset" in a]
        for a in launch_apis:
            nums[a] = ref_launch(d, variant, a)
        side = bound(*(nums[n]["value"] for n in ("cpu_ms_min", "cpu_ms_max", "device_ms_min", "device_ms_max")))
        ranges = (f"host {fmt_ref(nums['cpu_ms_min'])}-{fmt_ref(nums['cpu_ms_max'])}, "
                  f"device {fmt_ref(nums['device_ms_min'])}-{fmt_ref(nums['device_ms_max'])} per forward"
                  + (", between-run intervals" if d.between_run("cpu_ms") else ""))
        every = "in every repeat's interval" if d.between_run("cpu_ms") else "in every profiled forward"
        verdict = {"launch": f"launch-bound at this shape: the host takes longer to issue the work than the GPU to run it, {every} "
                             f"({ranges})",
                   "device": f"device-bound at this shape, {every} ({ranges})",
                   "neither": f"neither launch- nor device-bound outside the spread: the ranges overlap ({ranges})",
                   None: "the per-forward ranges are not recorded: no verdict on what bounds it"}[side]
        listing = ", ".join(f"{fmt_ref(nums[a])} {a}" for a in launch_apis)
        text = (f"{variant}: {fmt_ref(cpu)} CPU vs {fmt_ref(dev)} device per forward (ratio {fmt_ref(nums['cpu_over_device'], 2)}, "
                f"medians); {listing} per forward; {verdict}")
        headline = (f"{side}-bound: CPU {fmt_ref(cpu)} vs device {fmt_ref(dev)}" if side in ("launch", "device")
                    else f"CPU {fmt_ref(cpu)} vs device {fmt_ref(dev)}: within the spread")
        out.append(finding("cpu_cost", d, [variant], text, nums, [{"kind": "api", "name": a} for a in launch_apis], headline=headline))
    return out


def rule_speed(d: RunData) -> list[dict]:
    """Ratios and rankings between variants, stated as findings only where they hold outside
    the spread: per variant the median and the min-max over its profiled forwards (trace
    device time; host time on a CPU run). The math / naive_inplace ratio is set beside the
    same ratio from the independent timing, and flagged (kind 'warning') when the two differ
    by more than :data:`TIMING_DISAGREEMENT` or the per-forward ranges overlap. The fastest
    variant is named only when its slowest forward beats the runner-up's fastest; else the
    finding says the two tie within the spread."""
    out = []
    col, lo, hi, timing = d.time_columns()
    if d.ok(SDPA_MATH) and d.ok(NAIVE_INPLACE):
        a, b = ref_summary(d, SDPA_MATH, col, "ms"), ref_summary(d, NAIVE_INPLACE, col, "ms")
        r = derived("ratio", [a, b])
        ta, tb = ref_summary(d, SDPA_MATH, "timed_ms_median", "ms"), ref_summary(d, NAIVE_INPLACE, "timed_ms_median", "ms")
        rt = derived("ratio", [ta, tb])
        nums = {"ratio": r, "math": a, "inplace": b, "timed_ratio": rt,
                "math_min": ref_summary(d, SDPA_MATH, lo, "ms"), "math_max": ref_summary(d, SDPA_MATH, hi, "ms"),
                "inplace_min": ref_summary(d, NAIVE_INPLACE, lo, "ms"), "inplace_max": ref_summary(d, NAIVE_INPLACE, hi, "ms")}
        text = (f"{SDPA_MATH} takes {fmt_ref(r, 3)}x the time of {NAIVE_INPLACE} ({fmt_ref(a)} vs {fmt_ref(b)}, {timing}, median; "
                f"ranges {fmt_ref(nums['math_min'])}-{fmt_ref(nums['math_max'])} and {fmt_ref(nums['inplace_min'])}-{fmt_ref(nums['inplace_max'])}); "
                f"independent timing gives {fmt_ref(rt, 3)}x ({fmt_ref(ta)} vs {fmt_ref(tb)}, median)")
        doubts = []
        if None not in (r["value"], rt["value"]) and rt["value"] > 0 and r["value"] > 0 and \
                max(r["value"] / rt["value"], rt["value"] / r["value"]) > TIMING_DISAGREEMENT:
            doubts.append(f"the trace and the independent timing disagree by more than {TIMING_DISAGREEMENT}x"
                          + ("" if d.on_gpu else " (on a CPU the profiler's own cost is part of the traced time)"))
        if None not in (nums["math_min"]["value"], nums["inplace_max"]["value"], nums["math_max"]["value"], nums["inplace_min"]["value"]) \
                and nums["math_min"]["value"] <= nums["inplace_max"]["value"] and nums["inplace_min"]["value"] <= nums["math_max"]["value"]:
            doubts.append(f"their {d.spread_words()['ranges']} overlap")
        if doubts:
            text += "; not a finding: " + " and ".join(doubts)
        out.append(finding("speed", d, [SDPA_MATH, NAIVE_INPLACE], text, nums, [{"kind": "metric", "name": col}],
                           kind="warning" if doubts else "observation",
                           headline=f"{fmt_ref(r, 3)}x the time of {NAIVE_INPLACE}" + (" (not robust)" if doubts else "")))
    if d.on_gpu and d.ok(SDPA_MATH):
        out.extend(_breakdown(d, SDPA_MATH))
    ok = sorted((v for v in d.summary["variant"] if d.ok(v) and d.row(v)[col] == d.row(v)[col]), key=lambda v: d.row(v)[col])
    if ok:
        fastest = ok[0]
        nums = {"fastest": ref_summary(d, fastest, col, "ms"), "fastest_max": ref_summary(d, fastest, hi, "ms")}
        text = f"fastest variant: {fastest} ({fmt_ref(nums['fastest'])}, {timing}, median)"
        headline, kind = "fastest variant", "observation"
        if len(ok) > 1:
            second = ok[1]
            nums.update(runner_up=ref_summary(d, second, col, "ms"), runner_up_min=ref_summary(d, second, lo, "ms"))
            if None not in (nums["fastest_max"]["value"], nums["runner_up_min"]["value"]) and \
                    nums["fastest_max"]["value"] >= nums["runner_up_min"]["value"]:
                w = d.spread_words()
                text = (f"no clear fastest variant: {fastest} ({fmt_ref(nums['fastest'])}) and {second} ({fmt_ref(nums['runner_up'])}) "
                        f"tie within the spread ({fastest}'s {w['high']} {fmt_ref(nums['fastest_max'])} >= {second}'s {w['low']} "
                        f"{fmt_ref(nums['runner_up_min'])}; {timing})")
                headline, kind = f"ties with {second} for fastest", "warning"
            else:
                w = d.spread_words()
                text += f"; its {w['high']} ({fmt_ref(nums['fastest_max'])}) beats the {w['low']} of {second} ({fmt_ref(nums['runner_up_min'])})"
        fused_ok = [v for v in ok if v in FUSED]
        if fused_ok:
            for v in fused_ok:
                nums[v] = ref_summary(d, v, col, "ms")
            text += "; fused backends by median: " + ", ".join(f"{v.removeprefix('sdpa_')} {fmt_ref(nums[v])}" for v in fused_ok)
        out.append(finding("speed", d, [fastest], text, nums, [{"kind": "metric", "name": col}], kind=kind, headline=headline))
    return out


def _breakdown(d: RunData, variant: str) -> list[dict]:
    """Where a variant's device time goes, by kernel group (FP32 GEMM, GEMM, mask, cast/copy,
    softmax, other); each group's time per forward is the sum of its kernels' us_per_forward
    (device time over the timing-complete forwards divided by their number)."""
    k = d.kernels_of(variant)
    if k.empty:
        return []
    groups: dict[str, list[str]] = {}
    for name in k["kernel"]:
        group = kernel_group(name) or "other"
        groups.setdefault(group, []).append(name)
    nums, parts = {}, []
    for group, names in sorted(groups.items(), key=lambda kv: -k[k["kernel"].isin(kv[1])]["us_per_forward"].sum()):
        per_fwd = derived("sum", [ref_kernel(d, variant, nm, "us_per_forward", "us") for nm in names], "us")
        nums[f"{group}_us_per_forward"] = per_fwd
        parts.append(f"{group} {fmt_ref(per_fwd)} ({len(names)} kernel{'s' if len(names) > 1 else ''})")
    text = f"{variant}: device time per forward by kernel group: " + ", ".join(parts)
    return [finding("speed", d, [variant], text, nums, [{"kind": "kernel", "name": nm} for names in groups.values() for nm in names],
                    headline="time by kernel group: " + ", ".join(p.split(" (")[0] for p in parts[:3]))]


def rule_fidelity(d: RunData) -> list[dict]:
    """Timing fidelity: trace device time vs the independent timings (CUDA events per call,
    CUDA-graph replay) and their spread. Flags adjacent variants (by trace device time) whose
    order does not hold: the event or graph medians order them the other way, or their
    per-forward trace device times (min-max over profiled forwards) overlap."""
    out, rows = [], []
    col, lo, hi, timing = d.time_columns()
    method = "CUDA events" if d.on_gpu else "perf_counter"
    timed_name = "events" if d.on_gpu else "timed"  # the independent timing's short name in a statement
    for variant in d.summary["variant"]:
        row = d.row(variant)
        if row is None or row["status"] != "ok" or row[col] != row[col]:
            continue
        trace, timed = ref_summary(d, variant, col, "ms"), ref_summary(d, variant, "timed_ms_median", "ms")
        lo_, hi_ = ref_summary(d, variant, "timed_ms_min", "ms"), ref_summary(d, variant, "timed_ms_max", "ms")
        nums = {"trace_ms": trace, "timed_ms": timed, "timed_over_trace": derived("ratio", [timed, trace]),
                "timed_min_ms": lo_, "timed_max_ms": hi_}
        graph = ref_summary(d, variant, "graph_ms_median", "ms")
        text = f"{variant}: trace {fmt_ref(trace)}, {method} {fmt_ref(timed)} (min {fmt_ref(lo_)}, max {fmt_ref(hi_)})"
        if graph["value"] is not None:
            nums["graph_ms"], nums["graph_over_trace"] = graph, derived("ratio", [graph, trace])
            text += f", CUDA graph {fmt_ref(graph)}"
        elif isinstance(row.get("graph_error"), str):
            text += f"; not capturable in a CUDA graph ({row['graph_error'][:120]})"
        text += f"; {timed_name} / trace = {fmt_ref(nums['timed_over_trace'], 3)}"
        rows.append((variant, trace["value"], clean(row[lo]), clean(row[hi]), timed["value"], graph["value"]))
        out.append(finding("fidelity", d, [variant], text, nums, [{"kind": "metric", "name": "timed_ms_median"}],
                           headline=f"{timed_name}/trace {fmt_ref(nums['timed_over_trace'], 3)}"))
    rows.sort(key=lambda r: r[1])
    for a, b in zip(rows, rows[1:]):
        flips = []
        if a[4] is not None and b[4] is not None and a[4] > b[4]:
            flips.append(f"{method} medians order them the other way")
        if a[5] is not None and b[5] is not None and a[5] > b[5]:
            flips.append("CUDA-graph replays order them the other way")
        if a[3] is not None and b[2] is not None and a[3] >= b[2]:
            flips.append(f"their trace times overlap ({d.spread_words()['ranges']}: the first's upper end >= the second's lower end)")
        if flips:
            nums = {f"{a[0]}_trace_ms": ref_summary(d, a[0], col, "ms"), f"{b[0]}_trace_ms": ref_summary(d, b[0], col, "ms")}
            out.append(finding("fidelity", d, [a[0], b[0]], f"ranking {a[0]} ahead of {b[0]} (trace {fmt_ref(nums[f'{a[0]}_trace_ms'])} vs "
                               f"{fmt_ref(nums[f'{b[0]}_trace_ms'])}) does not hold: " + "; ".join(flips), nums,
                               [{"kind": "metric", "name": col}], kind="artefact",
                               headline=f"ranking vs {b[0]} not robust"))
    return out
