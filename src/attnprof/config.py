"""Configuration helpers read at Snakemake parse time (no heavy imports)."""

from __future__ import annotations

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
