"""What a server said, in one short line: an HTML error page becomes its title, anything else its
first words, whitespace collapsed (a reason line is never a dump of a page or a megabyte line)."""

from __future__ import annotations

import html
import re

LIMIT = 160
_TITLE = re.compile(r"<(title|h1)[^>]*>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


def body_summary(text: str, limit: int = LIMIT) -> str:
    """One line of at most ``limit`` characters saying what ``text`` (a response body) is."""
    sample = text[:20_000]
    if re.search(r"<\s*(!doctype|html|head|body)\b", sample, re.IGNORECASE):
        found = _TITLE.search(sample)
        inner = found.group(2) if found else _TAG.sub(" ", sample)
        words = " ".join(html.unescape(_TAG.sub(" ", inner)).split())
        return _cut(f"HTML page: {words or 'no title'}", limit)
    return _cut(" ".join(sample.split()) or "(empty body)", limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"
