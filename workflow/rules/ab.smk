# An A/B run (config environments): every environment's report and their paired comparison
# (also what the default target `report` builds for such a config).
rule ab:
    input:
        ab_targets,
