"""A derived file's sidecar is tied to its result set and to the capture records it was derived from (issue 43 item
11; attnprof.runtime.integrity.Ties, docs/trust.md): two result sets that swap derived files with their sidecars are
not read as each other's, a per-capture table moved to another capture's folder is not that capture's, a plain
checksum (no tie) is not trusted by compare, and repeats.csv's started_at is cross-checked against every capture's
status.json. The inputs are the committed CPU A/B example's two result sets (cpu@torch2.13, cpu@torch2.14), copied
with their run tables checksummed as summarize writes them (tests/test_attack_round5.py's helpers)."""
import hashlib
import shutil
from pathlib import Path

import pandas as pd
import pytest

from attnprof.model.names import RUN_FILES
from attnprof.model.plan import Layout
from attnprof.runtime.integrity import _sidecar, changed_files, file_problem, foreign_files, record_checksums
from test_attack_round5 import CPU, SHAPE, _copy, _tables, refused

OTHER = "cpu@torch2.14"


@pytest.fixture
def pair(tmp_path):
    """Both CPU A/B result sets, copied with their run tables and some per-capture tables checksummed."""
    a, b = _copy(CPU, tmp_path / "results" / CPU), _copy(OTHER, tmp_path / "results" / OTHER)
    _tables(a)
    return a, b


def _swap(a: Path, b: Path, name: str) -> None:
    """File ``name`` of result sets ``a`` and ``b`` swapped, each with its sidecar."""
    for path in (name, f"logs/checksums/{name}.sha256"):
        tmp = a / (path + ".swap")
        shutil.move(a / path, tmp)
        shutil.move(b / path, a / path)
        shutil.move(tmp, b / path)


def test_two_result_sets_that_swap_a_table_and_its_sidecar_are_not_read_as_each_other(pair):
    """The input: summary.csv and repeats.csv swapped with their sidecars (a known 1.03x read as 0.971 before)."""
    a, b = pair
    for name in (RUN_FILES["summary"], RUN_FILES["repeats"]):
        _swap(a, b, name)
    for run in (a, b):
        why = file_problem(run, run / RUN_FILES["summary"])
        assert why.startswith("not this result set's: ") and "another result set or to other captures" in why, why
        assert changed_files(run, [run / RUN_FILES["summary"]]) == []  # the content is what its writer wrote
        assert foreign_files(run, [run / RUN_FILES["summary"]]) == [str(run / RUN_FILES["summary"])]
    refused(a, "summary.csv: not this result set's")


def test_a_per_capture_table_moved_to_another_capture_is_not_that_capture_s(pair):
    """The same kind inside one result set: naive's repeat-1 recipe with its sidecar copied over repeat 2's."""
    a, _ = pair
    lay = Layout(str(a.parent))
    one, two = (Path(lay.table_file("recipe", a.name, SHAPE, "naive", k)) for k in (1, 2))
    shutil.copy2(one, two)
    shutil.copy2(_sidecar(a, one), _sidecar(a, two))
    assert file_problem(a, one) is None
    assert file_problem(a, two).startswith("not this result set's")
    assert foreign_files(a, [one, two]) == [str(two)]
    refused(a, f"{two}: not this result set's")


def test_a_table_edited_with_a_plain_recomputed_checksum_is_not_trusted(pair):
    """The input's other half: an edited summary.csv with a sidecar recomputed as a plain checksum (its SHA-256,
    size and time, no tie): compare does not trust it."""
    a, _ = pair
    path = a / RUN_FILES["summary"]
    frame = pd.read_csv(path)
    frame.loc[frame["variant"] == "naive", "cpu_ms_per_forward"] *= 1.5
    frame.to_csv(path, index=False)
    st = path.stat()
    _sidecar(a, path).write_text(f"{hashlib.sha256(path.read_bytes()).hexdigest()} {st.st_size} {st.st_mtime_ns}\n")
    assert file_problem(a, path).startswith("not tied to its result set")
    refused(a, "summary.csv: not tied to its result set")


@pytest.mark.parametrize("shift", [60.0, 0.5], ids=["a-minute", "half-a-second"])
def test_repeats_csv_whose_started_at_disagrees_with_a_capture_record_is_refused(pair, shift):
    """A repeats.csv edited (one row's started_at moved) and re-checksummed with its tie: the sidecar holds, the
    cross-check against the capture's status.json does not; by hand: the row's time and the record's differ by
    ``shift`` seconds."""
    a, _ = pair
    path = a / RUN_FILES["repeats"]
    frame = pd.read_csv(path)
    row = frame.index[(frame["variant"] == "sdpa_math") & (frame["repeat"] == 3)][0]
    began = frame.loc[row, "started_at"]
    frame.loc[row, "started_at"] = began + shift
    frame.to_csv(path, index=False)
    record_checksums(a, [path])
    assert file_problem(a, path) is None
    refused(a, "repeats.csv: not made from this result set's captures", "sdpa_math", "repeat 3",
            f"{began + shift:.3f}", f"records {began:.3f}")
