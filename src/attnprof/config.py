"""Configuration helpers read at Snakemake parse time (no heavy imports)."""

from __future__ import annotations

from pathlib import Path

import yaml

#: How to give nested values when --config cannot express them.
CONFIGFILE_HINT = ("Nested values are easiest in a YAML file: write e.g. 'plots: {dpi: 150, top_kernels: 6}' "
                   "to my.yaml and pass --configfile my.yaml (it is merged over config/config.yaml).")


def coerce_to_schema(value, schema: dict, defs: dict | None = None):
    """``value`` with every string that stands where ``schema`` (a JSON schema, ``$ref`` into
    ``defs`` followed) asks for a number, integer, boolean, array or object replaced by its
    YAML reading -- Snakemake's ``--config 'plots={dpi: 150}'`` hands nested values over as
    text ('150'). Strings where the schema allows a string are left alone; a string that does
    not parse is left for the validator to reject."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[1]]
    for alt in schema.get("oneOf", []) + schema.get("anyOf", []):
        candidate = coerce_to_schema(value, alt, defs)
        if candidate is not value:
            return candidate
    wanted = schema.get("type")
    wanted = set(wanted) if isinstance(wanted, list) else {wanted} if wanted else set()
    if isinstance(value, str) and wanted and "string" not in wanted:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        value = parsed
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return {k: coerce_to_schema(v, props[k], defs) if k in props else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [coerce_to_schema(v, schema["items"], defs) for v in value]
    return value


def check_variants(variants: list[str], custom: dict | None, built_in=None) -> None:
    """Raise ValueError, with a message that says what to do, unless every name in ``variants``
    (config ``variants``) is a built-in variant (``built_in``, by default the keys of
    :data:`attnprof.variants.VARIANTS`, the one list of them) or defined under ``custom``
    (config ``custom_variants``), and no custom variant takes a built-in variant's name (it would
    silently replace the built-in one, and the findings' rules about that variant would judge it).
    The schema checks only the names' spelling; this is where they are checked against the lists."""
    if built_in is None:
        from .variants import VARIANTS as built_in
    built_in, custom = list(built_in), dict(custom or {})
    problems = []
    taken = [name for name in custom if name in built_in]
    if taken:
        problems.append(f"custom_variants {taken} take the name of a built-in variant; give your variant another name")
    unknown = [v for v in variants if v not in built_in and v not in custom]
    if unknown:
        defined = ", ".join(custom) if custom else "none"
        problems.append(f"variants {unknown} are neither built in ({', '.join(built_in)}) nor defined under custom_variants "
                        f"(defined there: {defined}); define your own under custom_variants (README, 'Your own variant')")
    if problems:
        raise ValueError("; ".join(problems))


#: The keys of a shape grid (workflow/schemas/config.schema.yaml, $defs.grid).
GRID_KEYS = ("batch", "heads", "kv_heads", "seq_len", "q_len", "kv_len", "head_dim", "dtype", "causal", "causal_alignment")


