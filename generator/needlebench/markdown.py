"""Text from input data (model, task, config and version names, metadata) made inert for Markdown, CSV and HTML:
shared by the report and the dataset card's changelog (a lower stage must not import the report)."""

from __future__ import annotations

import html
import re
from typing import Any

#: Markdown characters a cell from input data may not use: links and images (``[x](javascript:...)``), table
#: pipes, backslash escapes, code spans (a backtick) and math (``$...$``, which GitHub renders). ``&``, ``<`` and
#: ``>`` become entities, so no raw HTML passes.
MD_SPECIAL = re.compile(r"([\\\[\]|`$])")


#: What GitHub Flavored Markdown turns into a link without brackets (its "autolinks (extension)": ``www.``,
#: ``http://``, ``https://``, ``ftp://`` and e-mail addresses): the ``.`` after ``www``, the ``:`` of ``://`` and
#: the ``@`` of an address get a backslash escape, which splits the text node the extension scans (cmark-gfm
#: extensions/autolink.c).
MD_AUTOLINK = re.compile(r"(?i)(?<=www)\.|:(?=//)|@(?=[\w.+-]*\.\w)")
#: Characters a Markdown, CSV or HTML file from input data may not carry: controls (terminal escapes when the file is
#: shown with ``cat``), bidirectional overrides (text that reads other than it is stored, CVE-2021-42574) and lone
#: surrogates (a file-name byte that is not UTF-8, PEP 383; no UTF-8 file can hold one).
MD_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def plain_text(text: Any) -> str:
    """Text from input data as a CSV cell or HTML text may carry it: each character of :data:`MD_CONTROL` (the
    same the Markdown files drop) as U+FFFD; line breaks and tabs stay."""
    return MD_CONTROL.sub("\ufffd", str(text))


def md_escape(text: str) -> str:
    """Text from input data (model, task and config names, metadata) as inert Markdown: no HTML, no link (no
    autolink either), no table break, no control character; it reads the same once rendered (CommonMark
    backslash escapes and entities)."""
    text = " ".join(str(text).splitlines())
    text = MD_CONTROL.sub("\ufffd", text)
    text = MD_AUTOLINK.sub(lambda match: "\\" + match.group(0), MD_SPECIAL.sub(r"\\\1", text))
    return html.escape(text, quote=False)
