"""Template helpers: highlighted source (Pygments escapes it), number formats, query strings."""

from __future__ import annotations

from django import template
from django.utils.http import urlencode
from django.utils.safestring import mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from webapp.arena import findings

register = template.Library()
_FORMATTER = HtmlFormatter(linenos="table", cssclass="highlight")


@register.filter
def highlight_python(source: str) -> str:
    # Pygments HTML-escapes every token, so the result is safe to mark as such.
    return mark_safe(highlight(source or "", PythonLexer(), _FORMATTER))


def _number(value) -> float | None:
    """Numbers from rows and JSON; a missing key renders as "" in templates, so anything else is None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@register.filter
def pct(value) -> str:
    number = _number(value)
    return "–" if number is None else f"{100 * number:.1f}%"


@register.filter
def times(value) -> str:
    number = _number(value)
    return "–" if number is None else f"{number:.2f}×"


@register.filter
def ms(value) -> str:
    number = _number(value)
    return "–" if number is None else f"{number:.3f} ms"


@register.simple_tag
def query(params: dict, **changes) -> str:
    """A query string from ``params`` with ``changes`` applied (None removes a key)."""
    merged = {k: v for k, v in params.items() if v not in (None, "")}
    for key, value in changes.items():
        if value in (None, ""):
            merged.pop(key, None)
        else:
            merged[key] = value
    return "?" + urlencode(merged) if merged else "?"


@register.simple_tag
def page_link(page, number) -> str:
    """The query string of another page of a ``webapp.core.paging.Page`` (its other parameters kept)."""
    return query(page.params, **{page.param: number})


@register.filter
def finding_kind(finding) -> str:
    """hack, not_custom or review (see webapp.arena.findings)."""
    return findings.finding_kind(finding) if isinstance(finding, dict) else findings.REVIEW


@register.filter
def finding_label(finding) -> str:
    return findings.LABELS[finding_kind(finding)]
