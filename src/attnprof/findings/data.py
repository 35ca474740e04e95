"""One shape's tables as the rules read them (:class:`RunData`), assembled from the run's files
by :func:`load_run_data`, and the variants the rules single out (named in :data:`attnprof.model.variants.VARIANTS`).

Units are the tables' own (attnprof.analysis.tables; columns in docs/results.md): µs in the per-variant
kernel table, ms in summary.csv, calls per forward in the launch and op tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from attnprof.analysis.tables import concat_tables, has_run_interval
from attnprof.analysis.trace import properties_of
from attnprof.findings.ranking import spread_words
from attnprof.model.fmt import format_range
from attnprof.model.variants import VARIANTS


def _built_in(*names: str) -> tuple[str, ...]:
    """``names``, each checked against :data:`attnprof.model.variants.VARIANTS`, the one list of the
    built-in variants: a rule that singles out a variant that is no longer built in fails here,
    on import, instead of never firing."""
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ImportError(f"attnprof.findings singles out variants that attnprof.model.variants.VARIANTS does not define: {unknown}")
    return names


#: The built-in variants the rules compare by name: the study's naive pair (out-of-place and
#: in-place masked_fill) and the math backend set against naive_inplace (dispatchers: a property of the variant,
#: attnprof.model.variants.DISPATCHERS).
NAIVE, NAIVE_INPLACE, SDPA_MATH = _built_in("naive", "naive_inplace", "sdpa_math")
#: Variants that pin an SDPA backend (their VARIANTS value, an SDPBackend member name), in VARIANTS' order.
PINNED = tuple(v for v, backend in VARIANTS.items() if backend)
#: The pinned backends that compute attention in one fused kernel: all but MATH.
FUSED = tuple(v for v in PINNED if VARIANTS[v] != "MATH")
#: Input dtypes for which FP32 work inside a forward is a finding.
LOW_PRECISION = ("bf16", "fp16")


@dataclass
class RunData:
    """One shape's tables: summary rows and per-variant kernel/launch/op tables plus the
    capture status records (with op input types) and the GPU's properties."""

    shape_key: str
    summary: pd.DataFrame
    kernels: pd.DataFrame
    launches: pd.DataFrame
    ops: pd.DataFrame
    status: dict[str, dict]
    devices: list[dict] = field(default_factory=list)
    #: the backward's kernel rows (kernels_backward.csv of every capture of the shape; empty without a backward)
    kernels_backward: pd.DataFrame = field(default_factory=pd.DataFrame)

    def row(self, variant: str) -> pd.Series | None:
        rows = self.summary[self.summary["variant"] == variant]
        return rows.iloc[0] if len(rows) else None

    def ok(self, variant: str) -> bool:
        row = self.row(variant)
        return row is not None and row["status"] == "ok"

    def kernels_of(self, variant: str) -> pd.DataFrame:
        return self.kernels[self.kernels["variant"] == variant]

    def main_kernel(self, variant: str) -> pd.Series | None:
        """A variant's longest kernel (category kernel; kernel tables are sorted by device time), or None."""
        k = self.kernels_of(variant)
        k = k[k["category"] == "kernel"]
        return k.iloc[0] if len(k) else None

    def kernels_backward_of(self, variant: str) -> pd.DataFrame:
        k = self.kernels_backward
        return k[k["variant"] == variant] if len(k) else pd.DataFrame(columns=["kernel", "category", "share_pct"])

    def ops_of(self, variant: str) -> pd.DataFrame:
        return self.ops[self.ops["variant"] == variant]

    def launches_of(self, variant: str) -> pd.DataFrame:
        return self.launches[self.launches["variant"] == variant]

    def props_of(self, kernel_row: pd.Series) -> dict:
        """deviceProperties of the GPU this kernel ran on (its ``device`` column); {} if unknown."""
        return properties_of(self.devices, kernel_row.get("device"))

    @property
    def on_gpu(self) -> bool:
        return bool((self.summary["device"] == "cuda").any())

    def between_run(self, prefix: str | None = None) -> bool:
        """True when the summary has a between-run interval (``<prefix>_run_lo``, repeats >= 2) for
        ``prefix`` (default: the ranked time's, device_ms on a GPU, cpu_ms on a CPU) of some variant."""
        return has_run_interval(self.summary, (prefix or ("device_ms" if self.on_gpu else "cpu_ms"),))

    def spread_columns(self, prefix: str) -> tuple[str, str]:
        """(low, high) columns of the spread a statement about time ``prefix`` (device_ms, cpu_ms) is judged
        against: the between-run interval (``_run_lo``/``_run_hi``) when the run has one, else the min-max
        over the profiled forwards of one capture (a run with one repeat)."""
        if self.between_run(prefix):
            return f"{prefix}_run_lo", f"{prefix}_run_hi"
        return f"{prefix}_min", f"{prefix}_max"

    def spread_words(self, prefix: str | None = None) -> dict[str, str]:
        """How the statements name the spread of time ``prefix`` (default: the ranked time's) and its ends
        (attnprof.findings.ranking.spread_words, the one place that words it): {label, one, ranges, high, low}."""
        prefix = prefix or ("device_ms" if self.on_gpu else "cpu_ms")
        return spread_words(prefix, self.between_run(prefix))

    def time_columns(self) -> tuple[str, str, str, str]:
        """(median, low, high column of summary.csv, words) of the per-forward time a run ranks
        by: the trace's device time on a GPU, the forward range's host time on a CPU; low and high
        are the between-run interval when the run has repeats (:meth:`spread_columns`), else the
        min and max over the profiled forwards. The words say once what the median is."""
        prefix = "device_ms" if self.on_gpu else "cpu_ms"
        lo, hi = self.spread_columns(prefix)
        words = "trace device time per forward" if self.on_gpu else "host time per forward (CPU run)"
        return f"{prefix}_per_forward", lo, hi, f"{words}: {self._median_words()}"

    def _median_words(self) -> str:
        """What the median of :meth:`time_columns` is a median of: of each repeat's median forward over the repeats
        counted (summary.csv ``repeats_ok`` of the rows that ran: one number, or their range where rows differ), or
        with one repeat of the profiled forwards."""
        if not self.between_run():
            return "median of the profiled forwards"
        ran = self.summary[self.summary["status"] == "ok"]
        counts = sorted({int(n) for n in ran.get("repeats_ok", pd.Series(dtype=float)).dropna()})
        n = format_range(counts[0], counts[-1]) if len(counts) > 1 else " ".join(map(str, counts)) or "the"
        return f"median over {n} repeats of each repeat's median forward"


