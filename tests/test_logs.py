"""A Snakemake script's log holds everything it printed, its warnings and, when it fails, the traceback."""
import subprocess
import sys

SCRIPT = """
import warnings
from attnprof.runtime.logs import script_log
with script_log(sys.argv[1]) as log:
    import json  # imports inside: an ImportError lands in the log too
    print("to stdout")
    print("to stderr", file=sys.stderr)
    warnings.warn("a warning for the log")
    json.loads("{not json")
"""


def test_failed_script_leaves_output_warning_and_traceback_in_its_log(tmp_path):
    log = tmp_path / "job.log"
    proc = subprocess.run([sys.executable, "-c", "import sys" + SCRIPT, str(log)], capture_output=True, text=True)
    assert proc.returncode == 1
    text = log.read_text()
    for expected in ("to stdout", "to stderr", "UserWarning: a warning for the log", "Traceback (most recent call last)",
                     "json.decoder.JSONDecodeError"):
        assert expected in text, expected
    assert "JSONDecodeError" in proc.stderr  # and Snakemake's terminal still shows why


def test_deliberate_exit_message_is_logged_without_a_traceback(tmp_path):
    log = tmp_path / "job.log"
    code = ("import sys; from attnprof.runtime.logs import script_log\n"
            "with script_log(sys.argv[1]):\n    raise SystemExit('attnprof: capture interrupted')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert log.read_text().strip() == "attnprof: capture interrupted"
