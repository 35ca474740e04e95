"""Rerun triggers follow the real imports (attnprof.imports): every rule declares the import closure of its own
script, and the closure holds every package module the script's imports actually load (checked in a fresh
interpreter: an independent path, Python's own import system)."""
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnprof.imports import import_closure

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


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_the_closure_holds_every_module_the_scripts_imports_load(script):
    """Python's own import system: run the script's import statements (the ones inside its log block included) in
    a fresh interpreter and list the attnprof modules loaded; each one's file must be in the closure."""
    tree = ast.parse(script.read_text())
    stmts = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    code = "\n".join(["import sys, json", f"sys.path.insert(0, {str(ROOT / 'src')!r})", *stmts,
                      "print(json.dumps(sorted(getattr(m, '__file__', None) or '' for k, m in sys.modules.items()"
                      " if k == 'attnprof' or k.startswith('attnprof.'))))"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = {Path(f).resolve() for f in json.loads(out.stdout.strip().splitlines()[-1]) if f}
    closure = {p.resolve() for p in import_closure(script, PKG)}
    assert loaded, script
    assert loaded <= closure, sorted(str(p.relative_to(PKG)) for p in loaded - closure)


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
