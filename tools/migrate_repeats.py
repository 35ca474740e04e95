"""Move a result set made before repeats (captures/<shape>/<variant>/{trace.json.gz,status.json}) into the
repeat layout (captures/<shape>/<variant>/r1/...), so that it re-renders and compares with this version.

    python tools/migrate_repeats.py results/<run> [...]

Its env.json records no `repeats`: it reads as a result set of one repeat (no between-run interval). Tables,
plots and the report are remade from the traces by the next run (snakemake --profile workflow/profiles/render
results/<run>/report.pdf). Moves with git mv where the folder is tracked by git, else with a rename.

Exits 1, moving nothing, for a path that is not a result set's folder (missing, a file, the captures folder itself);
names every capture file of the old layout it leaves behind (a trace without its status.json: not a capture; a file
whose r1/ copy exists already) and exits 1 then too, after moving the rest."""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from attnprof.model.names import CAPTURE_FILES, repeat_dir  # noqa: E402


def result_set_problem(run_dir: Path) -> str | None:
    """Why ``run_dir`` is not a result set's folder this tool can migrate, with the fix; None when it is."""
    if not run_dir.exists():
        return f"{run_dir}: no such folder; give a result set's folder, e.g. results/<run>"
    if not run_dir.is_dir():
        return f"{run_dir}: a file, not a result set's folder; give the folder that holds it, e.g. results/<run>"
    if not (run_dir / "captures").is_dir():
        hint = f" (give {run_dir.parent}, the folder above it)" if run_dir.name == "captures" else ""
        return f"{run_dir}: not a result set's folder: it holds no captures/ folder{hint}"
    return None


def left_behind(run_dir: Path) -> list[Path]:
    """The capture files of the old layout (captures/<shape>/<variant>/<file>) still there: a trace or status
    without its partner, or any left after a move."""
    return sorted(p for name in CAPTURE_FILES.values() for p in run_dir.glob(f"captures/*/*/{name}"))


def migrate(run_dir: Path) -> int:
    """Move every capture file of ``run_dir`` one level down into r1/; returns how many were moved. A file whose r1/
    copy exists already (a half-migrated result set) stays where it is (:func:`left_behind` names it)."""
    moved = 0
    for status in sorted(run_dir.glob(f"captures/*/*/{CAPTURE_FILES['status']}")):
        target = status.parent / repeat_dir(1)
        for name in CAPTURE_FILES.values():
            src = status.parent / name
            if not src.exists() or (target / name).exists():
                continue
            target.mkdir(exist_ok=True)
            tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(src)], capture_output=True).returncode == 0
            if tracked:
                subprocess.run(["git", "mv", str(src), str(target / name)], check=True)
            else:
                src.rename(target / name)
            moved += 1
    return moved


def main(args: list[str]) -> int:
    """Migrate each result set of ``args``; 0 when every one is a result set and nothing of the old layout is left."""
    problems = [p for p in (result_set_problem(Path(a)) for a in args) if p]
    if problems:
        print("\n".join(problems) + "\nnothing moved", file=sys.stderr)
        return 1
    status = 0
    for arg in args:
        print(f"{arg}: {migrate(Path(arg))} capture files moved into {repeat_dir(1)}/")
        status = max(status, say_left_behind(Path(arg)))
    return status


def say_left_behind(run_dir: Path) -> int:
    """Name on stderr every capture file :func:`left_behind` finds in ``run_dir``; 1 when there is one, else 0."""
    paths = left_behind(run_dir)
    for path in paths:
        print(f"{path}: left behind, not moved: {_why_left(path)}", file=sys.stderr)
    return 1 if paths else 0


def _why_left(path: Path) -> str:
    copy = path.parent / repeat_dir(1) / path.name
    if copy.exists():
        return f"{copy} exists already (half migrated before?): compare the two and remove one"
    partner = "status.json" if path.name == CAPTURE_FILES["trace"] else CAPTURE_FILES["trace"]
    return (f"no {partner} beside it, so it is no capture of the old layout (restore its {partner} and run this "
            "again, or remove it)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
