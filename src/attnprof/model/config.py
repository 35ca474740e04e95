"""Configuration helpers read at Snakemake parse time (no heavy imports)."""

from __future__ import annotations

import difflib
import math
import shlex
from collections.abc import Mapping
from pathlib import Path

import yaml

from attnprof.model.variants import CAUSAL_ALIGNMENTS, CONTROL, DTYPES, VARIANTS, expand_shapes

#: How to give nested values when --config cannot express them: part of a schema error's message only when
#: the error is about a nested value given on the command line (:func:`schema_message`).
CONFIGFILE_HINT = ("Nested values are easiest in a YAML file: write e.g. 'plots: {dpi: 150}' "
                   "to my.yaml and pass --configfile my.yaml (it is merged over config/config.yaml).")


def coerce_to_schema(value, schema: dict, defs: dict | None = None):
    """``value`` with every string that stands where ``schema`` (a JSON schema, ``$ref`` into
    ``defs`` followed) asks for a number, integer, boolean, array or object replaced by its
    YAML reading -- Snakemake's ``--config 'plots={dpi: 150}'`` hands nested values over as
    text ('150'). Strings where the schema allows a string are left alone; a string that does
    not parse is left for the validator to reject."""
    defs = defs if defs is not None else schema.get("$defs", {})
    schema = _resolve(schema, {"$defs": defs})
    for alt in schema.get("oneOf", []) + schema.get("anyOf", []):
        candidate = coerce_to_schema(value, alt, defs)
        if candidate is not value:
            return candidate
    value = _yaml_reading(value, schema)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return {k: coerce_to_schema(v, props[k], defs) if k in props else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [coerce_to_schema(v, schema["items"], defs) for v in value]
    return value


def _yaml_reading(value, schema: dict):
    """``value``'s YAML reading where it is a string standing where ``schema`` names types, none of them a string;
    else ``value`` itself (also a string that does not parse: left for the validator to reject)."""
    wanted = schema.get("type")
    wanted = set(wanted) if isinstance(wanted, list) else {wanted} if wanted else set()
    if not isinstance(value, str) or not wanted or "string" in wanted:
        return value
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def check_variants(variants: list[str], custom: dict | None) -> None:
    """Raise ValueError, with a message that says what to do, unless every name in ``variants``
    (config ``variants``) is a built-in variant (a key of :data:`attnprof.model.variants.VARIANTS`, the one list
    of them) or defined under ``custom``
    (config ``custom_variants``), and no custom variant takes a built-in variant's name (it would
    silently replace the built-in one, and the findings' rules about that variant would judge it).
    The schema checks only the names' spelling; this is where they are checked against the lists."""
    built_in, custom = list(VARIANTS), dict(custom or {})
    problems = _taken_names(variants, custom, built_in) + _unknown_variants(variants, custom, built_in)
    if problems:
        raise ValueError("; ".join(problems))


def _taken_names(variants: list[str], custom: dict, built_in: list[str]) -> list[str]:
    """The problems of variant names already taken: a custom variant named as a built-in one, or a variant named as
    the profiler's control."""
    problems = []
    taken = [name for name in custom if name in built_in]
    if taken:
        problems.append(f"custom_variants {taken} take the name of a built-in variant; give your variant another name")
    if CONTROL in custom or CONTROL in variants:
        problems.append(f"the variant name {CONTROL!r} is the profiler's control (captured in every result set, "
                        "attnprof.analysis.control); give your variant another name")
    return problems


def _unknown_variants(variants: list[str], custom: dict, built_in: list[str]) -> list[str]:
    """The problem of variants neither built in nor defined under custom_variants (the control aside), with both
    lists and where to define one; [] when there are none."""
    unknown = [v for v in variants if v not in built_in and v not in custom and v != CONTROL]
    if not unknown:
        return []
    defined = ", ".join(custom) if custom else "none"
    return [f"variants {unknown} are neither built in ({', '.join(built_in)}) nor defined under custom_variants "
            f"(defined there: {defined}); define your own under custom_variants (README, 'Your own variant')"]


#: The keys of a shape grid (workflow/schemas/config.schema.yaml, $defs.grid).
GRID_KEYS = ("batch", "heads", "kv_heads", "seq_len", "q_len", "kv_len", "head_dim", "dtype", "causal", "causal_alignment")


def grid_problems(shapes: dict) -> list[str]:
    """What is wrong with the config's ``shapes`` ({device: grid or list of grids}), one line per
    problem naming the grid (``shapes.cpu[1]``) and the key, checked before the schema (whose own
    message for a grid is 'is not valid under any of the given schemas'): an unknown key, single values
    where the grid takes lists (``batch: 2`` for ``batch: [2]``), a value that is not a non-empty list of
    positive integers / known names, seq_len together
    with q_len or kv_len, q_len without kv_len, neither seq_len nor kv_len; then every point of the
    grid through :class:`attnprof.model.variants.Shape` (heads not a multiple of kv_heads, q_len > kv_len
    with a lower-right mask). [] when all is well."""
    problems = []
    for device, grids in (shapes or {}).items():
        for i, grid in enumerate(grids if isinstance(grids, list) else [grids]):
            problems += _grid_problems(f"shapes.{device}" + (f"[{i}]" if isinstance(grids, list) else ""), grid)
    return problems


#: The grid keys whose values are positive integers.
_INT_KEYS = ("batch", "heads", "kv_heads", "seq_len", "q_len", "kv_len", "head_dim")


def _grid_problems(where: str, grid) -> list[str]:
    """:func:`grid_problems` of one grid (``where``: its place in the config, e.g. ``shapes.cpu[1]``)."""
    if not isinstance(grid, dict):
        return [f"{where} is not a mapping of lists (keys: {', '.join(GRID_KEYS)})"]
    problems = _key_problems(where, grid)
    problems += [p for key, value in grid.items() if (p := _value_problem(f"{where}.{key}", key, value))]
    problems += _length_problems(where, grid)
    missing = [k for k in ("batch", "heads", "head_dim", "dtype", "causal") if k not in grid]
    if missing:
        problems.append(f"{where}: missing {missing}")
    if not problems:
        try:
            expand_shapes(grid)
        except ValueError as exc:
            problems.append(f"{where}: {exc} (every combination of the grid's lists is a point)")
    return problems


def _key_problems(where: str, grid: dict) -> list[str]:
    """Unknown keys, and single values where the grid takes lists (``batch: 2`` for ``batch: [2]``)."""
    problems = []
    bad_keys = [k for k in grid if k not in GRID_KEYS]
    if bad_keys:
        problems.append(f"{where}: unknown keys {bad_keys} (known: {', '.join(GRID_KEYS)})")
    scalars = [k for k, v in grid.items() if k in GRID_KEYS and not isinstance(v, list)]
    if scalars:
        listed = ", ".join(f"{k}: [{_default_text(v)}]" if k in scalars else f"{k}: {_default_text(v)}"
                           for k, v in grid.items() if k in GRID_KEYS)
        problems.append(f"{where}: each field of a grid takes a list, not a single value "
                        f"({', '.join(scalars)}); write e.g. {scalars[0]}: [{_default_text(grid[scalars[0]])}], "
                        f"the grid as {{{listed}}} (every combination of the lists is a point)")
    return problems


def _positive_integers(values: list) -> bool:
    """Whether ``values`` is a non-empty list of integers >= 1 (YAML's true and false are no integers here)."""
    return bool(values) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)


