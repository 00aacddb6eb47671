"""Input text the database can store and pages can show: one rule set for every API schema and form.

PostgreSQL rejects NUL characters in text and JSON, and a lone UTF-16 surrogate (``"\\ud800"`` in a
JSON body) cannot be encoded at all: both used to end in a 500. Every string a client sends goes
through :func:`text_problem` (pydantic types below for the API, :func:`form_text_validators` for
forms), so such input is refused with a 4xx that says why, before anything is written.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

# A submitter, endpoint or registry name: it appears in URLs and on the leaderboard.
NAME_MAX = 64
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*")

SHORT_MAX = 255  # labels, model names, suites
LONG_MAX = 20_000  # reasons, notes, messages
JSON_MAX_DEPTH = 20
JSON_MAX_ITEMS = 10_000


def text_problem(value: str, *, max_length: int) -> str | None:
    """Why ``value`` cannot be stored (None when it can)."""
    if len(value) > max_length:
        return f"is {len(value)} characters long; the limit is {max_length}"
    if "\x00" in value:
        return "contains a NUL character"
    if any("\ud800" <= c <= "\udfff" for c in value):
        return "contains a lone UTF-16 surrogate (not valid Unicode)"
    return None


def name_problem(value: str) -> str | None:
    """Why ``value`` is not a name: 1..NAME_MAX characters, a letter or digit first, then letters,
    digits and ``. _ @ + -``, and no ``..`` (a name is a path segment in links)."""
    problem = text_problem(value, max_length=NAME_MAX)
    if problem:
        return problem
    if not value:
        return "is empty"
    if not _NAME.fullmatch(value) or ".." in value:
        return (
            "must start with a letter or digit and use only letters, digits and . _ @ + - "
            f"(no '..', at most {NAME_MAX} characters)"
        )
    return None


def json_problem(value: Any, *, depth: int = 0, budget: list[int] | None = None) -> str | None:
    """Why a JSON value (dicts, lists, strings, numbers) cannot be stored: a bad string or key
    anywhere inside, nesting deeper than JSON_MAX_DEPTH, or more than JSON_MAX_ITEMS values."""
    budget = budget if budget is not None else [JSON_MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0:
        return f"has more than {JSON_MAX_ITEMS} values"
    if depth > JSON_MAX_DEPTH:
        return f"is nested deeper than {JSON_MAX_DEPTH} levels"
    if isinstance(value, str):
        problem = text_problem(value, max_length=LONG_MAX)
        return f"has a string that {problem}" if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = text_problem(str(key), max_length=SHORT_MAX)
            if problem:
                return f"has a key that {problem}"
            problem = json_problem(item, depth=depth + 1, budget=budget)
            if problem:
                return problem
        return None
    if isinstance(value, list | tuple):
        for item in value:
            problem = json_problem(item, depth=depth + 1, budget=budget)
            if problem:
                return problem
    return None


def _text_checker(max_length: int):
    def check(value: str) -> str:
        problem = text_problem(value, max_length=max_length)
        if problem:
            raise ValueError(f"the text {problem}")
        return value

    return check


def _name_check(value: str) -> str:
    problem = name_problem(value)
    if problem:
        raise ValueError(f"the name {problem}")
    return value


def _json_check(value: Any) -> Any:
    problem = json_problem(value)
    if problem:
        raise ValueError(f"the object {problem}")
    return value


def Text(max_length: int = SHORT_MAX) -> Any:  # noqa: N802 (a type factory, used like a type)
    """``field: Text(500)``: a string of at most ``max_length`` characters, no NUL, no lone surrogate."""
    return Annotated[str, Field(max_length=max_length), AfterValidator(_text_checker(max_length))]


Name = Annotated[str, Field(max_length=NAME_MAX), AfterValidator(_name_check)]
ShortText = Text(SHORT_MAX)
LongText = Text(LONG_MAX)
SafeJson = Annotated[dict[str, Any], AfterValidator(_json_check)]


def form_text_validators(max_length: int) -> list:
    """Validators for a Django form field (CharField already refuses NUL; this adds surrogates)."""
    from django.core.exceptions import ValidationError

    def check(value: str) -> None:
        problem = text_problem(value, max_length=max_length)
        if problem:
            raise ValidationError(f"This text {problem}.")

    return [check]


# An absolute POSIX path: a "/" not preceded by a name character (so URLs and "a/b" are left alone).
_ABS_PATH = re.compile(r"(?<![\w.~:/-])/[\w.@+~-]+(?:/[\w.@+~-]*)*")


def scrub_paths(text: str) -> str:
    """``text`` with server paths replaced by ``…/<last part>`` (what a user may see of an error)."""

    def short(match: re.Match) -> str:
        parts = [p for p in match.group(0).split("/") if p]
        return "…/" + parts[-1] if parts else "…"

    return _ABS_PATH.sub(short, text)


def validate_name(value: str) -> None:
    """A model field validator (admin forms) with the rule of :func:`name_problem`."""
    from django.core.exceptions import ValidationError

    problem = name_problem(value)
    if problem:
        raise ValidationError(f"The name {problem}.")