def grid_problems(shapes: dict) -> list[str]:
    """What is wrong with the config's ``shapes`` ({device: grid or list of grids}), one line per
    problem naming the grid (``shapes.cpu[1]``) and the key, checked before the schema (whose own
    message for a grid is 'is not valid under any of the given schemas'): an unknown key, a value
    that is not a non-empty list (or a scalar) of positive integers / known names, seq_len together
    with q_len or kv_len, q_len without kv_len, neither seq_len nor kv_len; then every point of the
    grid through :class:`attnprof.variants.Shape` (heads not a multiple of kv_heads, q_len > kv_len
    with a lower-right mask). [] when all is well."""
    from .variants import CAUSAL_ALIGNMENTS, DTYPES, expand_shapes

    problems = []
    for device, grids in (shapes or {}).items():
        for i, grid in enumerate(grids if isinstance(grids, list) else [grids]):
            where = f"shapes.{device}" + (f"[{i}]" if isinstance(grids, list) else "")
            if not isinstance(grid, dict):
                problems.append(f"{where} is not a mapping of lists (keys: {', '.join(GRID_KEYS)})")
                continue
            bad_keys = [k for k in grid if k not in GRID_KEYS]
            if bad_keys:
                problems.append(f"{where}: unknown keys {bad_keys} (known: {', '.join(GRID_KEYS)})")
            for key, value in grid.items():
                values = value if isinstance(value, list) else [value]
                if key in ("batch", "heads", "kv_heads", "seq_len", "q_len", "kv_len", "head_dim"):
                    wrong = [v for v in values if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1)]
                    if wrong or not values:
                        problems.append(f"{where}.{key}: {value!r} must be a list of integers >= 1")
                elif key == "dtype" and (not values or any(v not in DTYPES for v in values)):
                    problems.append(f"{where}.dtype: {value!r} must be a list of {', '.join(DTYPES)}")
                elif key == "causal" and (not values or any(not isinstance(v, bool) for v in values)):
                    problems.append(f"{where}.causal: {value!r} must be a list of true/false")
                elif key == "causal_alignment" and (not values or any(v not in CAUSAL_ALIGNMENTS for v in values)):
                    problems.append(f"{where}.causal_alignment: {value!r} must be a list of {', '.join(CAUSAL_ALIGNMENTS)}")
            if "seq_len" in grid and ("q_len" in grid or "kv_len" in grid):
                problems.append(f"{where}: seq_len (queries and keys alike) together with "
                                f"{' and '.join(k for k in ('q_len', 'kv_len') if k in grid)}; give seq_len, or kv_len with q_len")
            elif "q_len" in grid and "kv_len" not in grid:
                problems.append(f"{where}: q_len needs kv_len (the key/value length)")
            elif "seq_len" not in grid and "kv_len" not in grid:
                problems.append(f"{where}: no sequence length; give seq_len, or kv_len with q_len")
            missing = [k for k in ("batch", "heads", "head_dim", "dtype", "causal") if k not in grid]
            if missing:
                problems.append(f"{where}: missing {missing}")
            if problems:
                continue
            try:
                expand_shapes(grid)
            except ValueError as exc:
                problems.append(f"{where}: {exc} (every combination of the grid's lists is a point)")
    return problems


def config_problems(config: dict) -> list[str]:
    """Problems the schema cannot name well, checked before it: :func:`grid_problems` of
    ``shapes``; ``passes`` without forward (the backward is profiled after its forward); and
    ``counters.variants`` that name no variant at all (a typo would otherwise be skipped silently)."""
    problems = grid_problems(config.get("shapes"))
    passes = config.get("passes")
    if isinstance(passes, list) and "forward" not in passes:
        problems.append(f"passes {passes}: must list forward (each profiled step runs the forward, then its backward)")
    from .variants import VARIANTS

    counters = config.get("counters") or {}
    known = set(VARIANTS) | set(config.get("custom_variants") or {})
    unknown = [v for v in counters.get("variants") or [] if v not in known]
    if unknown:
        problems.append(f"counters.variants {unknown} are neither built in nor under custom_variants "
                        "(those not in this run's variants are left out; an unknown name would be too, silently)")
    return problems


def subset_message(run_dir: str, shapes_now: list[str], variants_now: list[str],
                   shapes_recorded: list[str], variants_recorded: list[str]) -> str | None:
    """Why a config must not write into ``run_dir``, or None: the config asks for fewer shapes or
    variants than the result set there was made with (the ``*_recorded`` lists, from its env.json), so
    its report would silently replace the full one with a part of it. Adding points is fine."""
    missing_v = [v for v in variants_recorded if v not in variants_now]
    missing_s = [s for s in shapes_recorded if s not in shapes_now]
    if not (missing_v or missing_s):
        return None
    what = "; ".join(filter(None, [f"variants {missing_v}" if missing_v else "",
                                   f"shapes {missing_s}" if missing_s else ""]))
    return (f"{run_dir} holds a result set with more than this config asks for (this config leaves out {what}); "
            f"its report would be replaced by a partial one. Give the subset a result set of its own "
            f"(--config run=<name>), or delete {run_dir} to replace it.")