def _value_problem(where: str, key: str, value) -> str | None:
    """Why the grid value ``value`` of ``key`` is not a non-empty list of what the key takes, or None."""
    values = value if isinstance(value, list) else [value]
    if key in _INT_KEYS:
        return None if _positive_integers(values) else f"{where}: {value!r} must be a list of integers >= 1"
    allowed = {"dtype": (DTYPES, ", ".join(DTYPES)), "causal": ((True, False), "true/false"),
               "causal_alignment": (CAUSAL_ALIGNMENTS, ", ".join(CAUSAL_ALIGNMENTS))}.get(key)
    if allowed is None:
        return None
    ok = bool(values) and all(v in allowed[0] and (key != "causal" or isinstance(v, bool)) for v in values)
    return None if ok else f"{where}: {value!r} must be a list of {allowed[1]}"


def _length_problems(where: str, grid: dict) -> list[str]:
    """The sequence lengths: seq_len, or kv_len with q_len; never both kinds."""
    if "seq_len" in grid and ("q_len" in grid or "kv_len" in grid):
        return [f"{where}: seq_len (queries and keys alike) together with "
                f"{' and '.join(k for k in ('q_len', 'kv_len') if k in grid)}; give seq_len, or kv_len with q_len"]
    if "q_len" in grid and "kv_len" not in grid:
        return [f"{where}: q_len needs kv_len (the key/value length)"]
    if "seq_len" not in grid and "kv_len" not in grid:
        return [f"{where}: no sequence length; give seq_len, or kv_len with q_len"]
    return []


