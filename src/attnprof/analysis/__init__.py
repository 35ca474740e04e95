"""The analysis layer: trace readers, per-pass attribution, tables, statistics, record checks and the comparison. No torch; imports only attnprof.model."""
