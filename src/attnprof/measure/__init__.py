"""The measure layer: forward builders, the float64 reference, capture phases, the environment record, calibration and hardware counters. Imports attnprof.model and attnprof.analysis."""