def config_problems(config: dict) -> list[str]:
    """Problems the schema cannot name well, checked before it: :func:`grid_problems` of
    ``shapes``; ``passes`` without forward (the backward is profiled after its forward); and
    ``counters.variants`` that name no variant at all (a typo would otherwise be skipped silently)."""
    problems = grid_problems(config.get("shapes"))
    passes = config.get("passes")
    if isinstance(passes, list) and "forward" not in passes:
        problems.append(f"passes {passes}: must list forward (each profiled step runs the forward, then its backward)")
    problems += _counter_variant_problems(config) + non_finite_problems(config)
    return problems + _environments_problems(config.get("environments"))


def non_finite_problems(value, key: str = "") -> list[str]:
    """The keys of ``value`` (the config, walked) that hold NaN or an infinity: every bound of the schema holds for
    NaN (each comparison with it is false), so ``top_up.time_s: .nan`` would turn top-up off in silence and
    ``compare.noise_floor: .nan`` print "+-nan %" (issue 43 item 8)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{key}: {value} is not a number this key can hold (NaN and infinities are refused; give a finite "
                "value, or leave the key out for its default)"]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in non_finite_problems(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite_problems(v, f"{key}[{i}]")]
    return []


def _counter_variant_problems(config: dict) -> list[str]:
    """``counters.variants`` that name neither a built-in nor a custom variant (a typo would otherwise be skipped
    silently, as the variants not in this run are)."""
    counters = config.get("counters") or {}
    known = set(VARIANTS) | set(config.get("custom_variants") or {})
    unknown = [v for v in counters.get("variants") or [] if v not in known]
    if not unknown:
        return []
    return [f"counters.variants {unknown} are neither built in nor under custom_variants "
            "(those not in this run's variants are left out; an unknown name would be too, silently)"]


def _environments_problems(environments) -> list[str]:
    """The problems of config ``environments``: each environment's (:func:`environment_problems`; YAML reads an
    unquoted 1 as a number, and the schema's name patterns apply to text keys only), and a single environment (an
    A/B run needs two or more)."""
    if not isinstance(environments, dict):
        return []
    problems = [p for name, spec in environments.items() for p in environment_problems(name, spec)]
    if len(environments) == 1:
        problems.append(f"environments {sorted(environments)}: an A/B run needs two or more environments "
                        "(leave environments out, {}, for one run in Snakemake's own Python)")
    return problems


def environment_problems(name, spec) -> list[str]:
    """Problems of one A/B environment (config ``environments.<name>``) the schema cannot name well: a name or a
    variable name that YAML read as a number (the schema's name patterns apply to text keys only), and a NUL byte in
    its python path or a variable's value, which no process can be given (the OS would refuse it at the first
    capture, naming neither the environment nor the variable)."""
    problems = []
    if not isinstance(name, str):
        problems.append(f"environments: the name {name!r} is a number; quote it ('{name}') or use a word, "
                        "e.g. environments: {torch2.13: {python: .venv/bin/python}, ...}")
    spec = spec if isinstance(spec, dict) else {}
    if isinstance(spec.get("python"), str) and "\0" in spec["python"]:
        problems.append(f"environments.{name}.python: {spec['python']!r} holds a NUL byte (\\0), which no path can "
                        "hold; write the interpreter's path, e.g. python: .venv-b/bin/python")
    env = spec.get("env") if isinstance(spec.get("env"), dict) else {}
    for var, value in env.items():
        if not isinstance(var, str):
            problems.append(f"environments.{name}.env: the variable name {var!r} is a number; a variable name is "
                            "text starting with a letter or _, e.g. env: {OMP_NUM_THREADS: '1'}")
        elif isinstance(value, str) and "\0" in value:
            problems.append(f"environments.{name}.env.{var}: the value {value!r} holds a NUL byte (\\0), which no "
                            "environment variable can hold; remove it (e.g. OMP_NUM_THREADS: '1')")
    return problems


# --- A/B on one device (config ``environments``) ---------------------------------------------------------
#: Between a run and an environment name in an A/B result set's name: results/<run>@<environment>/. '@' is
#: allowed in POSIX paths, in Snakemake wildcards (the run wildcard is [^/]+) and in Slurm job names, and it
#: is neither in the run pattern's usual output ([a-z0-9._+-]) nor in an environment name, so a result set's
#: name splits back into both without ambiguity.
AB_SEPARATOR = "@"


def ab_run_name(run: str, environment: str) -> str:
    """The result set of ``environment`` in the A/B run ``run``: ``<run>@<environment>``."""
    return f"{run}{AB_SEPARATOR}{environment}"


def ab_compare_name(run: str) -> str:
    """The compare folder (results/compare/<name>/) of the A/B run ``run``: ``<run>-ab``."""
    return f"{run}-ab"


def ab_order(repeat: int, names: list[str]) -> list[str]:
    """The order in which the environments ``names`` capture round ``repeat`` (1-based): as listed in odd
    rounds, reversed in even ones (A,B then B,A: ABBA). A drift that is linear in time over two rounds then
    adds the same to A and B in the pair of rounds, so it cancels from the paired ratio (a crossover design's
    counterbalancing; e.g. Jones & Kenward, Design and Analysis of Cross-Over Trials, 3rd ed., 2014, ch. 1)."""
    return list(names) if repeat % 2 else list(reversed(names))


def ab_priority(repeat: int, environment: str, names: list[str], repeats: int) -> int:
    """Snakemake priority of a capture of ``environment`` in round ``repeat`` of ``repeats`` (higher runs
    first): every capture of round k outranks every capture of round k + 1, and within a round the
    environments follow :func:`ab_order`. With one environment (``names`` empty or of one) this is
    ``repeats - repeat``, the single-run priority. Raises ValueError for an environment not in ``names``."""
    if len(names) < 2:
        return repeats - repeat
    order = ab_order(repeat, names)
    if environment not in order:
        raise ValueError(f"environment {environment!r} is not one of {names}")
    return (repeats - repeat) * len(names) + (len(names) - 1 - order.index(environment))


def capture_rank(repeat: int, environment: str | None, names: list[str], repeats: int, ends_process: bool) -> int:
    """Rule capture's Snakemake priority (higher runs first): :func:`ab_priority` (every capture of round k before
    any of round k + 1; ABBA between the environments of an A/B run), and within one round and environment the
    captures that end their capture process (``ends_process``:
    :func:`attnprof.model.variants.ends_capture_process`) after the others, so that the round's other captures
    share one process. Raises ValueError as :func:`ab_priority` does."""
    return 2 * ab_priority(repeat, environment, names, repeats) + (0 if ends_process else 1)


def problems_message(problems: list[str], most: int = 5) -> str:
    """:func:`config_problems` as a WorkflowError's message: one line for one problem, else one line each
    (the first ``most`` of them)."""
    if len(problems) == 1:
        return f"config: {problems[0]}"
    more = f"\n  ({len(problems) - most} more)" if len(problems) > most else ""
    return "config:\n" + "\n".join(f"  - {p}" for p in problems[:most]) + more


def _path_text(path) -> str:
    """``['shapes', 'cpu', 0, 'batch']`` -> ``shapes.cpu[0].batch``."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).removeprefix(".")


