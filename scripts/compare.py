"""Snakemake script: compare.json (rule compare_json). Logic: attnprof.analysis.compare.

Each result set is read and checked by attnprof.analysis.compare.load_result_set: a file that is missing, unchecked
(no SHA-256 sidecar) or damaged refuses the compare, naming the file and the fix."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    import sys
    from attnprof.analysis.compare import compare_runs, load_result_set, nothing_in_common
    from attnprof.findings.kernel_names import kernel_class
    from attnprof.runtime.integrity import file_problem

    runs = []
    for name in sm.params.runs:
        files = {k[len(name) + 1:]: sm.input[k] for k in sm.input.keys() if k.startswith(f"{name}/")}
        runs.append(load_result_set(name, files, file_problem))  # each file against its sidecar
        if not runs[-1]["recipes"]:
            print(f"{name}: no recipe tables (result set copied without its traces and tables, or made before "
                  "recipe.csv existed): no recipe diff", file=log)
    result = compare_runs(runs, sm.params.noise_floor, sm.params.confidence, sm.params.noise_floor_host, kernel_class)
    with open(sm.output[0], "w") as fh:
        json.dump(result, fh, indent=2, default=str)
    for pair in result["pairs"]:
        print(f"{pair['b']} vs {pair['a']}: {len(pair['rows'])} rows ({pair['counts']}), "
              f"{len(pair['env_diff'])} environment differences", file=log)
    # a pair with nothing in common is said on the terminal too; a compare where no pair has any fails, naming them
    empty = [words for pair in result["pairs"] if (words := nothing_in_common(pair))]
    for words in empty:
        print(f"attnprof compare: {words}", file=log)
        print(f"attnprof compare: {words}", file=sys.__stderr__)
    if empty and len(empty) == len(result["pairs"]):
        sys.exit("attnprof compare: nothing was compared: " + " / ".join(empty))
