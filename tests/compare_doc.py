"""compare.json documents for the render tests: every key that attnprof.analysis.compare.compare_runs writes, each
empty (None, [], 0), with a test's own values over them. test_compare_doc.py checks these keys against a
compare.json that compare_runs writes from two committed result sets."""

from attnprof.analysis.compare import VERDICTS

#: A row's keys (attnprof.analysis.compare._pair_row), each None.
ROW = dict.fromkeys((
    "variant", "shape_key", "status_a", "status_b", "kernels_a", "kernels_b", "time_a_ms", "time_b_ms", "timing",
    "timed_ratio", "ratio", "ratio_lo", "ratio_hi", "verdict", "repeats_a", "repeats_b", "repeats_needed", "why", "p",
    "probably", "df", "se", "level", "paired", "look", "top_up", "bwd_status_a", "bwd_status_b", "bwd_kernels_a",
    "bwd_kernels_b", "bwd_a_ms", "bwd_b_ms", "bwd_ratio", "bwd_ratio_lo", "bwd_ratio_hi", "bwd_verdict",
    "bwd_repeats_needed", "compile_a_s", "compile_b_s", "compile_ratio", "compile_cache_a", "compile_cache_b"))
ROW.update(kernels_added=[], kernels_removed=[], ops_added=[], ops_removed=[])

#: A pair's keys (attnprof.analysis.compare.compare_pair and compare_runs' counts), each empty.
PAIR = {"a": "a", "b": "b", "threshold": 0.02, "rows": [], "joint": None, "sitting_sd": None,
        "sitting": {"sd": 0.0, "df": float("inf"), "why": ""}, "dispatch": [], "env_diff": [],
        "torch": {"a": None, "b": None}, "notes": [], "accounting": None, "paired": False, "unpaired_rows": [],
        "design": None, "support": [], "recipes": [], "only_in_a": [], "only_in_b": [], "counts": dict.fromkeys(VERDICTS, 0)}


def row(**kw) -> dict:
    """A compare row: :data:`ROW` with ``kw`` over it."""
    return {**ROW, **kw}


def pair(**kw) -> dict:
    """A compare pair: :data:`PAIR` with ``kw`` over it; each row completed by :func:`row`."""
    return {**PAIR, **kw, "rows": [row(**r) for r in kw.get("rows", [])]}


def doc(*pairs: dict, noise_floor: float = 0.02, confidence: float = 0.95) -> dict:
    """A compare.json document of ``pairs`` (each completed by :func:`pair`)."""
    return {"baseline": "a", "noise_floor": noise_floor, "noise_floor_host": 0.20, "confidence": confidence,
            "pairs": [pair(**p) for p in pairs]}