def _resolve(schema: dict, root: dict) -> dict:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = {**root.get("$defs", {}).get(schema["$ref"].rsplit("/", 1)[1], {}),
                  **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema if isinstance(schema, dict) else {}


def _subschema(schema: dict, path, root: dict) -> dict:
    """The schema of the value at ``path`` (keys and list indices), following properties, items and the
    first alternative of oneOf/anyOf that has the next key; {} when it cannot be followed."""
    node = _resolve(schema, root)
    for part in path:
        alts = [node, *(_resolve(a, root) for a in node.get("oneOf", []) + node.get("anyOf", []))]
        nxt = None
        for alt in alts:
            if isinstance(part, int) and isinstance(alt.get("items"), dict):
                nxt = alt["items"]
            elif not isinstance(part, int) and part in alt.get("properties", {}):
                nxt = alt["properties"][part]
            elif not isinstance(part, int) and isinstance(alt.get("additionalProperties"), dict):
                nxt = alt["additionalProperties"]
            if nxt is not None:
                break
        if nxt is None:
            return {}
        node = _resolve(nxt, root)
    return node


def _number_range(schema: dict) -> str:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None and hi is not None:
        return f" from {lo} to {hi}"
    parts = [f"{op} {schema[k]}" for k, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                                              ("exclusiveMaximum", "<")) if k in schema]
    return (" " + " and ".join(parts)) if parts else ""


