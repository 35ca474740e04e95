"""Where a rendered report may break a line (issue 35 item 5): never inside an identifier or an interval.

Applied to the finished HTML of the report and the comparison as it is printed (attnprof.render.common.render_pdf),
so that every template and every sentence made in Python gets the same rule; the HTML file itself is left as it is:

- an interval (``0.943–1.255``, ``min–max``: an en dash between two words) is wrapped in ``<span class="iv">``, which
  report/report.css keeps on one line;
- an identifier (a word with ``_`` or ``::``: a variant, kernel, op, column or config name; or a list with ``,`` and
  no space) gets ``<wbr>`` after each ``_``, ``::`` and ``,``, the only places a cell too narrow for it may wrap it.
  (WeasyPrint draws ``<wbr>`` as a zero-width space, report/report.css);
- an arrow ``->`` (the profiler's ``Memcpy DtoD (Device -> Device)``) and a command-line option (``--forcerun``) are
  kept whole.

The text of ``<style>``, ``<script>``, ``<title>`` and of tags' attributes is left alone."""
from __future__ import annotations

import re

#: markup left as it is: elements whose content is not text to wrap, and any tag (with its attributes)
_SKIP = re.compile(r"(<(style|script|title|textarea)\b.*?</\2\s*>|<[^>]*>)", re.S | re.I)
#: an interval: a word, an en dash (character or entity), a word; words are numbers or letters, no spaces
_INTERVAL = re.compile(r"(?<![\w.+\-−])([-−]?[\w.+]+(?:e-\d+)?)(–|&ndash;)([-−]?[\w.+]+(?:e-\d+)?)")
#: a command-line option (--forcerun), which a line would otherwise break after its dashes
_OPTION = re.compile(r"(?<![^\s>(])(--[A-Za-z][\w-]*)")
#: a word (no spaces, no markup) holding an identifier's separator
_WORD = re.compile(r"[^\s<>]*(?:_|::|,(?=[^\W\d]))[^\s<>]*")
#: after these an identifier may wrap (a comma only before a letter: 163,972 stays a number)
_SEPARATOR = re.compile(r"(::|_|,(?=[^\W\d]))(?=\S)")


def _identifier(match: re.Match) -> str:
    return _SEPARATOR.sub(r"\1<wbr>", match.group(0))


def _text(text: str) -> str:
    text = _INTERVAL.sub(r'<span class="iv">\1\2\3</span>', text).replace(" -&gt; ", ' <span class="iv">-&gt;</span> ')
    text = _OPTION.sub(r'<span class="iv">\1</span>', text)
    # the interval's span is markup now: mark identifiers in the text around and inside it, not in the tag
    return "".join(part if part.startswith("<") else _WORD.sub(_identifier, part)
                   for part in re.split(r"(<[^>]*>)", text))


def mark_breaks(html: str) -> str:
    """``html`` with its intervals kept on one line and its identifiers breakable only after ``_``, ``::`` or ``,``."""
    out, pos = [], 0
    for m in _SKIP.finditer(html):
        out.append(_text(html[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_text(html[pos:]))
    return "".join(out)
