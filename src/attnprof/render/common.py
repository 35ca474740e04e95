"""What every page of render shares: the jinja2 environment and its filters (the number format, a range, a setting,
a cuDNN version, a capture's reason), the PNG as a data URI, and the PDF of a page's HTML (WeasyPrint).

The pages, one module each, turn a result into a template context and nothing else: :mod:`attnprof.render.report`
(a result set's report), :mod:`attnprof.render.compare` (the comparison of result sets); a new page type (the
history of a run's result sets) gets its own module beside them, with its template in report/.
"""

from __future__ import annotations

import base64
import logging.handlers
import math
from pathlib import Path

import jinja2

from attnprof.findings.brief import short_reason
from attnprof.findings.ranking import spread_words
from attnprof.model.columns import columns_of
from attnprof.model.fmt import format_range, format_value
from attnprof.render.breaks import mark_breaks


class RenderError(RuntimeError):
    """WeasyPrint logged an error (a missing image, a broken stylesheet): the PDF would be
    silently incomplete, so the job fails instead."""


def data_uri(path: Path) -> str:
    """PNG file as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def setting(value) -> str:
    """Jinja filter: an environment or config value as a reader writes it: 'not recorded' for None, a list's items
    and a mapping's ``key=value`` pairs joined by ', ' (a list of mappings: each in parentheses), never a Python repr."""
    if value is None:
        return "not recorded"
    if isinstance(value, dict):
        return ", ".join(f"{k}={setting(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(f"({setting(v)})" if isinstance(v, dict) else setting(v) for v in value) or "none"
    return format_value(value)


def cudnn_version(value) -> str:
    """torch.backends.cudnn.version()'s integer as major.minor.patch: cuDNN 9 encodes
    major*10000 + minor*100 + patch (91900 -> 9.19.0), cuDNN 8 major*1000 + minor*100 + patch
    (8902 -> 8.9.2); anything else comes back as text."""
    if not isinstance(value, int) or value <= 0:
        return "" if value is None else str(value)
    major, rest = divmod(value, 10000 if value >= 10000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def to_range(lo, hi, digits: int = 3) -> str:
    """Jinja filter ``to``: a range of two values, each as attnprof.model.fmt.format_value writes it, in the one format of a range
    (attnprof.model.fmt.format_range: an en dash between the ends)."""
    return format_range(format_value(lo, digits), format_value(hi, digits))


def render_html(context: dict, template_dir: Path, template: str = "report.html.j2") -> str:
    """Render a page's template (``template`` in ``template_dir``: report/) with autoescaping on (every value is HTML-escaped
    unless the template marks it safe; only the embedded CSS is)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = format_value
    env.filters["cudnn"] = cudnn_version
    env.filters["reason"] = short_reason
    env.filters["setting"] = setting
    env.filters["to"] = to_range  # {{ lo | to(hi) }}: a range, its ends in the number format (attnprof.model.fmt)
    env.globals["spread_words"] = spread_words  # the label of a time's interval (attnprof.findings.ranking)
    env.globals["columns"] = columns_of("summary")  # the summary table's headers (attnprof.model.columns)
    return env.get_template(template).render(**context)


def render_pdf(html_path: Path, pdf_path: Path) -> None:
    """Render ``html_path`` to ``pdf_path`` with WeasyPrint. Raises RenderError if WeasyPrint
    logs any error (it would otherwise write a PDF with the broken part missing), ImportError
    with an install hint when WeasyPrint or Pango is missing."""
    try:
        import weasyprint
    except (ImportError, OSError) as exc:  # OSError: Pango not found
        raise ImportError(f"report.pdf needs WeasyPrint and Pango ({exc}); on Debian: apt-get install libpango-1.0-0 "
                          "libpangoft2-1.0-0, then pip install weasyprint. Render elsewhere with "
                          "`snakemake --cores 1 results/<run>/report.pdf`") from exc

    handler = logging.handlers.BufferingHandler(capacity=math.inf)  # keeps every record: never flushes them away
    handler.setLevel(logging.ERROR)
    logger = logging.getLogger("weasyprint")
    logger.addHandler(handler)
    try:
        # printed, an identifier wraps only after its _, :: or , and an interval not at all (attnprof.render.breaks)
        html = weasyprint.HTML(string=mark_breaks(Path(html_path).read_text(encoding="utf-8")),
                               base_url=str(Path(html_path).parent))
        html.write_pdf(str(pdf_path))
    finally:
        logger.removeHandler(handler)
    errors = [record.getMessage() for record in handler.buffer]
    if errors:
        Path(pdf_path).unlink(missing_ok=True)
        raise RenderError("WeasyPrint reported errors: " + "; ".join(errors[:5]))