def expected_text(schema: dict, root: dict | None = None) -> str:
    """What a value that ``schema`` (a JSON schema node) accepts, in words: 'an integer from 1 to 50',
    'one of auto, cuda, cpu', 'a list of forward, backward'..."""
    root = root or {}
    schema = _resolve(schema, root)
    alts = schema.get("oneOf") or schema.get("anyOf")
    if alts:
        return " or ".join(expected_text(a, root) for a in alts)
    if "enum" in schema:
        return "one of " + ", ".join(map(_default_text, schema["enum"]))
    if "const" in schema:
        return _default_text(schema["const"])
    kind = schema.get("type")
    if kind == "array":
        return _list_text(schema, root)
    if kind == "object":
        keys = list(schema.get("properties", {}))
        return "a mapping" + (f" with the keys {', '.join(keys)}" if keys else "")
    return _scalar_text(schema)


def _scalar_text(schema: dict) -> str:
    """:func:`expected_text` of a schema node that is neither a list nor a mapping: a number (with its range),
    true or false, text (with its pattern), or any value the schema accepts."""
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return {"integer": "an integer", "number": "a number"}[kind] + _number_range(schema)
    if kind == "boolean":
        return "true or false"
    if kind == "string":
        return f"text matching {schema['pattern']}" if "pattern" in schema else "text"
    return "a value the schema accepts"


def _list_text(schema: dict, root: dict) -> str:
    """:func:`expected_text` of a list node: the values its items may take, or the kind of its items (with their
    pattern or range)."""
    items = _resolve(schema.get("items") or {}, root)
    if "enum" in items:
        return "a list of " + ", ".join(map(_default_text, items["enum"]))
    plural = {"integer": "integers", "number": "numbers", "string": "strings", "boolean": "true/false values"}
    if items.get("type") not in plural:
        return "a list"
    return f"a list of {plural[items['type']]}" + (f" matching {items['pattern']}" if "pattern" in items else
                                                   _number_range(items))


def _example(schema: dict, root: dict):
    """A value ``schema`` accepts, for a message's fix; None when none comes to mind."""
    schema = _resolve(schema, root)
    if "default" in schema:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1 if "exclusiveMinimum" in schema else 1)
        return int(low) if kind == "integer" else low
    if kind == "boolean":
        return True
    if kind == "array":
        item = _example(schema.get("items") or {}, root)
        return [item] if item is not None else None
    return None


def _snippet(path, value) -> str:
    """``['plots', 'dpi']``, 150 -> ``plots: {dpi: 150}``."""
    text = _default_text(value)
    for key in reversed(path[1:]):
        text = f"{{{key}: {text}}}"
    return f"{path[0]}: {text}"