def lost_captures(run_dir: str, repeats_csv: str, capture_files: list[str]) -> list[str]:
    """The capture files (``capture_files``: file names in a capture's folder, e.g. trace.json.gz and
    status.json) that ``repeats_csv`` (summarize's per-repeat table) of the result set ``run_dir`` was made
    from and that are gone: for each of its rows (shape_key, variant, repeat),
    ``run_dir``/captures/<shape_key>/<variant>/r<repeat>/<file>. [] when the table does not exist or cannot
    be read."""
    import csv

    from .names import repeat_dir

    try:
        with open(repeats_csv, newline="") as fh:
            rows = {(r["shape_key"], r["variant"], r["repeat"]) for r in csv.DictReader(fh)}
    except (OSError, KeyError, csv.Error):
        return []
    return sorted(str(p) for s, v, k in rows for f in capture_files
                  if not (p := Path(run_dir) / "captures" / s / v / repeat_dir(k) / f).exists())


def _default_text(value) -> str:
    if value is None:
        return "–"
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text[:-4].strip() if text.endswith("...") else text


def configuration_markdown(schema: dict, defaults: dict) -> str:
    """docs/configuration.md: one row per key of the config ``schema`` (JSON schema, as YAML
    loads it) with its type, its default (from ``defaults``, the shipped config/config.yaml, else
    the schema's ``default``) and its description. Raises ValueError naming a key that has no
    description, so the document cannot fall behind the schema silently."""
    rows = []

    def walk(node: dict, path: str, default) -> None:
        if "$ref" in node:  # the referring node's description wins
            node = {**schema["$defs"][node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
        if path:
            if not node.get("description"):
                raise ValueError(f"config key {path!r} has no description in the schema")
            kind = node.get("type") or ("one of " + ", ".join(map(str, node["enum"])) if "enum" in node else
                                        "grid or list of grids" if "oneOf" in node else "")
            if kind == "array" and isinstance(node.get("items"), dict) and "enum" in node["items"]:
                kind = "list of " + ", ".join(node["items"]["enum"])
            shown = default if default is not None else node.get("default")
            if node.get("type") == "object" and node.get("properties"):
                shown = None  # its keys get their own rows
            cells = [f"`{path}`", kind, _default_text(shown) if shown is not None else "", node["description"]]
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")  # a | inside a cell ends it
        for key, sub in node.get("properties", {}).items():
            sub_default = default.get(key) if isinstance(default, dict) else None
            walk(sub, f"{path}.{key}" if path else key, sub_default)

    walk(schema, "", defaults)
    head = ["# Configuration", "",
            "Generated from `workflow/schemas/config.schema.yaml` and `config/config.yaml` by",
            "`python -m attnprof.config > docs/configuration.md` (a test keeps it current). Defaults are those of",
            "`config/config.yaml`; override them with `--configfile my.yaml` (merged over the defaults) or, for",
            "top-level keys, `--config key=value`.", "",
            "Shape grids (`shapes.cuda`, `shapes.cpu`) are one grid or a list of grids with the keys batch, heads,",
            "seq_len, head_dim, dtype (bf16, fp16, fp32) and causal, each a list; every combination is one point.",
            "Grouped-query and decode shapes add kv_heads, and q_len with kv_len in place of seq_len; where",
            "q_len != kv_len, causal_alignment chooses the causal mask (lower_right by default, as decoding needs).", "",
            "| key | type | default | what it sets |", "|---|---|---|---|"]
    return "\n".join(head + rows) + "\n"


if __name__ == "__main__":
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    print(configuration_markdown(yaml.safe_load((root / "workflow/schemas/config.schema.yaml").read_text()),
                                 yaml.safe_load((root / "config/config.yaml").read_text())), end="")
