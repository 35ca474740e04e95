"""The package's layers import one way (docs/architecture.md): a module imports only modules of its own layer
and of the layers below it, lazy imports inside functions included, no module imports itself through others (no
import circle), and the analysis layer never imports torch.

The imports are read from the source with the same reader the rerun triggers use
(attnprof.runtime.imports), so a test that passes here also means the triggers see every edge."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

from attnprof.runtime.imports import import_closure, named_imports

PKG = Path(__file__).resolve().parents[1] / "src" / "attnprof"

#: layer -> the layers it may import (besides itself)
ALLOWED = {
    "model": set(),
    "analysis": {"model"},
    "measure": {"model", "analysis"},
    "findings": {"model", "analysis"},
    "render": {"model", "analysis", "findings"},
    "runtime": {"model", "analysis", "measure"},
}


def _layer_of(path: Path) -> str:
    return path.relative_to(PKG).parts[0]


def _modules():
    return sorted(p for p in PKG.rglob("*.py") if p.relative_to(PKG).parts[0] in ALLOWED)


def test_every_module_lives_in_a_layer():
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"modules outside a layer folder: {loose}"
    assert {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(ALLOWED)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_go_one_way(path):
    layer = _layer_of(path)
    # the closure of one module: everything it runs, through other modules' imports too
    reached = {_layer_of(p) for p in import_closure(path, PKG) if p.parent != PKG} - {layer}
    assert reached <= ALLOWED[layer], (
        f"{path.relative_to(PKG)} ({layer}) reaches {sorted(reached - ALLOWED[layer])}; allowed: {sorted(ALLOWED[layer])}")


def _import_graph(pkg: Path) -> dict[str, set[str]]:
    """{module: the package's modules it names in its imports, lazy ones included} over every module under ``pkg``
    (dotted names; a package is its ``__init__``). The packages Python runs on the way are no edges: a package's
    ``__init__`` that gathers its modules' names is no circle, a module that imports the package back is."""
    modules = {".".join(("attnprof", *p.relative_to(pkg).with_suffix("").parts)).removesuffix(".__init__"): p
               for p in pkg.rglob("*.py")}
    return {m: (named_imports(pkg, p, m) & set(modules)) - {m} for m, p in modules.items()}


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (its modules in order, the first repeated at the end), [] when there is none."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_no_import_circle():
    """No module reaches itself through the modules it imports, lazy imports included: a circle hides which module
    is below which, and a lazy import that closes one only defers the failure to the first call."""
    assert _circle(_import_graph(PKG)) == []


def test_the_circle_check_finds_a_lazy_circle(tmp_path):
    """The checker finds a circle closed by a lazy import (lock -> capture inside a function, capture -> lock at the
    top, as measure/lock.py and measure/capture.py once did), and none once the shared name moves below both."""
    pkg = tmp_path / "attnprof"
    (pkg / "measure").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "measure" / "__init__.py"):
        init.write_text("")
    (pkg / "measure" / "capture.py").write_text("from attnprof.measure.lock import device_lock\ndef log(m): ...\n")
    (pkg / "measure" / "lock.py").write_text("def device_lock():\n    from attnprof.measure.capture import log\n")
    assert sorted(set(_circle(_import_graph(pkg)))) == ["attnprof.measure.capture", "attnprof.measure.lock"]
    (pkg / "measure" / "progress.py").write_text("def log(m): ...\n")
    (pkg / "measure" / "capture.py").write_text("from attnprof.measure.lock import device_lock\n"
                                                "from attnprof.measure.progress import log\n")
    (pkg / "measure" / "lock.py").write_text("def device_lock():\n    from attnprof.measure.progress import log\n")
    assert _circle(_import_graph(pkg)) == []


def _third_party(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer,banned", [("analysis", "torch"), ("model", "torch"), ("model", "pandas"),
                                          ("findings", "torch"), ("render", "torch")])
def test_layer_never_imports(layer, banned):
    offenders = [str(p.relative_to(PKG)) for p in (PKG / layer).rglob("*.py") if banned in _third_party(p)]
    assert offenders == [], f"{layer} modules import {banned}: {offenders}"


def test_the_rule_is_checked_on_a_known_violation(tmp_path):
    """The checker finds an upward import (a model module importing render), lazily inside a function."""
    pkg = tmp_path / "attnprof"
    for layer in ("model", "render"):
        (pkg / layer).mkdir(parents=True)
        (pkg / layer / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "render" / "report.py").write_text("X = 1\n")
    bad = pkg / "model" / "names.py"
    bad.write_text("def f():\n    from attnprof.render.report import X\n    return X\n")
    reached = {p.relative_to(pkg).parts[0] for p in import_closure(bad, pkg) if p.parent != pkg}
    assert "render" in reached


def _private_imports(path: Path) -> list[str]:
    """``module.name`` for each name starting with an underscore that ``path`` imports from another attnprof module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attnprof"):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_no_module_imports_another_modules_private_names():
    """A name with a leading underscore belongs to its module: code that another module needs gets a public name
    (the capture supervision's pieces, the capture's inputs, the backward's note wording)."""
    offenders = {str(p.relative_to(PKG)): _private_imports(p) for p in _modules() if _private_imports(p)}
    offenders.update({p.name: _private_imports(p) for p in sorted((PKG.parents[1] / "scripts").glob("*.py"))
                      if _private_imports(p)})
    assert offenders == {}
