"""The recipe diff (attnprof.analysis.recipe, issue 20 part 2): synthetic sequences whose right alignment is
known, per-step time verdicts with a known answer, the real traces of the committed H200 example, the
support/dispatch diff (part 4) and the compare report's escaping of kernel names."""

from pathlib import Path

import pandas as pd
import pytest

from attnprof.analysis.recipe import align, arch_of, diff_recipes, recipe_groups
from attnprof.analysis.trace import kernel_label

# kernel names with the shape of real ones (C++ templates), classes by hand
GEMM80 = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)"
GEMM90 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>(c10::BFloat16*)"
MUL = ("void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, X, Y)")
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<bool>, std::array<char*, 1ul> >(int, X, Y)"
COPY = "Memcpy DtoD (Device -> Device)"
ADD = MUL.replace("MulFunctor", "AddFunctor")
CLASS = {ADD: "elementwise", GEMM80: "GEMM", GEMM90: "GEMM", SOFTMAX: "softmax", MUL: "elementwise", FILL: "mask", COPY: "memcpy"}


def classify(name, category):
    return CLASS[name]


def steps(names):
    from attnprof.analysis.trace import kernel_label

    return [{"name": n, "label": kernel_label(n), "category": "memcpy" if n == COPY else "kernel"} for n in names]


def kinds(a, b):
    return [(r["kind"], r["a"], r["b"]) for r in align(steps(a), steps(b), classify)]


def test_identical_recipes_keep_every_step():
    assert kinds([GEMM80, MUL, SOFTMAX], [GEMM80, MUL, SOFTMAX]) == [("kept", 0, 0), ("kept", 1, 1), ("kept", 2, 2)]


def test_an_added_and_a_removed_step_are_placed_where_they_are():
    # B adds a mask fill before the softmax and drops the copy at the end
    assert kinds([GEMM80, MUL, SOFTMAX, COPY], [GEMM80, MUL, FILL, SOFTMAX]) == [
        ("kept", 0, 0), ("kept", 1, 1), ("added", None, 2), ("kept", 2, 3), ("removed", 3, None)]


def test_an_sm80_gemm_replaced_by_an_sm90_one_is_a_replacement_of_the_same_role():
    rows = kinds([GEMM80, MUL, SOFTMAX, GEMM80], [GEMM90, MUL, SOFTMAX, GEMM90])
    assert rows == [("replaced", 0, 0), ("kept", 1, 1), ("kept", 2, 2), ("replaced", 3, 3)]
    assert (arch_of(GEMM80), arch_of(GEMM90), arch_of(SOFTMAX)) == ("sm80", "sm90", None)


def test_a_replace_run_pairs_only_steps_of_the_same_class():
    # the GEMM is swapped, and a mask fill takes the place of the copy: not a replacement (other class)
    rows = kinds([GEMM80, COPY, SOFTMAX], [GEMM90, FILL, SOFTMAX])
    assert sorted(rows, key=str) == sorted([("replaced", 0, 0), ("removed", 1, None), ("added", None, 1), ("kept", 2, 2)], key=str)


def test_a_reordering_is_a_move_not_an_addition():
    rows = kinds([MUL, SOFTMAX, COPY], [SOFTMAX, MUL, COPY])
    assert sorted(r[0] for r in rows) == ["kept", "kept", "moved"]
    moved = next(r for r in rows if r[0] == "moved")
    assert steps([MUL, SOFTMAX, COPY])[moved[1]]["label"] == steps([SOFTMAX, MUL, COPY])[moved[2]]["label"]


def recipe(names, durs_per_forward, forwards=None):
    """A recipe table of one capture: each forward runs ``names`` with durations from ``durs_per_forward``."""
    rows = []
    for f, durs in enumerate(durs_per_forward):
        fnames = (forwards or {}).get(f, names)
        for i, (n, d) in enumerate(zip(fnames, durs)):
            rows.append({"variant": "v", "shape_key": "s", "forward": f, "step": i, "category": "memcpy" if n == COPY else "kernel",
                         "name": n, "label": steps([n])[0]["label"], "grid": "1x1x1", "block": "128x1x1", "dur_us": d, "time_ok": True})
    return pd.DataFrame(rows)


