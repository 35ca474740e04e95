"""References: every number a finding states says where it came from.

A reference is a dict with ``value`` and ``unit`` (as in the table: ``ms`` in summary.csv, ``us``
in kernels.csv, ``%``, ``calls/forward``, or '' for counts) and either the cell it was read from
(``table``/``shape_key``/``variant``/``column``, plus ``kernel``, ``api`` or ``op`` for the
per-variant tables) or a ``formula`` (ratio, sum, difference, argmin) over other references in
``inputs``. :func:`lookup` re-reads a reference from the tables and :func:`iter_numbers` yields
every reference of a findings.json document, so a test can prove that the report states nothing
the tables do not hold (schema: ``workflow/schemas/findings.schema.json``).
"""

from __future__ import annotations

import pandas as pd

from attnprof.model.fmt import format_number, format_range
from attnprof.model.names import CAPTURE_TABLES, RUN_FILES
from attnprof.findings.data import RunData
from attnprof.findings.ranking import clean

#: The tables a reference may name (its ``table``; findings.schema.json enumerates them): the run's
#: summary and kernel tables, and the per-capture launch and op tables (absent rows count 0).
SUMMARY, KERNELS = RUN_FILES["summary"], RUN_FILES["kernels"]
LAUNCHES, OPS = CAPTURE_TABLES["launches"], CAPTURE_TABLES["ops"]
#: The backward's kernel table (per capture, config passes; attnprof.analysis.backward).
KERNELS_BACKWARD = CAPTURE_TABLES["kernels_backward"]
TABLES = (SUMMARY, KERNELS, LAUNCHES, OPS, KERNELS_BACKWARD)


def ref_summary(d: RunData, variant: str, column: str, unit: str = "") -> dict:
    """Reference to summary.csv[variant, column]."""
    row = d.row(variant)
    # .get: a summary written before the column existed reads as no value
    return {"value": clean(row.get(column)) if row is not None else None, "unit": unit, "table": SUMMARY,
            "shape_key": d.shape_key, "variant": variant, "column": column}


def ref_kernel(d: RunData, variant: str, kernel: str, column: str, unit: str = "", table: str = KERNELS) -> dict:
    """Reference to the kernel table row of ``kernel`` (full name) in ``variant``; ``table`` :data:`KERNELS_BACKWARD`:
    of the backward kernel table."""
    k = d.kernels_backward_of(variant) if table == KERNELS_BACKWARD else d.kernels_of(variant)
    k = k[k["kernel"] == kernel]
    return {"value": clean(k.iloc[0][column]) if len(k) else None, "unit": unit, "table": table,
            "shape_key": d.shape_key, "variant": variant, "kernel": kernel, "column": column}


def ref_launch(d: RunData, variant: str, api: str) -> dict:
    """Reference to launches.csv calls_per_forward of ``api`` in ``variant`` (0 if absent)."""
    return _ref_calls(d, d.launches_of(variant), LAUNCHES, variant, "api", api)


def ref_op(d: RunData, variant: str, op: str) -> dict:
    """Reference to ops.csv calls_per_forward of ``op`` in ``variant`` (0 if absent)."""
    return _ref_calls(d, d.ops_of(variant), OPS, variant, "op", op)


def _ref_calls(d: RunData, rows: pd.DataFrame, table: str, variant: str, key: str, name: str) -> dict:
    """Reference to calls_per_forward of the row of per-capture table ``table`` (``rows``: its rows of ``variant``)
    whose column ``key`` (api, op) is ``name``; 0 if absent."""
    rows = rows[rows[key] == name]
    return {"value": clean(rows.iloc[0]["calls_per_forward"]) if len(rows) else 0, "unit": "calls/forward",
            "table": table, "shape_key": d.shape_key, "variant": variant, key: name, "column": "calls_per_forward"}


#: formula -> its value from the inputs' values (:func:`derived`); a ratio over 0 has none.
FORMULAS = {"ratio": lambda v: v[0] / v[1] if v[1] else None, "sum": sum, "difference": lambda v: v[0] - v[1]}


def derived(formula: str, inputs: list[dict], unit: str = "") -> dict:
    """A number computed from references: formula 'ratio' (a/b), 'sum' or 'difference' (a-b) (:data:`FORMULAS`)."""
    vals = [i["value"] for i in inputs]
    if any(v is None for v in vals):
        value = None
    elif formula in FORMULAS:
        value = FORMULAS[formula](vals)
    else:
        raise ValueError(f"unknown formula {formula!r}")
    return {"value": value, "unit": unit, "formula": formula, "inputs": inputs}


