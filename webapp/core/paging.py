"""Pages of a list: one implementation for the API (``page_slice``) and the pages (``page_of``).

Page size is capped at PAGE_SIZE_MAX everywhere; pages start at 1; a page past the end is empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

PAGE_SIZE_MAX = 100


def page_slice(qs: QuerySet, *, page: int, page_size: int) -> tuple[int, int, int, list]:
    """(count, page, page_size, items); page size capped at PAGE_SIZE_MAX, pages start at 1."""
    page_size = max(1, min(page_size, PAGE_SIZE_MAX))
    page = max(1, page)
    count = qs.count()
    start = (page - 1) * page_size
    return count, page, page_size, list(qs[start : start + page_size])


@dataclass
class Page:
    """One page of a list for a template (``_pagination.html`` draws its links)."""

    items: list
    count: int
    number: int
    size: int
    param: str = "page"
    params: dict[str, Any] = field(default_factory=dict)  # the rest of the query string, kept in links

    @property
    def pages(self) -> int:
        return max(1, -(-self.count // self.size))

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def first_index(self) -> int:
        return (self.number - 1) * self.size + 1 if self.items else 0

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.items) - 1 if self.items else 0


def _page_number(value: Any) -> int:
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def page_of(qs: QuerySet, *, request: Any, size: int, param: str = "page") -> Page:
    """The page of ``qs`` that ``request.GET[param]`` asks for (bad numbers read as 1)."""
    count, number, size, items = page_slice(qs, page=_page_number(request.GET.get(param)), page_size=size)
    params = {k: v for k, v in request.GET.items() if k != param}
    return Page(items=items, count=count, number=number, size=size, param=param, params=params)
