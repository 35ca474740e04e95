"""Words broken across lines in a PDF (issue 35 item 5): an identifier (a variant, column, kernel or config name) or an
interval (``a–b``) that the renderer split inside, read back from the PDF with pdfplumber and judged against the text
of the HTML it was rendered from.

A line break inside a word of the HTML is allowed only where the report allows one: after ``_``, ``::``, ``,``, ``/``
or a zero-width space (U+200B, which the templates put after an identifier's underscores), and after the hyphen of an
English compound (letters on both sides: ``cross-shape``). Anything else (``EFFICIENT_ATTENTI|ON``, ``rel. er-|ror``,
``cudaLaunchKe|rnel``, ``0.943–|1.255``) is a broken word."""
from __future__ import annotations

import html as html_lib
import re
from pathlib import Path

import pdfplumber

ZWSP = "\u200b"
#: what may end the first part of a word broken across lines
ALLOWED_AFTER = ("_", "::", ",", "/", ZWSP)
#: characters a word of running text starts or ends with that are not part of it
EDGE = "()[]{};:.,'\"“”‘’«»*"
COMPOUND = re.compile(r"[A-Za-z]{2,}-$")


def html_words(html: str) -> tuple[set[str], str]:
    """(every whitespace-separated word of the HTML's text without its zero-width spaces and edge punctuation, the
    text itself with whitespace collapsed). Style and script elements are not text."""
    body = re.sub(r"<(style|script)\b.*?</\1>", " ", html, flags=re.S | re.I)
    body = re.sub(r"<br\s*/?>|</(td|th|tr|li|p|div|h\d)>", " ", body, flags=re.I)
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", body)).replace(ZWSP, "").replace("\u00a0", " ")
    text = " ".join(text.split())
    return {w.strip(EDGE) for w in text.split()} - {""}, text


def _blocks(page) -> list[str]:
    """The text of every table cell of ``page``, and the page's text outside its tables, each as one block."""
    tables = page.find_tables()
    blocks = []
    for table in tables:
        for row in table.rows:
            for cell in row.cells:
                if cell is not None:
                    blocks.append(page.crop(cell).extract_text() or "")

    def outside(obj):
        return not any(t.bbox[0] <= obj["x0"] and obj["x1"] <= t.bbox[2] + 0.5 and t.bbox[1] <= obj["top"]
                       and obj["bottom"] <= t.bbox[3] + 0.5 for t in tables)
    blocks.append(page.filter(outside).extract_text() or "" if tables else page.extract_text() or "")
    return blocks


def broken_words(pdf_path: Path, html: str) -> list[str]:
    """'page N: left|right' for every word of ``html`` that ``pdf_path`` breaks across lines where it may not."""
    words, text = html_words(html)
    problems = []
    with pdfplumber.open(pdf_path) as pdf:
        for number, page in enumerate(pdf.pages, 1):
            for block in _blocks(page):
                lines = [ln.split() for ln in block.splitlines() if ln.strip()]
                for first, second in zip(lines, lines[1:]):
                    left, right = first[-1], second[0]
                    if left.endswith(ALLOWED_AFTER):
                        continue
                    joined = (left + right).replace(ZWSP, "").strip(EDGE)
                    if COMPOUND.search(left.replace(ZWSP, "")) and joined in words:
                        continue  # an English compound, broken after its hyphen
                    candidates = {joined}
                    if left.endswith("-"):  # a hyphen WeasyPrint added to break a word
                        candidates.add((left[:-1] + right).replace(ZWSP, "").strip(EDGE))
                    spaced = f"{left} {right}".replace(ZWSP, "")
                    if candidates & words and spaced not in text:
                        problems.append(f"page {number}: {left}|{right}")
    return problems
