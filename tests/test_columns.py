"""The column registry (attnprof.model.columns): every column the pipeline writes is declared, nothing declared is
gone, docs/results.md is generated from it, and the report's summary headers come from it."""
import csv
from pathlib import Path

import pytest

from attnprof.model.formats import current_record
from attnprof.model import columns as registry
from attnprof.model.columns import TABLES, columns_of, declare, results_markdown

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56"
RUN_TABLES = {"summary.csv": "summary", "kernels.csv": "kernels", "repeats.csv": "repeats"}


def _header(path: Path) -> list[str]:
    with path.open(newline="") as fh:
        return next(csv.reader(fh))


def _written_sets() -> list[Path]:
    """Result sets committed with the repository: the H200 examples and the CPU fixtures' (their run-level CSVs)."""
    sets = [p for p in sorted((ROOT / "examples").iterdir()) if (p / "summary.csv").is_file()]
    sets += sorted(p.parent for p in (ROOT / "tests" / "fixtures").rglob("summary.csv"))
    assert EXAMPLE in sets and len(sets) >= 3
    return sets


@pytest.mark.parametrize("run_dir", _written_sets(), ids=lambda p: p.name)
def test_every_column_a_committed_result_set_holds_is_declared(run_dir):
    for name, table in RUN_TABLES.items():
        if (run_dir / name).is_file():
            undeclared = [c for c in _header(run_dir / name) if c not in columns_of(table)]
            assert not undeclared, f"{run_dir / name}: columns not declared in attnprof.model.columns: {undeclared}"


def test_the_declared_run_tables_are_those_the_code_writes():
    """Both ways: a column the code writes and the registry lacks, and a declared column the code no longer writes."""
    from attnprof.analysis.tables import REPEAT_COLUMNS, SUMMARY_COLUMNS
    from attnprof.model.names import FORMAT_KEY

    # repeats.csv: its columns and the format version (scripts/summarize.py)
    for table, written in (("summary", SUMMARY_COLUMNS), ("repeats", [*REPEAT_COLUMNS, FORMAT_KEY])):
        assert sorted(columns_of(table)) == sorted(written), table
        assert len(written) == len(set(written))


def test_the_declared_capture_tables_are_those_extract_writes(h200):
    """The per-capture tables as extract builds them from a real H200 trace (conftest: the forward tables; the
    backward tables of an H200 capture with a backward), and the header a capture without a backward gets: the
    same columns in the same order."""
    from attnprof.analysis.backward import BACKWARD_COLUMNS, analyse_passes, backward_tables, empty_backward_tables
    from attnprof.analysis.trace import load_trace

    capture = Path(__file__).parent / "fixtures" / "h200_beyond" / "b8_h16_s1024_d64_bf16_causal" / "sdpa_flash"
    backward = backward_tables(analyse_passes(load_trace(capture / "trace.json.gz"), "attn_fwd", "attn_bwd",
                                              expect_gpu=True)[1], "sdpa_flash", "s")
    built = {"kernels": h200["kernels"], "forwards": h200["forwards"]["sdpa_flash"],
             "launches": h200["launches"][0], "ops": h200["ops"][0], **backward}
    assert all(len(frame) > 0 for frame in built.values())  # real rows, not only headers
    assert set(built) == set(TABLES) - {"summary", "repeats", "recipe", "recipe_backward", "control"}
    for table, frame in built.items():
        assert sorted(columns_of(table)) == sorted(frame.columns), table
    for table, empty in empty_backward_tables().items():
        assert list(empty.columns) == list(backward[table].columns) and empty.empty, table
    assert sorted(columns_of("backwards")) == sorted(BACKWARD_COLUMNS)


def test_the_declared_recipe_and_control_tables_are_those_written():
    """recipe.csv as the recipe diff builds it and control.csv as the self-check writes it (their writers' own
    column lists, attnprof.analysis.recipe and attnprof.analysis.control)."""
    from attnprof.analysis.control import CONTROL_COLUMNS, control_table
    from attnprof.analysis.recipe import RECIPE_COLUMNS

    assert sorted(columns_of("recipe")) == sorted(columns_of("recipe_backward")) == sorted(RECIPE_COLUMNS)
    assert sorted(columns_of("control")) == sorted(control_table([]).columns) == sorted(CONTROL_COLUMNS)


def test_every_declaration_has_a_meaning_and_known_tables():
    assert registry.COLUMNS
    for c in registry.COLUMNS:
        assert c.description.strip(), c.name
        assert c.tables and set(c.tables) <= set(TABLES), c.name
    with pytest.raises(ValueError, match="unknown table"):
        declare("no_such_table", "x", "", "x")
    with pytest.raises(ValueError, match="'variant' declared twice"):
        declare("summary", "variant", "", "again")
    with pytest.raises(KeyError, match="no table"):
        columns_of("summaries")


def test_results_doc_is_generated_from_the_registry():
    """docs/results.md is what `python -m attnprof.model.columns` writes now (regenerate it after a declaration or
    a template edit); each table's section lists each of its columns."""
    doc = (ROOT / "docs" / "results.md").read_text()
    assert doc == results_markdown(registry.TEMPLATE.read_text())
    for table in TABLES:
        for name in columns_of(table):
            assert f"`{name}`" in doc
    assert "| `host_load_1m` |  | 1-minute load average" in doc
    assert "| `timed_ms_q1`, `timed_ms_q3`, `timed_ms_min`, `timed_ms_max` | ms |" in doc


