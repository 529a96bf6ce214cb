"""A chat message as the rich text its bubble shows: the Markdown as Qt reads it, and each fenced code block
highlighted by Pygments in the colours of the theme (light or dark) with the language its fence names."""

from __future__ import annotations

import html
import re

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound
from PySide6.QtGui import QTextDocument

# A fence, its language (the first word after the backticks) and its code; an unclosed one while it streams.
FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_BODY = re.compile(r"<body[^>]*>(.*)</body>", re.DOTALL)
_HEAD = "<style>p, li { white-space: pre-wrap; }</style>"
STYLES = {False: "default", True: "monokai"}  # by whether the theme is dark
_FORMATTERS = {dark: HtmlFormatter(noclasses=True, style=style, nowrap=True) for dark, style in STYLES.items()}
BACKGROUNDS = {dark: formatter.style.background_color for dark, formatter in _FORMATTERS.items()}


def message_html(markdown: str, dark: bool) -> str:
    parts, end = [_HEAD], 0
    for fence in FENCE.finditer(markdown):
        parts.append(_markdown_html(markdown[end : fence.start()]))
        parts.append(code_html(fence.group(2).rstrip("\n"), fence.group(1), dark))
        end = fence.end()
    parts.append(_markdown_html(markdown[end:]))
    return "".join(parts)


def code_html(code: str, language: str, dark: bool) -> str:
    """One code block: a table cell gives it the style's background, as Qt's rich text draws backgrounds there."""
    spans = highlight(code, _lexer(language), _FORMATTERS[dark]) if code else ""
    return (
        f'<table width="100%" cellpadding="6" style="background-color: {BACKGROUNDS[dark]}; margin: 4px 0px;">'
        f'<tr><td><pre style="margin: 0px;">{spans}</pre></td></tr></table>'
    )


def _lexer(language: str) -> Lexer:
    try:
        return get_lexer_by_name(language.lower()) if language else TextLexer()
    except ClassNotFound:
        return TextLexer()


def _markdown_html(markdown: str) -> str:
    if not markdown.strip():
        return ""
    document = QTextDocument()
    document.setMarkdown(markdown)
    body = _BODY.search(document.toHtml())
    return body.group(1) if body else html.escape(markdown)