def schema_message(config: dict, schema: dict, command_line: dict | None = None, defaults: dict | None = None) -> str | None:
    """None when ``config`` is valid under ``schema`` (the config schema, as YAML loads it); else a message of a few
    lines about the most relevant error (jsonschema's ``best_match``): the key and the value, what is expected (from
    the schema, with the key's description), and a fix -- the example value from ``defaults`` (config/config.yaml)
    where it has one. An unknown key is named with the keys known there and the closest one. ``command_line``: the
    values given with --config; the advice on nested values (:data:`CONFIGFILE_HINT`) is given only when the error
    is about a nested value given there."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    errors = list(Draft202012Validator(schema).iter_errors(config))
    error = best_match(errors)
    if error is None:
        return None
    path = list(error.absolute_path)
    node = _subschema(schema, path, schema)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        lines = _unknown_key_lines(error, node, _path_text(path))
    elif error.validator == "required":
        lines, path, node = _required_lines(error, node, path, schema)
        lines += _fix_lines(error, path, node, schema, command_line or {}, defaults or {})
    else:
        lines = _value_lines(error, node, _path_text(path), schema)
        lines += _fix_lines(error, path, node, schema, command_line or {}, defaults or {})
    if len(errors) > 1:
        lines.append(f"  ({len(errors) - 1} more problem{'s' if len(errors) > 2 else ''} in the config: fix this one and run again)")
    return "\n".join(lines)


def _unknown_key_lines(error, node: dict, where: str) -> list[str]:
    """:func:`schema_message`'s lines for an unknown key: the keys known there and the closest one."""
    known = list(node.get("properties", {}))
    extra = [k for k in error.instance if k not in known]
    key = extra[0] if extra else "?"
    full = f"{where}.{key}" if where else key
    given = _default_text(error.instance.get(key))
    close = difflib.get_close_matches(str(key), known, n=1)
    return [f"config: unknown key '{full}' (given {given if len(given) <= 60 else given[:57] + '...'})",
            f"  known{' under ' + where if where else ''}: {', '.join(known)}",
            f"  fix: {'did you mean ' + repr(close[0]) + '? ' if close else ''}correct or remove '{full}' "
            "(every key: docs/configuration.md)"]


def _required_lines(error, node: dict, path: list, schema: dict) -> tuple[list[str], list, dict]:
    """:func:`schema_message`'s lines for a missing key, and the path and schema node of that key."""
    where = _path_text(path)
    missing = error.message.split("'")[1] if "'" in error.message else "?"
    sub = _resolve(node.get("properties", {}).get(missing, {}), schema)
    return ([f"config: {where or 'the config'} has no key '{missing}' (it is required)",
             f"  expected: {where + '.' if where else ''}{missing}: {expected_text(sub, schema)}"], [*path, missing], sub)


def _value_lines(error, node: dict, where: str, schema: dict) -> list[str]:
    """:func:`schema_message`'s lines for a value of the wrong type or out of range: what is given, what is expected
    (with the key's description)."""
    value = _default_text(error.instance)
    value = value if len(value) <= 80 else value[:77] + "..."
    what = {"type": f"not {expected_text({'type': error.validator_value}, schema)}",
            "enum": "not one of the allowed values"}.get(error.validator, error.message.replace(repr(error.instance), "").strip())
    description = node.get("description", "")
    description = description if len(description) <= 90 else description[:87].rsplit(" ", 1)[0] + " ..."
    return [f"config: {where} = {value}: {what}",
            f"  expected: {expected_text(node, schema)}" + (f" ({description})" if description else "")]


def _fix_example(error, path: list, node: dict, schema: dict, defaults: dict):
    """The value a fix shows: the default at ``path`` (config/config.yaml), a single value where a list is wanted
    listed, else the schema's example (:func:`_example`)."""
    example = defaults
    for part in path:
        example = example[part] if isinstance(example, dict) and part in example else None
    if error.validator == "type" and error.validator_value == "array" and not isinstance(error.instance, (list, dict)):
        return [error.instance]
    return _example(node, schema) if example is None else example