def test_per_step_ratio_uses_each_repeats_median_and_finds_an_injected_change():
    names = [GEMM80, SOFTMAX]
    # per repeat, three forwards: the repeat median of the GEMM is the middle value (10.0, 10.2, 9.8 in A)
    a = [recipe(names, [[10.0, 5.0], [9.0, 5.1], [11.0, 4.9]]), recipe(names, [[10.2, 5.0], [10.1, 5.0], [12.0, 5.0]]),
         recipe(names, [[9.8, 5.0], [9.7, 5.0], [9.9, 5.0]])]
    # B: the GEMM 50 % slower (medians 15.0, 15.3, 14.7), the softmax unchanged
    b = [recipe(names, [[15.0, 5.0], [14.0, 5.1], [16.0, 4.9]]), recipe(names, [[15.3, 5.0], [15.1, 5.0], [18.0, 5.0]]),
         recipe(names, [[14.7, 5.0], [14.6, 5.0], [14.9, 5.0]])]
    d = diff_recipes(a, b, classify, threshold=0.02)
    gemm, soft = d["groups"][0]["rows"]
    assert d["same"] and gemm["kind"] == soft["kind"] == "kept"
    assert gemm["ratio"] == pytest.approx(1.5, rel=1e-9)  # every repeat median scaled by exactly 1.5
    assert gemm["verdict"] == "slower" and soft["verdict"] == "same" and gemm["repeats_a"] == 3


def test_a_step_of_two_sittings_is_judged_with_the_sitting_term_as_its_row_is():
    """The H200 beyond rerun called a step 3.6 % slower (1.021-1.052) while every row of its pair, judged with the
    sitting term, was inconclusive. A step 3 % slower in every repeat, each side's repeats within 0.1 %: one sitting
    finds it; across two sittings (sd 0.85 % with 2 degrees of freedom, the rows' term) the 95 % interval is wider
    than +-5 % (t(0.975, 2) = 4.30 times sqrt(2) x 0.85 %), so it cannot lie beyond 2 %: inconclusive."""
    from attnprof.analysis.stats import SITTING_DF, SITTING_SD
    from attnprof.analysis.verdict import Sitting

    a = [recipe([GEMM80], [[t]]) for t in (10.00, 10.01, 9.99)]
    b = [recipe([GEMM80], [[1.03 * t]]) for t in (10.00, 9.99, 10.01)]
    (one,) = diff_recipes(a, b, classify, threshold=0.02)["groups"][0]["rows"]
    (two,) = diff_recipes(a, b, classify, threshold=0.02, sitting=Sitting(SITTING_SD, SITTING_DF, "two"))["groups"][0]["rows"]
    assert one["verdict"] == "slower" and one["ratio"] == pytest.approx(1.03, rel=1e-3)
    assert two["verdict"] == "inconclusive" and two["ratio"] == pytest.approx(one["ratio"])
    assert two["ratio_hi"] / two["ratio"] > 1.05 > one["ratio_hi"] / one["ratio"]


