import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from attnprof.findings import load_run_data
from attnprof.tables import analyse_trace, concat_tables, forward_table, kernel_table, launch_api_table, op_table, summary_row
from attnprof.trace import device_properties, load_trace

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
VARIANTS = ["naive", "naive_inplace", "sdpa_math", "sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto"]
ROOT = Path(__file__).resolve().parents[1]


def fixture_status(variant: str) -> dict:
    with gzip.open(FIXTURES / variant / "status.json.gz", "rt") as fh:
        return json.load(fh)


def fixture_trace(variant: str) -> dict:
    return load_trace(FIXTURES / variant / "trace.json.gz")


def build_tables(traces: dict[str, dict], statuses: dict[str, dict], range_name: str = "attn_fwd") -> dict:
    """Run the extract + summarize stages in memory, as the workflow does on files."""
    out = {"summary": [], "kernels": [], "launches": [], "ops": [], "forwards": {}}
    for v, trace in traces.items():
        st = statuses[v]
        frames = analyse_trace(trace, range_name)
        fw = forward_table(frames, v, st["shape_key"])
        out["forwards"][v] = fw
        out["summary"].append(summary_row(st, fw))
        out["kernels"].append(kernel_table(frames, v, st["shape_key"]))
        out["launches"].append(launch_api_table(frames, v, st["shape_key"]))
        out["ops"].append(op_table(frames, v, st["shape_key"]))
    out["summary"] = pd.DataFrame(out["summary"])
    out["kernels"] = concat_tables(out["kernels"])
    return out


@pytest.fixture(scope="session")
def h200():
    traces = {v: fixture_trace(v) for v in VARIANTS}
    statuses = {v: fixture_status(v) for v in VARIANTS}
    tables = build_tables(traces, statuses)
    tables["traces"], tables["statuses"] = traces, statuses
    tables["devices"] = device_properties(traces["sdpa_flash"])
    tables["props"] = tables["devices"][0]
    return tables


@pytest.fixture(scope="session")
def h200_data(h200):
    shape = h200["statuses"]["naive"]["shape_key"]
    return load_run_data(shape, h200["summary"], h200["kernels"], h200["launches"], h200["ops"],
                         list(h200["statuses"].values()), h200["devices"])