def _fix_lines(error, path: list, node: dict, schema: dict, cli: dict, defaults: dict) -> list[str]:
    """:func:`schema_message`'s fix: the example value (``defaults``, config/config.yaml, where it has one; a single
    value where a list is wanted: that value listed; else the schema's example), as --config or as YAML; the advice
    on nested values only for a nested value given on the command line (``cli``)."""
    example = _fix_example(error, path, node, schema, defaults)
    hint = bool(path) and path[0] in cli and (len(path) > 1 or _resolve(node, schema).get("type") in ("object", "array"))
    if whole := _whole_list_fix(path, defaults):
        return [whole]
    if example is not None and path and all(isinstance(p, str) for p in path):
        return [_example_fix(path, example, hint)]
    return [f"  fix: {CONFIGFILE_HINT}"] if hint else []


def _whole_list_fix(path: list, defaults: dict) -> str | None:
    """The fix for an item of a list (path [key, 0, ...]): the whole list is what to write again, as the default
    (config/config.yaml) shows it, as --config; None for any other path."""
    top = defaults.get(path[0]) if path and isinstance(path[0], str) and isinstance(defaults, dict) else None
    if len(path) > 1 and isinstance(path[1], int) and top is not None and not isinstance(top, dict):
        return f"  fix: e.g. --config {shlex.quote(f'{path[0]}={_default_text(top)}')}"
    return None


def _example_fix(path: list, example, hint: bool) -> str:
    """The fix that shows ``example`` at ``path`` (keys only): a top-level value as --config; else a YAML snippet,
    for a file of its own with the advice on nested values (``hint``: given on the command line) or for the
    --configfile."""
    if len(path) == 1 and not isinstance(example, dict):
        return f"  fix: e.g. --config {shlex.quote(f'{path[0]}={_default_text(example)}')}"
    if hint:
        return (f"  fix: write e.g. '{_snippet(path, example)}' to my.yaml and pass --configfile my.yaml "
                "(nested values are easiest in a YAML file; it is merged over config/config.yaml)")
    return f"  fix: e.g. '{_snippet(path, example)}' in your --configfile"


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


def _kind_text(node: dict) -> str:
    """The type column of docs/configuration.md for a schema ``node``: its type; 'one of ...' for an enum; for
    alternatives (oneOf) with a constant among them, each ('all or list'), else 'grid or list of grids' (the shape
    grids, the only other oneOf); '' for none."""
    if node.get("type"):
        return node["type"]
    if "enum" in node:
        return "one of " + ", ".join(map(str, node["enum"]))
    alternatives = node.get("oneOf") or []
    if any("const" in a for a in alternatives):
        return " or ".join(str(a["const"]) if "const" in a else "list" if a.get("type") == "array"
                           else str(a.get("type", "?")) for a in alternatives)
    return "grid or list of grids" if alternatives else ""


def configuration_markdown(schema: dict, defaults: dict) -> str:
    """docs/configuration.md: one row per key of the config ``schema`` (JSON schema, as YAML
    loads it) with its type, its default (from ``defaults``, the shipped config/config.yaml, else
    the schema's ``default``) and its description. Raises ValueError naming a key that has no
    description, so the document cannot fall behind the schema silently."""
    rows = []

    def walk(node: dict, path: str, default) -> None:
        node = _resolve(node, schema)  # the referring node's description wins
        if path:
            if not node.get("description"):
                raise ValueError(f"config key {path!r} has no description in the schema")
            kind = _kind_text(node)
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
            "`python -m attnprof.model.config > docs/configuration.md` (a test keeps it current). Defaults are those of",
            "`config/config.yaml`; override them with `--configfile my.yaml` (merged over the defaults) or, for",
            "top-level keys, `--config key=value`.", "",
            "Shape grids (`shapes.cuda`, `shapes.cpu`) are one grid or a list of grids with the keys batch, heads,",
            "seq_len, head_dim, dtype (bf16, fp16, fp32) and causal, each a list; every combination is one point.",
            "Grouped-query and decode shapes add kv_heads, and q_len with kv_len in place of seq_len; where",
            "q_len != kv_len, causal_alignment chooses the causal mask (lower_right by default, as decoding needs).", "",
            "| key | type | default | what it sets |", "|---|---|---|---|"]
    return "\n".join(head + rows) + "\n"


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[3]
    print(configuration_markdown(yaml.safe_load((root / "workflow/schemas/config.schema.yaml").read_text()),
                                 yaml.safe_load((root / "config/config.yaml").read_text())), end="")