def test_compare_pair_judges_a_step_with_its_pairs_sitting_term():
    """The wiring above, through compare_pair: two CPU result sets compared unpaired (the committed cpu@torch2.13 with
    itself: no GPU recorded, so two sittings and the sitting term) whose one recipe has a step 25 % slower in every
    repeat, each side's repeats within 0.1 %. Judged alone (one sitting) against the CPU's 20 % threshold it is
    slower; in the pair it is inconclusive, as its row would be (1.25 / 1.187 > e^0.052, the sitting term's 95 %
    half-width with 2 degrees of freedom)."""
    import json

    from attnprof.analysis.compare import compare_pair

    run = Path(__file__).resolve().parents[1] / "examples" / "cpu@torch2.13"
    key = ("naive", "b2_h8_s512_d64_fp32_causal", "forward")
    a_tables = [recipe([GEMM80], [[t]]) for t in (10.00, 10.01, 9.99)]
    b_tables = [recipe([GEMM80], [[1.25 * t]]) for t in (10.00, 9.99, 10.01)]

    def result_set(name, tables):
        return {"name": name, "summary": pd.read_csv(run / "summary.csv"), "kernels": pd.read_csv(run / "kernels.csv"),
                "ops": None, "env": json.loads((run / "env.json").read_text()), "repeats": pd.read_csv(run / "repeats.csv"),
                "findings": json.loads((run / "findings.json").read_text()), "recipes": {key: tables}}

    pair = compare_pair(result_set("a", a_tables), result_set("b", b_tables), classify=classify)
    (alone,) = diff_recipes(a_tables, b_tables, classify, threshold=pair["threshold"])["groups"][0]["rows"]
    (step,) = pair["recipes"][0]["groups"][0]["rows"]
    assert pair["threshold"] == 0.2 and pair["sitting"]["sd"] > 0 and not pair["paired"]
    assert alone["verdict"] == "slower" and step["verdict"] == "inconclusive"
    assert step["ratio"] == pytest.approx(alone["ratio"]) == pytest.approx(1.25, rel=1e-3)


def test_one_repeat_gives_a_ratio_and_no_verdict():
    d = diff_recipes([recipe([GEMM80], [[10.0], [12.0], [11.0]])], [recipe([GEMM90], [[5.0], [6.0], [7.0]])], classify)
    (row,) = d["groups"][0]["rows"]
    assert row["kind"] == "replaced" and row["ratio"] == pytest.approx(6.0 / 11.0) and row["verdict"] is None
    assert not d["same"] and d["counts"]["replaced"] == 1


def test_forwards_that_differ_within_a_capture_are_diffed_group_by_group():
    # A: forwards 0, 1, 3 run GEMM+softmax, forward 2 adds a copy; B: the same groups, the copy gone from the small group's
    a = recipe([GEMM80, SOFTMAX], [[1, 1], [1, 1], [1, 1, 1], [1, 1]], forwards={2: [GEMM80, SOFTMAX, COPY]})
    b = recipe([GEMM80, SOFTMAX], [[1, 1], [1, 1], [1, 1], [1, 1]], forwards={2: [GEMM80, SOFTMAX]})
    assert [g["forwards"] for g in recipe_groups(a)] == [[0, 1, 3], [2]]
    d = diff_recipes([a], [b], classify)
    assert len(d["groups"]) == 2 and d["groups"][0]["forwards_a"] == 3 and d["groups"][0]["forwards_b"] == 4
    assert [r["kind"] for r in d["groups"][1]["rows"]] == ["kept", "kept", "removed"]
    assert "2 group(s)" in d["note"]


H200 = "examples/nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56/captures/b8_h16_s512_d64_bf16_causal"


@pytest.mark.parametrize("variant", ["naive", "sdpa_cudnn"])
def test_the_h200_example_against_itself_keeps_every_kernel(variant):
    from pathlib import Path

    from attnprof.analysis.recipe import recipe_table
    from attnprof.analysis.tables import analyse_trace, forward_table
    from attnprof.analysis.trace import load_trace
    from attnprof.findings.kernel_names import kernel_class

    root = Path(__file__).resolve().parents[1] / H200 / variant
    tables, counts = [], []
    for r in (1, 2, 3):
        frames = analyse_trace(load_trace(root / f"r{r}" / "trace.json.gz"), "attn_fwd", True)
        tables.append(recipe_table(frames, variant, "s", True))
        fw = forward_table(frames, variant, "s")
        counts.append(fw[fw["complete"]][["kernels", "memcpy", "memset"]].sum(axis=1).iloc[0])
    # another code path: forwards.csv's per-forward counts = the steps of one forward's recipe
    assert len(tables[0][tables[0]["forward"] == tables[0]["forward"].min()]) == counts[0]
    d = diff_recipes(tables, tables, kernel_class)
    assert d["same"] and d["counts"]["kept"] == counts[0] and sum(d["counts"].values()) == counts[0]
    # A/B of repeat 1 against repeats 2-3 of the same run: the same recipe
    d2 = diff_recipes(tables[:1], tables[1:], kernel_class)
    assert d2["same"]


