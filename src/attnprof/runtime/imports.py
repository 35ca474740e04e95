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
import contextlib
import hashlib
import importlib.util
import json
import os
from functools import cache
from pathlib import Path

PACKAGE = "attnprof"
#: What each source imports, by the hash of its name, its text and the package's layout (:func:`_layout`): read
#: from and written to a cache file where :func:`import_closure` is given one, so that a Snakemake invocation reads
#: the imports of the sources it has seen before instead of parsing every module again (0.4-0.7 s of each
#: invocation's start; an edited or added module is a new key).
_KNOWN: dict[str, list[str]] = {}
#: The keys this process read or computed: what the cache file keeps (not every key it ever held).
_USED: set[str] = set()
#: This reader's own source and the Python that parses: a change of either is a new key for every source.
_READER = hashlib.sha256(Path(__file__).read_bytes() + repr(__import__("sys").version_info[:2]).encode()).hexdigest()


def _module_file(pkg_dir: Path, module: str) -> Path | None:
    """src/attnprof/... file of the dotted ``module`` (a package's ``__init__.py``), None if none."""
    path = pkg_dir.joinpath(*module.split(".")[1:])
    return next((p for p in (path / "__init__.py", path.with_suffix(".py")) if p.exists()), None)


@cache
def _layout(pkg_dir: Path) -> str:
    """The package's module files (relative paths, sorted), hashed: which ``from attnprof.x import y`` names a
    module depends on them."""
    files = sorted(str(p.relative_to(pkg_dir)) for p in pkg_dir.rglob("*.py"))
    return hashlib.sha256("\n".join(files).encode()).hexdigest()


@cache
def _imports(pkg_dir: Path, path: Path, module: str) -> frozenset[str]:
    """The attnprof modules (dotted, with every parent package) that the source at ``path`` imports;
    ``module`` is its own dotted name (relative imports resolve against it). Read from :data:`_KNOWN` when
    this text was read before in this package layout."""
    text = path.read_text()
    key = hashlib.sha256(f"{_READER}\0{_layout(pkg_dir)}\0{module}\0{text}".encode()).hexdigest()
    _USED.add(key)
    if key in _KNOWN:
        return frozenset(_KNOWN[key])
    result = _parse_imports(pkg_dir, path, module, text)
    _KNOWN[key] = sorted(result)
    return result


def named_imports(pkg_dir: Path, path: Path, module: str, text: str | None = None) -> set[str]:
    """The attnprof modules (dotted) that the source at ``path`` (module ``module``; ``text``: its source, else read)
    names in its imports, at module level or inside functions; the packages on the way, which Python runs too, left
    out (the package's import graph, tests/test_layers.py)."""
    tree = ast.parse(path.read_text() if text is None else text, filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            found.update(_from_imports(pkg_dir, package, node))
    return found


def _parse_imports(pkg_dir: Path, path: Path, module: str, text: str) -> frozenset[str]:
    """:func:`_imports` from the source ``text``, parsed: :func:`named_imports` with every parent package."""
    return frozenset(name.rsplit(".", up)[0] for name in named_imports(pkg_dir, path, module, text)
                     for up in range(name.count(".") + 1))


def _from_imports(pkg_dir: Path, package: str, node: ast.ImportFrom) -> set[str]:
    """The package's modules a ``from ... import`` in ``package`` imports: the module it names (a relative one resolved
    against ``package``) and each imported name that is a module of its own; none for another package's import."""
    try:
        target = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
    except ImportError:  # relative, above the top package or in a script (no package): not one of the package's
        return set()
    if target.split(".")[0] != PACKAGE:
        return set()
    return {target, *(f"{target}.{a.name}" for a in node.names if _module_file(pkg_dir, f"{target}.{a.name}"))}


@cache
def _load(cache_file: Path) -> None:
    """Add the entries of ``cache_file`` to :data:`_KNOWN` (once per file and process); a missing, unreadable or
    malformed file adds nothing (the sources are parsed instead)."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(cache_file.read_text())
        if isinstance(data, dict):
            _KNOWN.update({k: v for k, v in data.items() if isinstance(v, list) and all(isinstance(x, str) for x in v)})


def _save(cache_file: Path) -> None:
    """Write the entries this process used (:data:`_USED`) to ``cache_file`` atomically (a temporary file renamed
    over it: two invocations at once may lose each other's entries, never leave a torn file); a failure to write is
    no error (the next invocation parses again)."""
    tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.tmp")
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({k: _KNOWN[k] for k in sorted(_USED) if k in _KNOWN}))
        tmp.replace(cache_file)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def import_closure(script: str | Path, pkg_dir: str | Path, cache_file: str | Path | None = None) -> list[Path]:
    """The package module files (under ``pkg_dir``, the ``attnprof`` folder) that running ``script`` imports,
    directly or not, sorted. ``cache_file``: where what each source imports is kept between processes (keyed by
    its text, the package layout, this reader's source and the Python version: an entry made from other input is
    never read). Raises SyntaxError (naming the file) for a source that does not parse."""
    if cache_file is not None:
        _load(Path(cache_file))
    known = (len(_KNOWN), len(_USED))
    pkg_dir = Path(pkg_dir).resolve()
    seen: set[str] = set()
    todo = set(_imports(pkg_dir, Path(script).resolve(), "__main__"))
    while todo:  # what enters it was not seen yet
        name = todo.pop()
        seen.add(name)
        if (path := _module_file(pkg_dir, name)) is not None:
            todo |= _imports(pkg_dir, path, name) - seen
    if cache_file is not None and (len(_KNOWN), len(_USED)) != known:
        _save(Path(cache_file))
    return sorted(p for name in seen if (p := _module_file(pkg_dir, name)) is not None)
