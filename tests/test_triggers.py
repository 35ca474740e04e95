"""Rerun triggers follow the real imports (attnprof.runtime.imports): every rule declares the import closure of its own
script, and the closure holds every package module the script's imports actually load (checked in a fresh
interpreter: an independent path, Python's own import system)."""
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnprof.runtime.imports import import_closure

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "attnprof"
SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))


def rule_blocks() -> dict[str, str]:
    text = {}
    for path in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]:
        for name, body in re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", path.read_text(), flags=re.M | re.S):
            text[name] = body
    return text


def test_every_rule_that_runs_a_script_declares_that_scripts_imports():
    checked = 0
    for name, body in rule_blocks().items():
        script = re.search(r'script=script_file\("(\w+)"\)', body) or re.search(r'"\.\./\.\./scripts/(\w+)\.py"', body)
        if not script:
            continue
        assert re.search(rf'code\("{script.group(1)}"', body), f"rule {name} runs {script.group(1)}.py but does not declare its imports"
        checked += 1
    assert checked >= 15


#: Run in one fresh interpreter: the libraries preloaded (they are not the package), then per script a forked child
#: that runs the script's import statements and prints the attnprof modules Python loaded.
PROBE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import numpy, pandas, torch, matplotlib, scipy.stats, jinja2, yaml, msgspec  # noqa: F401  (not attnprof)
for script, stmts in json.loads(sys.stdin.read()).items():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        exec(compile(stmts, script, "exec"), {"__name__": "probe"})
        files = sorted(getattr(m, "__file__", None) or "" for k, m in list(sys.modules.items())
                       if k == "attnprof" or k.startswith("attnprof."))
        os.write(w, json.dumps(files).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, code = os.waitpid(pid, 0)
    print(json.dumps({"script": script, "files": json.loads(data or b"[]"), "status": code}))
"""


@pytest.mark.slow
def test_the_closure_holds_every_module_each_scripts_imports_load():
    """Python's own import system: each script's import statements (those inside its log block included) run in a
    fresh child, and the attnprof modules it loaded must all be in the script's closure."""
    stmts = {}
    for script in SCRIPTS:
        tree = ast.parse(script.read_text())
        stmts[str(script)] = "\n".join(ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
    out = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "src")], input=json.dumps(stmts), capture_output=True,
                         text=True, timeout=300, check=True)
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(SCRIPTS) >= 14
    for r in results:
        script = Path(r["script"])
        loaded = {Path(f).resolve() for f in r["files"] if f}
        closure = {p.resolve() for p in import_closure(script, PKG)}
        assert r["status"] == 0 and loaded, script.name
        assert loaded <= closure, (script.name, sorted(str(p.relative_to(PKG)) for p in loaded - closure))


def test_relative_and_lazy_imports_are_followed(tmp_path):
    pkg = tmp_path / "attnprof"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("from . import c\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..d import g\n    return g\n")
    (pkg / "sub" / "c.py").write_text("")
    (pkg / "d.py").write_text("import json\n")
    (pkg / "unused.py").write_text("")
    script = tmp_path / "s.py"
    script.write_text("from attnprof.a import x\n")
    got = {str(p.relative_to(pkg)) for p in import_closure(script, pkg)}
    assert got == {"__init__.py", "a.py", "sub/__init__.py", "sub/b.py", "sub/c.py", "d.py"}


def _new_process():
    """What a new Snakemake process starts from: no import read yet, no cache file loaded."""
    from attnprof.runtime import imports

    imports._imports.cache_clear()
    imports._layout.cache_clear()
    imports._KNOWN.clear()
    imports._load.cache_clear()
    imports._USED.clear()