def fmt_ref(ref: dict, digits: int = 3) -> str:
    """A reference's value for a statement: ``digits`` significant digits and its unit (µs for us; not
    'calls/forward', which the sentence says); 'n/a' when there is no value."""
    text, unit = _value_text(ref, digits), _unit_text(ref)
    return f"{text} {unit}" if unit and text != "n/a" else text


def fmt_ref_range(lo: dict, hi: dict, digits: int = 3) -> str:
    """Two references as a range (attnprof.model.fmt.format_range): '37.6–53.7 ms', the unit once where both ends
    share it; each end with its own unit where they differ."""
    if _unit_text(lo) == _unit_text(hi):
        return format_range(_value_text(lo, digits), _value_text(hi, digits), _unit_text(lo))
    return format_range(fmt_ref(lo, digits), fmt_ref(hi, digits))


def _value_text(ref: dict, digits: int) -> str:
    """A reference's value with ``digits`` significant digits (a float; anything else as it is), 'n/a' for none."""
    v = ref["value"]
    if v is None:
        return "n/a"
    return format_number(v, digits) if isinstance(v, float) else str(v)


def _unit_text(ref: dict) -> str:
    """The unit a statement writes after a reference's value: the data's unit name stays "us" (findings.json), a
    reader sees the symbol the rest of the report uses; none for calls/forward, which the sentence says."""
    unit = ref.get("unit", "")
    return "" if unit == "calls/forward" else {"us": "\u00b5s"}.get(unit, unit)


def finding(rule: str, d: RunData, variants: list[str], statement: str, numbers: dict, evidence: list[dict],
            kind: str = "observation", headline: str = "") -> dict:
    """One finding: ``statement`` is the full sentence, ``headline`` a few words for the
    summary table's findings column (defaults to the statement)."""
    return {"id": f"{rule}/{'+'.join(variants)}/{d.shape_key}", "rule": rule, "shape_key": d.shape_key,
            "variants": variants, "kind": kind, "headline": headline or statement, "statement": statement,
            "numbers": numbers, "evidence": evidence, "cells": cells_of(numbers.values())}


def _leaves(refs):
    """The table references under ``refs``, through formulas, spreads and a ranking's inputs."""
    for ref in refs:
        if "table" in ref:
            yield ref
        for key in ("inputs", "spread_inputs"):
            yield from _leaves(ref.get(key) or [])
        spread = ref.get("spread") or {}
        yield from _leaves([spread[k] for k in ("low", "high") if k in spread])


def cells_of(refs) -> list[dict]:
    """The cells a finding rests on, once each, in order: (table, variant, shape_key, pass, column) of every table
    reference among ``refs``; ``pass`` is backward for a backward column or table, else forward."""
    out = {}
    for ref in _leaves(refs):
        backward = "backward" in ref["column"] or ref["table"] == KERNELS_BACKWARD
        cell = {"table": ref["table"], "variant": ref["variant"], "shape_key": ref["shape_key"],
                "pass": "backward" if backward else "forward", "column": ref["column"]}
        out.setdefault(tuple(cell.values()), cell)
    return list(out.values())


def lookup(ref: dict, tables: dict[str, pd.DataFrame]):
    """Re-read a reference's value from ``tables`` (file name -> frame), recursing through
    derived numbers. Raises KeyError when the cell does not exist."""
    if "formula" in ref:
        if ref["formula"] == "argmin":
            return ref["value"]
        return derived(ref["formula"], [{"value": lookup(i, tables)} for i in ref["inputs"]])["value"]
    t = tables[ref["table"]]
    sel = (t["variant"] == ref["variant"]) & (t["shape_key"] == ref["shape_key"])
    for key in ("kernel", "api", "op"):
        if key in ref:
            sel &= t[key] == ref[key]
    rows = t[sel]
    if rows.empty:
        if ref["table"] in (LAUNCHES, OPS):
            return 0
        raise KeyError(f"no row for {ref}")
    return clean(rows.iloc[0][ref["column"]])


def iter_numbers(doc: dict):
    """Every number reference in a findings.json document (findings and expectation checks)."""
    for shape in doc["shapes"]:
        for f in shape["findings"]:
            yield from f["numbers"].values()
        for c in shape["expectations"]:
            if c.get("observed"):
                yield c["observed"]
