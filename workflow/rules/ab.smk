# An A/B run (config environments): every environment's report and their paired comparison
# (also what the default target `report` builds for such a config).
rule ab:
    input:
        ab_targets,


# Rounds only where undecided (config top_up; attnprof.analysis.verdict): after the base rounds, judge every row
# once; a row left undetermined gets rounds added (capture's input functions read the record this writes).
if PLAN.top_up_runs():

    checkpoint top_up:
        input:
            unpack(lambda wc: STATE.top_up_inputs()),
            code("top_up"),
            script=script_file("top_up"),
        output:
            [run_file("top_up", run) for run in PLAN.top_up_runs()],
        log:
            L.compare_log("top_up", PLAN.ab_compare),
        params:
            runs=list(PLAN.top_up_runs()),
            base=PLAN.grid.repeats,
            rounds=PLAN.top_up["rounds"],
            time_s=PLAN.top_up["time_s"],
            noise_floor=config["compare"]["noise_floor"],
            noise_floor_host=config["compare"].get("noise_floor_host", 0.20),
            confidence=config["compare"].get("confidence", 0.95),
        run:
            run_job(locals())