def test_support_changes_are_diffed_in_pytorchs_words():
    from attnprof.analysis.compare import support_changes

    why = ("No available kernel. Because: Flash attention kernel not used because: Flash attention only supports "
           "head dimension at most 256")
    sa = pd.DataFrame([{"variant": "sdpa_flash", "shape_key": "s", "status": "ok", "reason": ""},
                       {"variant": "sdpa_cudnn", "shape_key": "s", "status": "unsupported", "reason": "x. Because: cuDNN says A"},
                       {"variant": "sdpa_math", "shape_key": "s", "status": "out_of_memory", "reason": "OOM 1 GiB free"}])
    sb = pd.DataFrame([{"variant": "sdpa_flash", "shape_key": "s", "status": "unsupported", "reason": why},
                       {"variant": "sdpa_cudnn", "shape_key": "s", "status": "unsupported", "reason": "x. Because: cuDNN says B"},
                       {"variant": "sdpa_math", "shape_key": "s", "status": "out_of_memory", "reason": "OOM 2 GiB free"}])
    out = {c["variant"]: c for c in support_changes(sa, sb)}
    assert set(out) == {"sdpa_flash", "sdpa_cudnn"}  # the OOM's figures change every run: not a change of support
    assert out["sdpa_flash"]["reason_b"] == "Flash attention kernel not used because: Flash attention only supports head dimension at most 256"
    assert out["sdpa_flash"]["reason_a"] is None
    assert (out["sdpa_cudnn"]["reason_a"], out["sdpa_cudnn"]["reason_b"]) == ("cuDNN says A", "cuDNN says B")


def test_the_compare_report_escapes_kernel_names_and_opens_with_what_changed():
    from pathlib import Path

    from attnprof.render.common import render_html

    from attnprof.render.compare import compare_context

    a, b = [recipe([GEMM80, MUL, SOFTMAX], [[1, 1, 1]])], [recipe([GEMM90, ADD, SOFTMAX], [[1, 1, 1]])]
    d = diff_recipes(a, b, classify)
    from compare_doc import doc as compare_doc

    doc = compare_doc({
        "a": "A", "b": "B",
        "accounting": {"changed": False, "why": "the control's counts are those known by construction in both result sets"},
        "recipes": [{"variant": "naive", "shape_key": "s", "pass": "forward", "verdict": "recipe changed", **d}]})
    root = Path(__file__).resolve().parents[1] / "report"
    html = render_html(compare_context(doc, ""), root, "compare.html.j2")
    assert "cutlass::Kernel2 [cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8]" in html
    assert "vectorized_elementwise_kernel [MulFunctor&lt;float&gt;]" in html  # replaced by AddFunctor: shown, escaped
    assert "<float>" not in html and "softmax_warp_forward" not in html  # the kept softmax, no time change: hidden
    assert "0 of 1 same recipe" in html and "1 kept steps with no time change are not shown" in html
    body = html[html.index("<section>"):]
    assert body.index("What changed") < body.index("Recipe: each forward")


def test_another_instantiation_of_the_same_kernel_is_a_replacement_not_kept():
    """Two FlashAttention forward kernels that differ only in a template argument (the tile): the same short label,
    another kernel -- replaced, and the recipe is not the same."""
    f128 = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>, true>(Flash_fwd_params)"
    f64 = f128.replace("<64, 128, 128, 4", "<64, 128, 64, 4")
    def table(name):
        return pd.DataFrame([{"variant": "v", "shape_key": "s", "forward": f, "step": 0, "category": "kernel", "name": name,
                              "label": kernel_label(name), "grid": "1x1x1", "block": "128x1x1", "dur_us": 1.0,
                              "time_ok": True} for f in (0, 1)])
    a, b = table(f128), table(f64)
    assert a["label"].iloc[0] == b["label"].iloc[0]  # the labels alone cannot tell them apart
    d = diff_recipes([a], [b], lambda name, category: "fused attention")
    assert d["counts"]["replaced"] == 1 and d["counts"]["kept"] == 0 and not d["same"]


