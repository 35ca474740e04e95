"""The HTML report's interactive timeline: one forward per variant as inline SVG, with hover and zoom.

Built from the extracted tables, not the traces: per capture (repeat 1 at the report's first shape) its
``recipe.csv`` (:func:`attnprof.analysis.recipe.recipe_table`: every step of every complete forward, with its
start and its launch call's start and host duration, µs from the start of the forward's range) and its
``forwards.csv`` (:func:`attnprof.analysis.tables.forward_table`: which forward is drawn, and its range).
The forward drawn is the one of the static figure (:func:`attnprof.render.plots.pick_forward`: the timed
forward of median device time; host time on a CPU run).

The markup is self-contained: an ``<svg>`` whose bars sit in a nested ``<svg>`` with a viewBox in µs (a bar's
``x`` is its start, its ``width`` its duration, both in µs), a ``<title>`` per bar (the browser's tooltip:
kernel, category, grid, block, duration, launch call), and a few lines of plain JavaScript that zoom by changing
that viewBox (range sliders, the mouse wheel over the bars; a double click resets) and redraw the axis. No file
is fetched: no script, style or font comes from a URL. Every text from the tables is escaped
(:func:`html.escape`): kernel names are C++ templates with ``<``, ``>`` and ``&``.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from attnprof.analysis.recipe import read_recipe
from attnprof.findings.kernel_names import KERNEL_CLASSES, kernel_class
from attnprof.model.fmt import format_number
from attnprof.model.plan import Layout
from attnprof.render.plots import CLASS_COLORS, COLORS, LAUNCH_COLOR, pick_forward

#: Geometry of the outer SVG, in its user units (it scales to the page's width): the width, the gutter for the
#: variant names on the left, the plot's width, the height of one variant's lane and the axis below the lanes.
WIDTH, LEFT, RIGHT, LANE, AXIS = 1000, 150, 12, 46, 36
PLOT = WIDTH - LEFT - RIGHT
#: Inside a lane (y from the lane's top): the forward's range, the launch calls, the GPU events (top, height).
RANGE_ROW, LAUNCH_ROW, GPU_ROW = (1, 4), (6, 13), (24, 16)
#: The recipe columns the timeline reads.
NEEDED = ("forward", "category", "name", "label", "grid", "block", "dur_us", "start_us", "launch_api", "launch_us",
          "launch_dur_us")
RANGE_COLOR = "#DDDDDD"


def _num(v: float) -> str:
    """A coordinate: µs to the ns, without float noise or trailing zeros."""
    return f"{round(float(v), 3):.10g}"


def _us(v) -> str:
    return f"{format_number(float(v))} µs"


def _cell(v) -> str | None:
    return None if pd.isna(v) else str(v)


def lane(capture: dict, gpu: bool) -> dict:
    """One variant's lane: ``capture`` has variant, status (the summary's), recipe and forwards (DataFrames of
    the capture's recipe.csv and forwards.csv, None where absent) and source (the recipe's path, for errors).
    Returns ``{"variant", "forward", "range_us", "bars": [...], "why"}``: ``why`` (None when drawn) says why
    nothing is drawn; each bar ``{"row": "range"|"launch"|"gpu", "x", "w" (µs), "color", "title" (plain
    text), "cls"}`` (an aten op's bar also "label", its op), GPU (or op) bars in the recipe's step order, each
    step's launch call before it.
    Raises ValueError naming the source when the recipe lacks a column of :data:`NEEDED` (a table written
    before those columns: rerun rule extract)."""
    out = {"variant": capture["variant"], "forward": None, "range_us": None, "bars": [], "why": None}
    if capture["status"] != "ok":
        return {**out, "why": capture["status"]}
    recipe, forwards = capture.get("recipe"), capture.get("forwards")
    if recipe is None or forwards is None:
        return {**out, "why": "no recipe or forward table"}
    _check_columns(recipe, capture.get("source", "recipe table"))
    f = pick_forward(forwards)
    steps = recipe[recipe["forward"] == f].sort_values("step") if f is not None else recipe.iloc[:0]
    if f is None or steps.empty:
        return {**out, "why": "no forward with complete GPU times" if gpu else "no complete forward"}
    rng = float(forwards.loc[forwards["forward"] == f, "cpu_us"].iloc[0])
    out.update(forward=int(f), range_us=rng)
    out["bars"].append({"row": "range", "x": 0.0, "w": rng, "color": RANGE_COLOR, "cls": "range",
                        "title": f"forward {f}: its range on the host, {_us(rng)}"})
    for s in steps.itertuples(index=False):
        out["bars"] += _op_bars(s) if s.category == "op" else _kernel_bars(s)
    return out


def _check_columns(recipe: pd.DataFrame, source: str) -> None:
    """Raise ValueError naming ``source`` when ``recipe`` lacks a column of :data:`NEEDED`, with the fix."""
    missing = [c for c in NEEDED if c not in recipe.columns]
    if missing:
        raise ValueError(f"{source}: no column(s) {', '.join(missing)} (a table written "
                         "before the interactive timeline): rerun rule extract (snakemake ... --forcerun extract)")


def _label(s) -> str:
    """A recipe step's label, its name where it has none."""
    return _cell(s.label) or str(s.name)


def _op_bars(s) -> list[dict]:
    """The bar of a CPU run's step: one of the forward's top-level aten ops, on the host."""
    return [{"row": "gpu", "x": float(s.start_us), "w": float(s.dur_us), "color": COLORS["cpu"],
             "cls": "aten op", "label": _label(s), "title": f"{_label(s)}\naten op (top level), {_us(s.dur_us)} on "
                                                            f"the host, from {_us(s.start_us)}"}]


def _kernel_bars(s) -> list[dict]:
    """The bars of a GPU step: its launch call on the host (where the trace has its start and duration), then the
    step itself on the device, coloured by its class, its title naming the launch."""
    label, cls, api = _label(s), kernel_class(str(s.name), s.category), _cell(s.launch_api)
    bars = []
    if api and pd.notna(s.launch_us) and pd.notna(s.launch_dur_us):
        bars.append({"row": "launch", "x": float(s.launch_us), "w": float(s.launch_dur_us),
                     "color": LAUNCH_COLOR, "cls": "launch",
                     "title": f"{api}, {_us(s.launch_dur_us)} from {_us(s.launch_us)}\nlaunches {label}"})
    bars.append({"row": "gpu", "x": float(s.start_us), "w": float(s.dur_us), "color": CLASS_COLORS[cls],
                 "cls": cls, "title": _kernel_title(s, label, cls, api)})
    return bars


def _kernel_title(s, label: str, cls: str, api: str | None) -> str:
    """A GPU bar's title: its label; its category (with its class where that differs) and launch grid and block;
    its device time and start; the launch call that launched it, or that the trace lacks it."""
    launched = (f"launched by {api} at {_us(s.launch_us)} ({_us(s.launch_dur_us)} on the host)"
                if api and pd.notna(s.launch_us) else "launch call not in the trace")
    launch_meta = " · ".join(f"{k} {v}" for k, v in (("grid", _cell(s.grid)), ("block", _cell(s.block))) if v)
    kind = (s.category if cls == s.category else f"{s.category} ({cls})") + (f" · {launch_meta}" if launch_meta else "")
    return "\n".join(t for t in (label, kind, f"{_us(s.dur_us)} on the device, from {_us(s.start_us)}", launched) if t)


def nice_ticks(span: float) -> list[float]:
    """Axis ticks over [0, span] (µs): multiples of 1, 2 or 5 times a power of ten, about six of them (the JavaScript
    zoom redraws them by the same rule from where its view starts)."""
    raw = span / 6
    p = 10 ** math.floor(math.log10(raw))
    step = next(m for m in (1, 2, 5, 10) if raw / p <= m) * p
    return [k * step for k in range(int(math.floor(span / step)) + 1)]


_SCRIPT = """<script>
(function () {
  var box = document.getElementById("itl"); if (!box) return;
  var full = +box.dataset.span, left = +box.dataset.left, width = +box.dataset.width;
  var plot = box.querySelector(".itl-plot"), axis = box.querySelector(".itl-axis"), ht = plot.getAttribute("height");
  var zoom = box.querySelector(".itl-zoom"), pan = box.querySelector(".itl-pan"), shown = box.querySelector(".itl-shown");
  var a = 0, w = full;
  function ticks() {
    var raw = w / 6, p = Math.pow(10, Math.floor(Math.log10(raw))), m = [1, 2, 5, 10].find(function (k) { return raw / p <= k; });
    var step = m * p, dec = Math.max(0, -Math.floor(Math.log10(step))), y = +axis.dataset.y, s = "";
    for (var t = Math.ceil(a / step) * step; t <= a + w + 1e-9; t += step) {
      var x = (left + (t - a) / w * width).toFixed(1);
      s += '<line x1="' + x + '" x2="' + x + '" y1="' + (y - 4) + '" y2="' + y + '" stroke="#888"></line>' +
           '<text x="' + x + '" y="' + (y + 12) + '" text-anchor="middle">' + t.toFixed(dec) + '</text>';
    }
    axis.innerHTML = s;
  }
  function draw(sync) {
    w = Math.min(full, Math.max(full / 1024, w)); a = Math.min(full - w, Math.max(0, a));
    plot.setAttribute("viewBox", a + " 0 " + w + " " + ht);
    if (sync) { zoom.value = Math.round(10 * Math.log2(full / w)); pan.value = w < full ? Math.round(1000 * a / (full - w)) : 0; }
    shown.textContent = a.toFixed(1) + "\\u2013" + (a + w).toFixed(1) + " \\u00b5s";
    ticks();
  }
  zoom.addEventListener("input", function () {
    var mid = a + w / 2; w = full / Math.pow(2, zoom.value / 10); a = mid - w / 2; draw(true);
  });
  pan.addEventListener("input", function () { a = (full - w) * pan.value / 1000; draw(false); });
  plot.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = plot.getBoundingClientRect(), t = a + (e.clientX - r.left) / r.width * w, k = e.deltaY > 0 ? 1.25 : 0.8;
    a = t - (t - a) * k; w = w * k; draw(true);
  }, {passive: false});
  plot.addEventListener("dblclick", function () { a = 0; w = full; draw(true); });
  draw(true);
})();
</script>"""


def _lane_svg(y0: float, ln: dict, gpu: bool, href: str) -> tuple[list[str], list[str]]:
    """One lane's SVG pieces at height ``y0``: its labels (the variant, linked to its trace ``href``, with what it shows
    or why not; the row names) and its bars (each with its title, the browser's tooltip). Every text escaped."""
    esc = html.escape
    gpu_bars = [b for b in ln["bars"] if b["row"] == "gpu"]
    what = ("GPU event" if gpu else "top-level aten op") + ("" if len(gpu_bars) == 1 else "s")
    about = (f"forward {ln['forward']}: {len(gpu_bars)} {what}, "
             f"{_us(sum(b['w'] for b in gpu_bars))} {'on the device' if gpu else 'in ops'} "
             f"of a {_us(ln['range_us'])} range; click: its trace") if ln["why"] is None else f"not drawn: {ln['why']}"
    labels = [f'<a href="{esc(href)}"><text x="{LEFT - 44}" y="{y0 + 25}" text-anchor="end" font-weight="bold">'
              f'{esc(ln["variant"])}<title>{esc(about)}</title></text></a>']
    if ln["why"] is not None:
        return labels + [f'<text x="{LEFT + 6}" y="{y0 + 25}" fill="#B00020">not drawn: {esc(ln["why"])}</text>'], []
    rows = ("CPU", "GPU") if gpu else ("range", "aten ops")
    labels.append(f'<text x="{LEFT - 6}" y="{y0 + 15}" text-anchor="end" class="itl-row">{rows[0]}</text>'
                  f'<text x="{LEFT - 6}" y="{y0 + 36}" text-anchor="end" class="itl-row">{rows[1]}</text>')
    # (top, height) of each row; a CPU run's range has a row of its own (the launch calls' row: there are none)
    place = {"range": RANGE_ROW if gpu else LAUNCH_ROW, "launch": LAUNCH_ROW, "gpu": GPU_ROW}
    return labels, [f'<rect class="itl-{b["row"]}" x="{_num(b["x"])}" y="{y0 + place[b["row"]][0]}" width="{_num(b["w"])}" '
                    f'height="{place[b["row"]][1]}" fill="{b["color"]}"><title>{esc(b["title"])}</title></rect>' for b in ln["bars"]]


def _legend(lanes: list[dict], gpu: bool) -> list[tuple[str, str]]:
    """(name, colour) of each kind of bar the lanes draw, in the kernel classes' order."""
    seen = {b["cls"] for ln in lanes for b in ln["bars"]}
    legend = [("forward's range (host)", RANGE_COLOR)]
    return legend + ([("launch call (host)", LAUNCH_COLOR)] + [(c, CLASS_COLORS[c]) for c in KERNEL_CLASSES if c in seen]
                     if gpu else [("top-level aten op (host)", COLORS["cpu"])])


def timeline_html(captures: list[dict], gpu: bool, shape_key: str, range_name: str = "attn_fwd") -> str:
    """The interactive timeline block (HTML: controls, inline SVG, legend, script) of one shape.

    ``captures``: per variant, in the report's order, the dicts of :func:`lane` (variant, status, recipe,
    forwards, source); ``gpu``: a GPU run (else the lanes show the forward's top-level aten ops on the host);
    ``shape_key``: the shape, for each variant's link to its repeat 1's trace (attnprof.model.plan.Layout.capture_link);
    ``range_name``: the forward's range, for the words.
    All variants share one time axis, µs from the start of each forward's range. Returns "" when
    ``captures`` is empty. Raises ValueError as :func:`lane`."""
    lanes = [lane(c, gpu) for c in captures]
    if not lanes:
        return ""
    ends = [b["x"] + b["w"] for ln in lanes for b in ln["bars"]]
    span = max(ends) * 1.02 if ends and max(ends) > 0 else 1.0
    height = LANE * len(lanes)
    esc = html.escape
    pieces = [_lane_svg(i * LANE, ln, gpu, Layout().capture_link("trace", shape_key, ln["variant"]))
              for i, ln in enumerate(lanes)]
    labels, bars = ([svg for piece in pieces for svg in piece[side]] for side in (0, 1))
    ticks = "".join(f'<line x1="{LEFT + t / span * PLOT:.1f}" x2="{LEFT + t / span * PLOT:.1f}" y1="{height}" '
                    f'y2="{height + 4}" stroke="#888"></line><text x="{LEFT + t / span * PLOT:.1f}" '
                    f'y="{height + 16}" text-anchor="middle">{format_number(t)}</text>' for t in nice_ticks(span))
    swatches = "".join(f'<span><i style="background:{color}"></i>{esc(name)}</span>' for name, color in _legend(lanes, gpu))
    svg = (f'<svg class="itl-svg" viewBox="0 0 {WIDTH} {height + AXIS}" width="100%" role="img" '
           f'aria-label="interactive timeline: one forward per variant">'
           f'{"".join(labels)}'
           f'<svg class="itl-plot" x="{LEFT}" y="0" width="{PLOT}" height="{height}" viewBox="0 0 {_num(span)} {height}" '
           f'preserveAspectRatio="none"><rect x="0" y="0" width="{_num(span)}" height="{height}" fill="transparent"></rect>'
           f'{"".join(bars)}</svg>'
           f'<g class="itl-axis" data-y="{height + 4}" font-size="10" fill="#444">{ticks}</g>'
           f'<text x="{LEFT + PLOT}" y="{height + AXIS - 5}" text-anchor="end" font-size="10" fill="#444">µs from the start '
           f'of the forward&#8217;s {esc(range_name)} range</text></svg>')
    controls = ('<div class="itl-controls"><label>zoom <input type="range" class="itl-zoom" min="0" max="100" value="0">'
                '</label> <label>position <input type="range" class="itl-pan" min="0" max="1000" value="0"></label> '
                '<output class="itl-shown"></output> <span class="hint">(or the mouse wheel over the bars; '
                'a double click shows all)</span></div>')
    style = ('<style>#itl .itl-svg{font:11px sans-serif;display:block}#itl .itl-row{font-size:9px;fill:#666}'
             '#itl .itl-plot rect:hover{stroke:#000;stroke-width:1px;vector-effect:non-scaling-stroke}'
             '#itl .itl-legend span{margin-right:1em;white-space:nowrap;font-size:0.85em}'
             '#itl .itl-legend i{display:inline-block;width:0.9em;height:0.9em;margin-right:0.3em;vertical-align:-0.1em}'
             '#itl .itl-controls input{vertical-align:middle}'
             # on screen this block stands in for the static figure (report.html.j2 marks it itl-static), kept for print
             '@media screen{.plotrow figure.itl-static{display:none}}</style>')
    return (f'<div id="itl" class="screen-only" data-span="{_num(span)}" data-left="{LEFT}" data-width="{PLOT}">'
            f'{style}{controls}{svg}<div class="itl-legend">{swatches}</div></div>\n{_SCRIPT}')


def load_captures(rows: list[dict], recipe_paths: list, forward_paths: list, shape_key: str) -> list[dict]:
    """The ``captures`` of :func:`timeline_html` for shape ``shape_key``: per summary row (dicts with variant and
    status, the report's order) its recipe and forward tables, read from ``recipe_paths`` and ``forward_paths``
    (per-capture tables, any shapes; matched by their folders, attnprof.model.plan.Layout.capture_of). A variant
    whose table is not among the paths gets None (its lane says so). Raises ValueError naming the file for an
    unreadable table."""
    def by_variant(paths):  # this shape's tables
        return {w["variant"]: Path(p) for p in paths
                if (w := Layout.capture_of(p, Layout.TABLES)) and w["shape_key"] == shape_key}

    def read(path, reader=pd.read_csv):
        try:
            return reader(path)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
            raise ValueError(f"{path}: unreadable table ({e})") from e

    recipes, forwards = by_variant(recipe_paths), by_variant(forward_paths)
    return [{"variant": (v := r["variant"]), "status": r["status"], "source": str(recipes.get(v, "recipe.csv")),
             "recipe": read(recipes[v], read_recipe) if v in recipes else None,
             "forwards": read(forwards[v]) if v in forwards else None} for r in rows]
