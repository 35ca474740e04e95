"""Which package modules a stage's script runs: the closure of its imports, read from the source.

Snakemake reruns a ``run:`` rule when one of its inputs changed; the rules declare the package modules their
script runs as inputs (workflow/rules/common.smk ``code_of``). A hand-kept list drifts (a capture whose
completeness is judged by ``tables.py`` did not declare it, so a changed rule never re-judged old captures);
this module computes the list instead, so that the triggers follow the real imports by construction.

The closure follows what Python executes: ``import attnprof.x``, ``from attnprof.x import y`` and the package's
relative imports, at module level or inside functions (a lazy import runs too), and every package
``__init__.py`` on the way (importing ``attnprof.findings.kernel_names`` runs ``findings/__init__.py`` and what
it imports). Only the ``attnprof`` package is followed; other libraries are the software environment's.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = "attnprof"


def _module_file(pkg_dir: Path, module: str) -> Path | None:
    """src/attnprof/... file of the dotted ``module`` (a package's ``__init__.py``), None if none."""
    path = pkg_dir.joinpath(*module.split(".")[1:])
    if (path / "__init__.py").exists():
        return path / "__init__.py"
    if path.with_suffix(".py").exists():
        return path.with_suffix(".py")
    return None


@cache
def _imports(pkg_dir: Path, path: Path, module: str) -> frozenset[str]:
    """The attnprof modules (dotted, with every parent package) that the source at ``path`` imports;
    ``module`` is its own dotted name (relative imports resolve against it)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(parts + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names if _module_file(pkg_dir, f"{target}.{a.name}"))
    with_parents = set()
    for name in found:
        parts = name.split(".")
        with_parents.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(with_parents)


def import_closure(script: str | Path, pkg_dir: str | Path) -> list[Path]:
    """The package module files (under ``pkg_dir``, the ``attnprof`` folder) that running ``script`` imports,
    directly or not, sorted. Raises SyntaxError (naming the file) for a source that does not parse."""
    pkg_dir = Path(pkg_dir).resolve()
    seen: set[str] = set()
    todo = set(_imports(pkg_dir, Path(script).resolve(), "__main__"))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if (path := _module_file(pkg_dir, name)) is not None:
            todo |= _imports(pkg_dir, path, name) - seen
    return sorted(p for name in seen if (p := _module_file(pkg_dir, name)) is not None)
