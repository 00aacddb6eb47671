"""Finds plotly.min.js inside the installed plotly package and serves it as static/vendor/plotly.min.js."""

from __future__ import annotations

from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_PATH = "vendor/plotly.min.js"


def _plotly_dir() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data"


class PlotlyFinder(BaseFinder):
    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        if path != PLOTLY_STATIC_PATH:
            # Django's own finders answer "not here" with [] either way; finders.find() collects a None
            # into its result list, which then reads as a match ([None]) and fails on every missing file.
            return []
        match = str(_plotly_dir() / "plotly.min.js")
        return [match] if find_all else match

    def list(self, ignore_patterns):
        storage = FileSystemStorage(location=str(_plotly_dir()))
        storage.prefix = "vendor"
        yield "plotly.min.js", storage