def test_the_imports_kept_between_invocations_never_hide_an_edit_or_a_new_module(tmp_path):
    """The cache file (.snakemake/attnprof/imports.json) keys each source by its text and the package layout: after
    an edit, or a new module that an unchanged ``from attnprof import x`` now names, the closure is read again; a
    damaged file is parsed around. Each closure is checked against one computed without a cache."""
    pkg = tmp_path / "attnprof"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from attnprof import b\n")
    (pkg / "b.py").write_text("")
    (pkg / "c.py").write_text("")
    script = tmp_path / "s.py"
    script.write_text("import attnprof.a\nfrom attnprof import helpers\n")  # helpers: a name, not yet a module
    cache = tmp_path / ".snakemake" / "attnprof" / "imports.json"

    def closure(with_cache: bool) -> set[str]:
        _new_process()
        return {str(p.relative_to(pkg)) for p in import_closure(script, pkg, cache if with_cache else None)}

    assert closure(True) == closure(False) == {"__init__.py", "a.py", "b.py"} and cache.exists()
    assert closure(True) == {"__init__.py", "a.py", "b.py"}  # read from the file this time
    (pkg / "a.py").write_text("from attnprof import b\nfrom . import c\n")  # an edit
    assert closure(True) == closure(False) == {"__init__.py", "a.py", "b.py", "c.py"}
    (pkg / "helpers.py").write_text("")  # a new module the unchanged script now imports
    assert closure(True) == closure(False) == {"__init__.py", "a.py", "b.py", "c.py", "helpers.py"}
    # the file keeps what the last invocation read (the script and its 5 modules), not every version ever seen
    assert len(json.loads(cache.read_text())) == 6
    for damaged in ("{not json", '{"k": 3}', "[]", ""):
        cache.write_text(damaged)
        assert closure(True) == closure(False)
    _new_process()


#: The modules the capture process runs, listed by hand from its code (scripts/capture.py -> runtime.isolation /
#: runtime.worker -> measure.capture, whose self-check reads the trace back with the completeness rule alone):
#: an edit of any of these recaptures, an edit of any other module recaptures nothing. variants.py and
#: measure/forwards.py reach the capture through the per-variant fingerprint (a param), not as files.
CAPTURE_RUNS = {
    "__init__.py", "analysis/__init__.py", "analysis/completeness.py", "analysis/trace.py", "measure/__init__.py",
    "measure/capture.py", "measure/env.py", "measure/gpus.py", "measure/lock.py", "measure/progress.py",
    "model/__init__.py", "model/fmt.py", "model/gpus.py", "model/names.py", "runtime/__init__.py", "runtime/isolation.py", "runtime/logs.py",
    "runtime/worker.py",
}
FINGERPRINTED = {"model/variants.py", "measure/forwards.py"}


def _capture_inputs() -> set[str]:
    """Rule capture's code inputs, as the workflow computes them (workflow/rules/common.smk code())."""
    excluded = set(re.search(r'code\("capture", exclude=\(([^)]*)\)\)', (ROOT / "workflow/rules/capture.smk").read_text())
                   .group(1).replace('"', "").replace(" ", "").strip(",").split(","))
    assert excluded == FINGERPRINTED
    closure = {str(p.resolve().relative_to(PKG.resolve())) for p in import_closure(ROOT / "scripts/capture.py", PKG)}
    return closure - excluded


@pytest.mark.parametrize("module", sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")))
def test_an_edit_recaptures_only_where_the_capture_runs_the_code(module):
    """Module by module: an edit reruns rule capture exactly when the capture process runs that module."""
    assert (module in _capture_inputs()) == (module in CAPTURE_RUNS), module


def test_the_statistics_the_columns_and_the_report_recapture_nothing():
    inputs = _capture_inputs()
    for module in ("analysis/stats.py", "analysis/tables.py", "analysis/backward.py", "model/columns.py",
                   "render/report.py", "findings/rules/__init__.py"):
        assert (PKG / module).exists() and module not in inputs, module
    assert len(inputs) == len(CAPTURE_RUNS) == 18  # of 58 modules (with measure/progress.py, the capture log, issue 42)
