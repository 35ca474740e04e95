"""The test suite's two tiers (tests/conftest.py): a quick-tier test that would start a capture process or Snakemake
with jobs fails with what to do, before anything starts; commands that start neither pass."""

import subprocess
import sys

import pytest

import snakemake_cli
from conftest import slow_start

PY = sys.executable


@pytest.mark.parametrize("args,expected", [
    ([PY, "-m", "attnprof.runtime.worker", "serve", "k", "cpu", "20"], "a capture process (attnprof.runtime.worker)"),
    ([PY, "-mattnprof.runtime.isolation", "spec.json"], "a capture process (attnprof.runtime.isolation)"),
    (f"{PY} -m attnprof.runtime.worker child cpu", "a capture process (attnprof.runtime.worker)"),
    ([PY, "-m", "snakemake", "report", "--cores", "1"], "Snakemake with jobs"),
    (["/opt/venv/bin/snakemake", "--cores", "2"], "Snakemake with jobs"),
    ([PY, "-m", "snakemake", "-n", "--cores", "1"], None),  # a dry run: a parse and a plan
    (["snakemake", "--lint", "--cores", "1"], None),
    # code that only names the module, a module of another name, a file named like Snakemake's: no start
    ([PY, "-c", "from attnprof.runtime.isolation import die_with_parent"], None),
    ([PY, "-m", "attnprof.runtime.workers_of_another_name"], None),
    (["cat", "snakemake.log"], None),
    ([], None),
])
def test_what_counts_as_a_slow_start(args, expected):
    assert slow_start(args) == expected


def test_a_quick_test_that_starts_a_capture_process_fails_naming_itself_and_the_fix_before_it_starts():
    with pytest.raises(pytest.fail.Exception) as failed:
        subprocess.Popen([PY, "-m", "attnprof.runtime.worker", "serve", "never", "cpu", "1"])
    message = str(failed.value)
    assert "test_tiers.py::test_a_quick_test_that_starts" in message and "attnprof.runtime.worker" in message
    assert "@pytest.mark.slow" in message


def test_a_quick_test_that_runs_snakemake_jobs_fails_and_other_commands_run():
    with pytest.raises(pytest.fail.Exception, match="starts Snakemake with jobs"):
        snakemake_cli.run(["report", "--cores", "1"])
    assert subprocess.run([PY, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout == "42\n"
