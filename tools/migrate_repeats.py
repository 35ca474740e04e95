"""Move a result set made before repeats (captures/<shape>/<variant>/{trace.json.gz,status.json}) into the
repeat layout (captures/<shape>/<variant>/r1/...), so that it re-renders and compares with this version.

    python tools/migrate_repeats.py results/<run> [...]

Its env.json records no `repeats`: it reads as a result set of one repeat (no between-run interval). Tables,
plots and the report are remade from the traces by the next run (snakemake --profile workflow/profiles/render
results/<run>/report.pdf). Moves with git mv where the folder is tracked by git, else with a rename."""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from attnprof.model.names import CAPTURE_FILES, repeat_dir  # noqa: E402


def migrate(run_dir: Path) -> int:
    """Move every capture file of ``run_dir`` one level down into r1/; returns how many were moved. Raises
    FileExistsError naming the file when its r1/ copy exists already (a half-migrated result set)."""
    moved = 0
    for status in sorted(run_dir.glob(f"captures/*/*/{CAPTURE_FILES['status']}")):
        target = status.parent / repeat_dir(1)
        for name in CAPTURE_FILES.values():
            src = status.parent / name
            if not src.exists():
                continue
            if (target / name).exists():
                raise FileExistsError(f"{target / name} exists already: {src} is not moved")
            target.mkdir(exist_ok=True)
            tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(src)], capture_output=True).returncode == 0
            if tracked:
                subprocess.run(["git", "mv", str(src), str(target / name)], check=True)
            else:
                src.rename(target / name)
            moved += 1
    return moved


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        print(f"{arg}: {migrate(Path(arg))} capture files moved into {repeat_dir(1)}/")
