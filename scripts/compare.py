"""Snakemake script: compare.json (rule compare_json). Logic: attnprof.analysis.compare."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path
    import pandas as pd
    from attnprof.analysis.compare import compare_runs, device_of
    from attnprof.analysis.control import read_control_table
    from attnprof.analysis.recipe import recipe_table_problem
    from attnprof.analysis.records import load_record
    from attnprof.analysis.tables import concat_tables
    from attnprof.findings.kernel_names import kernel_class
    from attnprof.model.names import REPEAT_PREFIX

    def recipes(name: str) -> tuple[dict, list[str]]:
        """({(variant, shape_key, pass): [recipe table per repeat, repeat 1 first]}, problems) of result set ``name``:
        {} when its recipe tables are not inputs (a result set copied without its traces and tables); a damaged
        table's (variant, shape, pass) is left out, and problems names it."""
        out: dict = {}
        damaged: dict = {}
        for table, pass_ in (("recipe", "forward"), ("recipe_backward", "backward")):
            if f"{name}/{table}" not in sm.input.keys():
                continue
            for p in sm.input[f"{name}/{table}"]:
                *_, shape, variant, rep, _file = Path(p).parts  # .../tables/<shape>/<variant>/r<k>/<table>.csv
                try:
                    frame = pd.read_csv(p)
                except pd.errors.EmptyDataError:
                    frame, why = None, "empty file"
                else:
                    why = recipe_table_problem(frame)
                if why:  # never diff a damaged table: its (variant, shape, pass) gets no recipe diff, and the pair says so
                    damaged[(variant, shape, pass_)] = f"{p}: {why}"
                out.setdefault((variant, shape, pass_), {})[int(rep[len(REPEAT_PREFIX):])] = frame
        problems = [f"recipe table damaged, {w}: no recipe diff of {k[0]} {k[2]} at {k[1]}" for k, w in damaged.items()]
        return {k: [v[r] for r in sorted(v)] for k, v in out.items()
                if k not in damaged and any(t is not None and len(t) for t in v.values())}, problems

    runs = []
    for name in sm.params.runs:
        ops = [pd.read_csv(p) for p in sm.input[f"{name}/ops"]]
        runs.append({
            "name": name,
            "summary": pd.read_csv(sm.input[f"{name}/summary"]),
            "kernels": pd.read_csv(sm.input[f"{name}/kernels"]),
            "ops": concat_tables(ops),
            "env": load_record(sm.input[f"{name}/env"]),
            "findings": load_record(sm.input[f"{name}/findings"], ("shapes",)),
            # each repeat's medians (the between-run spread the verdicts use); absent in a result set made before repeats
            "repeats": pd.read_csv(sm.input[f"{name}/repeats"]) if Path(sm.input[f"{name}/repeats"]).exists() else None,
        })
        # each forward's work in order, per repeat (attnprof.analysis.recipe): the recipe diff
        runs[-1]["recipes"], runs[-1]["recipe_problems"] = recipes(name)
        # the profiler's self-check (attnprof.analysis.control), read without raising (a damaged file is named);
        # absent in a result set made before the control
        if f"{name}/control" in sm.input.keys():
            runs[-1]["control_check"] = read_control_table(sm.input[f"{name}/control"], device_of(runs[-1]))
        for line in runs[-1]["recipe_problems"]:
            print(f"{name}: {line}", file=log)
        if not runs[-1]["recipes"]:
            print(f"{name}: no recipe tables (result set copied without its traces and tables, or made before "
                  "recipe.csv existed): no recipe diff", file=log)
    result = compare_runs(runs, sm.params.noise_floor, sm.params.confidence, sm.params.noise_floor_host, kernel_class)
    with open(sm.output[0], "w") as fh:
        json.dump(result, fh, indent=2, default=str)
    for pair in result["pairs"]:
        print(f"{pair['b']} vs {pair['a']}: {len(pair['rows'])} rows ({pair['counts']}), "
              f"{len(pair['env_diff'])} environment differences", file=log)
