"""The light stages' runner (attnprof.jobs): a job runs its script in a process of its own, forked
from the preloaded fork server, and a failure or a kill fails that job alone with a message that
names the script, the cause and the log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

SNAKEFILE = f"""
import os, sys
sys.path.insert(0, {str(SRC)!r})
from attnprof.jobs import run_script
if workflow.is_main_process:
    Path("snakemake.pid").write_text(str(os.getpid()))

rule all:
    input: expand("out/{{name}}.txt", name=["ok_a", "ok_b", "fails", "killed"])

rule job:
    input: script="{{name}}.py"
    output: "out/{{name}}.txt"
    log: "logs/{{name}}.log"
    params: greeting="hello <&>"
    run: run_script(locals(), workflow.is_main_process)
"""

OK = """
import os
from attnprof.logs import script_log
with script_log(snakemake.log[0]):
    print("running", snakemake.rule, snakemake.wildcards.name)
    open(snakemake.output[0], "w").write(f"{os.getpid()} {snakemake.params.greeting} {snakemake.input.script}")
"""
FAILS = """
from attnprof.logs import script_log
with script_log(snakemake.log[0]):
    raise ValueError("a corrupt table: row 3")
"""
KILLED = """
import os, signal
os.kill(os.getpid(), signal.SIGKILL)
"""


def run(tmp_path: Path, *extra: str, targets: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    for name, text in {"ok_a": OK, "ok_b": OK, "fails": FAILS, "killed": KILLED}.items():
        (tmp_path / f"{name}.py").write_text(text)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--keep-going", "--directory", str(tmp_path),
                           "--snakefile", str(tmp_path / "Snakefile"), *extra, *targets],
                          capture_output=True, text=True, env=env, timeout=300)


def test_each_job_runs_in_its_own_process_and_a_failure_fails_that_job_alone(tmp_path):
    proc = run(tmp_path, "--force-use-threads")
    assert proc.returncode != 0  # two of the four jobs fail
    snakemake_pid = int((tmp_path / "snakemake.pid").read_text())
    pids = set()
    for name in ("ok_a", "ok_b"):
        pids.add(int((tmp_path / "out" / f"{name}.txt").read_text().split(" ")[0]))
        assert f"running job {name}" in (tmp_path / "logs" / f"{name}.log").read_text()
    # params, input and wildcards reach the script as with script:
    assert (tmp_path / "out" / "ok_a.txt").read_text().endswith("hello <&> ok_a.py")
    assert len(pids) == 2 and snakemake_pid not in pids
    # the failed and the killed job: no output, a message naming script, cause and log
    assert not (tmp_path / "out" / "fails.txt").exists() and not (tmp_path / "out" / "killed.txt").exists()
    assert "fails.py exited with status 1; see logs/fails.log" in proc.stderr
    assert "killed.py was ended by SIGKILL; see logs/killed.log" in proc.stderr
    assert "ValueError: a corrupt table: row 3" in (tmp_path / "logs" / "fails.log").read_text()


def test_without_threads_the_spawned_job_process_runs_the_script_itself(tmp_path):
    # no --force-use-threads: Snakemake spawns a process per run: job, which runs the script in place
    proc = run(tmp_path, "--workflow-profile", "none", targets=("out/ok_a.txt", "out/fails.txt"))
    pid = int((tmp_path / "out" / "ok_a.txt").read_text().split(" ")[0])
    assert pid != int((tmp_path / "snakemake.pid").read_text())
    assert "ValueError: a corrupt table: row 3" in (tmp_path / "logs" / "fails.log").read_text()
    assert not (tmp_path / "out" / "fails.txt").exists() and proc.returncode != 0
