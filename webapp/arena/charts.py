"""Plotly figures for the leaderboard page, built in Python and drawn by static/arena/charts.js.

Names come from users: they are HTML-escaped before they reach Plotly (which renders a subset of HTML
in labels), and the figure JSON travels in a ``json_script`` block.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

import plotly.graph_objects as go

from . import metrics
from .selectors import TaskEntry

LAYOUT = {"margin": {"l": 50, "r": 20, "t": 40, "b": 50}, "height": 360, "template": "plotly_white"}


def _by_submitter(entries: Sequence[TaskEntry]) -> dict[str, list[TaskEntry]]:
    groups: dict[str, list[TaskEntry]] = {}
    for entry in entries:
        groups.setdefault(html.escape(entry.submitter_name), []).append(entry)
    return groups


def _figure_json(fig: go.Figure) -> dict:
    return json.loads(fig.to_json())


def speedup_distribution(entries: Sequence[TaskEntry]) -> dict:
    fig = go.Figure()
    for name, group in _by_submitter(entries).items():
        values = [e.speedup_eager for e in group if e.passed and e.speedup_eager]
        fig.add_trace(go.Box(y=values, name=name, boxpoints="all", jitter=0.4))
    fig.update_layout(
        title="Speedup vs eager of correct kernels",
        yaxis={"type": "log", "title": "speedup (×)"},
        showlegend=False,
        **LAYOUT,
    )
    return _figure_json(fig)


def per_level_bars(entries: Sequence[TaskEntry]) -> dict:
    fig = go.Figure()
    levels = sorted({e.task_level for e in entries if e.task_level is not None})
    for name, group in _by_submitter(entries).items():
        values = []
        for level in levels:
            outcomes = [e.outcome for e in group if e.task_level == level]
            value = metrics.fast_p(outcomes, p=1.0, baseline="eager")
            values.append(value if value is not None else 0.0)
        fig.add_trace(go.Bar(x=[f"level {lv}" for lv in levels], y=values, name=name))
    fig.update_layout(
        title="fast_1 vs eager per level",
        barmode="group",
        yaxis={"range": [0, 1], "tickformat": ".0%"},
        **LAYOUT,
    )
    return _figure_json(fig)


def eager_vs_compile(entries: Sequence[TaskEntry]) -> dict:
    fig = go.Figure()
    for name, group in _by_submitter(entries).items():
        points = [e for e in group if e.passed and e.speedup_eager and e.speedup_compile]
        fig.add_trace(
            go.Scatter(
                x=[e.speedup_eager for e in points],
                y=[e.speedup_compile for e in points],
                mode="markers",
                name=name,
                text=[html.escape(e.task_name) for e in points],
                hovertemplate="%{text}<br>eager %{x:.2f}× · compile %{y:.2f}×",
            )
        )
    fig.update_layout(
        title="Speedup vs eager against speedup vs torch.compile",
        xaxis={"type": "log", "title": "vs eager (×)"},
        yaxis={"type": "log", "title": "vs compile (×)"},
        **LAYOUT,
    )
    return _figure_json(fig)


def leaderboard_charts(entries: Sequence[TaskEntry]) -> list[dict]:
    charts = [
        ("chart-distribution", speedup_distribution(entries)),
        ("chart-levels", per_level_bars(entries)),
        ("chart-scatter", eager_vs_compile(entries)),
    ]
    return [{"id": cid, "data_id": f"{cid}-data", "figure": figure} for cid, figure in charts]