def load_run_data(shape_key: str, summary: pd.DataFrame, kernels: pd.DataFrame, launch_tables: list[pd.DataFrame],
                  op_tables: list[pd.DataFrame], statuses: list[dict], devices: list[dict],
                  backward_kernel_tables: list[pd.DataFrame] = ()) -> RunData:
    """Assemble one shape's RunData from the run's tables (all shapes) and status records;
    ``devices``: the traces' deviceProperties entries (each with its ``id``);
    ``backward_kernel_tables``: the captures' kernels_backward.csv (empty ones without a backward)."""
    def pick(frames: list[pd.DataFrame]) -> pd.DataFrame:
        df = concat_tables(frames)
        if df.empty:
            df = pd.DataFrame(columns=["variant", "shape_key", "api", "op", "calls_per_forward"])
        return df[df["shape_key"] == shape_key]

    return RunData(
        shape_key=shape_key,
        summary=summary[summary["shape_key"] == shape_key].reset_index(drop=True),
        kernels=at_shape(kernels, shape_key),
        launches=pick(launch_tables),
        ops=pick(op_tables),
        status={s["variant"]: s for s in statuses if s["shape_key"] == shape_key},
        devices=devices,
        kernels_backward=at_shape(concat_tables([t for t in backward_kernel_tables if len(t)]), shape_key).reset_index(drop=True),
    )


def records(df: pd.DataFrame) -> list[dict]:
    """A table's rows as dicts, a missing value as None (not NaN), for the sentences and the templates."""
    return df.astype(object).where(df.notna(), None).to_dict("records")


def at_shape(table: pd.DataFrame, shape_key: str) -> pd.DataFrame:
    """The rows of a table at one shape, with their index (an empty table as it is)."""
    return table[table["shape_key"] == shape_key] if len(table) else table
