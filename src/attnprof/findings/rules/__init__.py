"""The findings rules, one module per family; :data:`RULES` runs them in the report's order."""

from __future__ import annotations

from collections.abc import Callable

from attnprof.findings.data import RunData
from attnprof.findings.rules.beyond import rule_backward, rule_compile
from attnprof.findings.rules.kernels import rule_dispatch, rule_fusion, rule_occupancy
from attnprof.findings.rules.status import rule_correctness, rule_grad_correctness, rule_status, rule_trace_quality
from attnprof.findings.rules.timing import rule_cpu_cost, rule_fidelity, rule_speed
from attnprof.findings.rules.work import rule_extra_ops, rule_hidden_copy, rule_mask, rule_memset, rule_precision

RULES: tuple[Callable[[RunData], list[dict]], ...] = (
    rule_status, rule_trace_quality, rule_hidden_copy, rule_precision, rule_mask, rule_extra_ops, rule_fusion, rule_compile,
    rule_memset, rule_occupancy, rule_cpu_cost, rule_dispatch, rule_speed, rule_fidelity, rule_correctness, rule_grad_correctness,
    rule_backward,
)

#: The rules' names, as findings carry them (``rule``; rule_X emits rule 'X'): what expectations.yaml's
#: explained_by may name and findings.schema.json enumerates (tests/test_names.py keeps it in step).
RULE_NAMES = tuple(r.__name__.removeprefix("rule_") for r in RULES)