def test_a_header_only_first_repeat_falls_back_to_the_next_one():
    """A failed pass writes recipe.csv with its header only: repeat 2's table is diffed instead of no diff at all."""
    names = [GEMM80, SOFTMAX]
    empty = recipe(names, [[1.0, 1.0]]).iloc[0:0]
    d = diff_recipes([empty, recipe(names, [[1.0, 1.0]])], [recipe(names, [[1.0, 1.0]])], classify)
    assert d["same"] and d["counts"]["kept"] == 2


def test_damaged_recipe_tables_are_named_not_diffed():
    """A table cut short mid-row (its last step without a label), a table whose steps skip a number, one without a
    column: each gets its reason; an intact table and a header-only one get none."""
    from attnprof.analysis.recipe import recipe_table_problem

    whole = recipe([GEMM80, SOFTMAX, COPY], [[1.0, 1.0, 1.0]])
    cut = whole.copy()
    cut.loc[2, ["label", "category"]] = None
    skipped = whole.drop(index=1)
    assert recipe_table_problem(whole) is None and recipe_table_problem(whole.iloc[0:0]) is None
    assert "cut short" in recipe_table_problem(cut)
    assert "not numbered 0 to 1" in recipe_table_problem(skipped)
    assert "['label'] missing" in recipe_table_problem(whole.drop(columns="label"))


def test_recipe_csv_stores_each_name_once_and_reads_back_whole(tmp_path):
    """write_recipe/read_recipe: three forwards of the same three steps, two of them kernels whose names share a
    short label but differ in their template arguments (so a label cannot stand for a name). The file holds each
    full name exactly once; read back, every row has its own name again and every other column is unchanged; a
    header-only table (a pass not run) and a table written before name_id (full names) read as they are."""
    import pandas as pd

    from attnprof.analysis.recipe import RECIPE_COLUMNS, read_recipe, write_recipe

    gemm_a = "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<float, 128, 64, <&>>>(Params)"
    gemm_b = "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<float, 64, 64, <&>>>(Params)"
    soft = "void at::native::softmax_warp_forward<float, float, 10, true>(float*, float const*)"
    rows = [{"variant": "v", "shape_key": "s", "forward": f, "step": i, "category": "kernel", "name": n,
             "label": "cutlass::Kernel" if n != soft else "softmax_warp_forward", "grid": "[1, 1, 1]",
             "block": "[128, 1, 1]", "dur_us": 1.5 + f + i, "time_ok": True, "start_us": 10.0 * i,
             "launch_api": "cudaLaunchKernel", "launch_us": 10.0 * i - 3, "launch_dur_us": 2.0}
            for f in range(3) for i, n in enumerate((gemm_a, soft, gemm_b))]
    table = pd.DataFrame(rows, columns=RECIPE_COLUMNS)
    write_recipe(table, tmp_path / "recipe.csv")
    text = (tmp_path / "recipe.csv").read_text()
    assert [text.count(n) for n in (gemm_a, soft, gemm_b)] == [1, 1, 1]  # 9 rows, each name written once
    back = read_recipe(tmp_path / "recipe.csv")
    pd.testing.assert_frame_equal(back[RECIPE_COLUMNS], table, check_dtype=False)
    empty = pd.DataFrame(columns=RECIPE_COLUMNS)
    write_recipe(empty, tmp_path / "empty.csv")
    assert read_recipe(tmp_path / "empty.csv").empty and list(read_recipe(tmp_path / "empty.csv").columns) == RECIPE_COLUMNS
    table.to_csv(tmp_path / "old.csv", index=False)  # before name_id: every name in full
    pd.testing.assert_frame_equal(read_recipe(tmp_path / "old.csv"), table, check_dtype=False)
