"""Snakemake script: history.json and history.csv (rule history_json). Logic: attnprof.analysis.history, every link
judged by attnprof.analysis.compare.compare_pair.

Each result set is read and checked by attnprof.analysis.compare.load_result_set: a file that is missing, unchecked
(no SHA-256 sidecar) or damaged refuses the history, naming the file and the fix."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from functools import partial
    from attnprof.analysis.compare import check_one_device, compare_pair, load_result_set
    from attnprof.analysis.history import history, history_table
    from attnprof.findings.kernel_names import kernel_class
    from attnprof.runtime.integrity import file_problem

    runs = []
    for name in sm.params.runs:
        files = {k[len(name) + 1:]: sm.input[k] for k in sm.input.keys() if k.startswith(f"{name}/")}
        runs.append(load_result_set(name, files, file_problem))
        print(f"read {name}", file=log)
    check_one_device(runs)
    judge = partial(compare_pair, noise_floor=sm.params.noise_floor, confidence=sm.params.confidence,
                    noise_floor_host=sm.params.noise_floor_host, classify=kernel_class)
    doc = history(runs, judge)
    doc.update(noise_floor=sm.params.noise_floor, noise_floor_host=sm.params.noise_floor_host,
               confidence=sm.params.confidence)
    with open(sm.output.json, "w") as fh:
        json.dump(doc, fh, indent=1, default=str)
    history_table(doc).to_csv(sm.output.csv, index=False)
    for cell in doc["cells"]:
        for e in cell["events"]:
            print(f"{cell['variant']} {cell['shape_key']}: {e['kind']} {e['direction']} builds {e['start']}-{e['end']} "
                  f"({e.get('state')})", file=log)
    print(f"{len(doc['links'])} links, {len(doc['extra_pairs'])} end-build comparisons", file=log)
