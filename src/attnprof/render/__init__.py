"""The render layer: the report's context and the plots. Imports attnprof.model, attnprof.analysis and attnprof.findings."""