def test_a_template_without_a_tables_section_is_refused():
    with pytest.raises(ValueError, match="no \\{\\{columns ...\\}\\} line for \\['repeats'"):
        results_markdown("{{columns summary}}\n")
    with pytest.raises(KeyError, match="no table 'nope'"):  # KeyError's text is the repr of its message
        results_markdown("".join(f"{{{{columns {t}}}}}\n" for t in [*TABLES, "nope"]))


def test_the_report_summary_headers_come_from_the_registry(h200, monkeypatch):
    """A header changed in the registry changes the report; the CPU run's CPU header replaces the GPU one."""
    from attnprof.render.common import render_html

    col = columns_of("summary")["timed_ms_median"]
    changed = registry.ReportHeader("steady ms", "a hint of our own")
    monkeypatch.setattr(registry, "COLUMNS", [registry.Column(c.name, c.tables, c.unit, c.description,
                                                              changed if c is col else c.report, c.group)
                                              for c in registry.COLUMNS])
    tpl = ROOT / "report"
    html = render_html(_context(h200, "NVIDIA H200"), tpl)
    assert '<th>steady ms<br><span class="hint">a hint of our own</span></th>' in html
    assert "<th>timed ms<br>" not in html
    # a host time is a range over the captures, never a rerun interval (attnprof.findings.ranking.spread_words)
    assert '<th>CPU ms / fwd<br><span class="hint">median of repeats; captures; IQR</span></th>' in html
    cpu = render_html(_context(h200, None), tpl)
    assert '<th>host ms / fwd<br><span class="hint">median of repeats; captures; IQR</span></th>' in cpu
    assert "<th>CPU ms / fwd" not in cpu


def _context(h200, gpu_name):
    from attnprof.analysis.tables import concat_tables
    from attnprof.render.report import build_context

    env = {"gpu_name": gpu_name, "torch": "2.11.0", "python": "3.12", "snakemake": "9", "driver": "580",
           "cuda_build": "13.0", "cudnn": 91900, "cpu": "x86_64",
           "config": {"profiler": {"warmup_calls": 3, "range_name": "attn_fwd", "schedule": {"wait": 1, "warmup": 2, "active": 10}},
                      "timing": {"repeats": 50, "input_sets": 4}}}
    env = current_record("env", env, "env.json")  # as attnprof.analysis.records.load_env reads it
    return build_context("test-run", h200["summary"], h200["kernels"], concat_tables(h200["launches"]), {"shapes": []},
                         env, {"expectations": []}, {}, css="body{}")


def test_every_csv_table_of_a_result_set_has_its_columns_declared():
    """A new CSV table (attnprof.model.names) fails here until its columns are declared (TABLES and declare)."""
    from attnprof.model.names import CAPTURE_TABLES, RUN_FILES

    csv_tables = {k for k, f in {**CAPTURE_TABLES, **RUN_FILES}.items() if f.endswith(".csv")}
    assert {"summary", "repeats", "kernels", "forwards", "backwards"} <= csv_tables
    assert sorted(csv_tables - set(TABLES)) == []


# --- columns declared with a formula (attnprof.analysis.tables.derive_columns) ---------------------------------

def test_a_declared_formula_fills_its_column_and_blanks_what_it_cannot_compute():
    import pandas as pd

    from attnprof.analysis.tables import SUMMARY_COLUMNS, derive_columns

    assert "gbps" in SUMMARY_COLUMNS and registry.formulas("summary")["gbps"]
    # 2 GFLOP at 4 FLOP/B is 0.5 GB; in 0.5 ms that is 1000 GB/s, in 2 ms 250 GB/s; no time, a zero time: no figure
    table = pd.DataFrame({"variant": list("abcde"), "forward_gflop": [2, 2, 2, None, 2], "flop_per_byte": [4, 4, 4, 4, 4],
                          "device_ms_per_forward": [0.5, 2, 0, 1, ""], "gbps": [7, 7, 7, 7, 7]})
    out = derive_columns(table)
    assert out["gbps"].tolist()[:2] == [1000.0, 250.0] and out["gbps"].iloc[2:].isna().all()
    assert list(out.columns) == list(table.columns) and table["gbps"].tolist() == [7] * 5  # a copy, in place of the old


def test_a_formula_over_a_missing_column_names_it():
    import pandas as pd

    from attnprof.analysis.tables import derive_columns

    with pytest.raises(ValueError, match="column 'x'.*needs a column"):
        derive_columns(pd.DataFrame({"a": [1.0]}), {"x": "a / nope"})


def test_decode_gbps_is_the_shapes_bytes_over_the_device_time():
    """The H200 beyond example's decode shape (q_len 1, kv_len 8192, GQA 32/8 heads, d 128, bf16): the bytes counted by
    hand from the shape (q and the output B*H*1*D each, k and v B*KVH*S*D each, 2 bytes an element) over the committed
    device time, against the formula over summary.csv's other columns."""
    import pandas as pd

    from attnprof.analysis.tables import derive_columns

    beyond = ROOT / "examples" / "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56-beyond"
    summary = pd.read_csv(beyond / "summary.csv")
    decode = summary[(summary["q_len"] == 1) & summary["device_ms_per_forward"].notna()]
    assert len(decode) >= 5
    b, h, kvh, s, d = 8, 32, 8, 8192, 128
    nbytes = 2 * (2 * b * h * 1 * d + 2 * b * kvh * s * d)
    by_hand = nbytes / (decode["device_ms_per_forward"] * 1e-3) / 1e9
    derived = derive_columns(decode)["gbps"]
    assert ((derived - by_hand).abs() / by_hand).max() < 1e-6
    assert 100 < derived.max() < 4800  # GB/s, under the H200's datasheet 4.8 TB/s
