"""Plotly figures for the leaderboard, task, kernel and submitter pages, built in Python and drawn by
static/arena/charts.js.

Names come from users: they are HTML-escaped before they reach Plotly (which renders a subset of HTML
in labels), and the figure JSON travels in a ``json_script`` block.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

import plotly.graph_objects as go

from . import metrics
from .models import Evaluation
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


def _chart(cid: str, figure: dict) -> dict:
    return {"id": cid, "data_id": f"{cid}-data", "figure": figure}


def task_best_speedups(best: Sequence[TaskEntry]) -> list[dict]:
    """Each submitter's best correct kernel on one task, vs eager and vs torch.compile."""
    passed = [e for e in best if e.passed and e.speedup_eager]
    if not passed:
        return []
    names = [html.escape(e.submitter_name) for e in passed]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=[e.speedup_eager for e in passed], name="vs eager"))
    fig.add_trace(go.Bar(x=names, y=[e.speedup_compile for e in passed], name="vs torch.compile"))
    fig.add_hline(y=1.0, line_dash="dot")  # 1×: as fast as the baseline
    fig.update_layout(
        title="Best correct kernel per submitter: speedup (×, log scale)",
        barmode="group",
        yaxis={"type": "log", "title": "speedup (×)"},
        **LAYOUT,
    )
    return [_chart("chart-task", _figure_json(fig))]


def kernel_timings(evaluations: Sequence[Evaluation]) -> list[dict]:
    """Median times of the kernel and its baselines, one group per finished evaluation."""
    timed = [e for e in evaluations if e.is_finished and isinstance(e.timings_ms, dict) and e.timings_ms]
    if not timed:
        return []
    labels = [f"#{e.pk} {e.track} ({e.status})" for e in timed]
    fig = go.Figure()
    for key, name in (("kernel", "kernel"), ("eager", "eager PyTorch"), ("compile", "torch.compile")):
        values = [e.timings_ms.get(key) for e in timed]
        values = [v if isinstance(v, int | float) and not isinstance(v, bool) else None for v in values]
        if any(v is not None for v in values):
            fig.add_trace(go.Bar(x=labels, y=values, name=name))
    fig.update_layout(
        title="Median time per call (ms): the kernel and its baselines",
        barmode="group",
        yaxis={"title": "ms", "rangemode": "tozero"},
        **LAYOUT,
    )
    return [_chart("chart-kernel", _figure_json(fig))]


def submitter_tasks(entries_by_slice: Sequence[tuple[str, Sequence[TaskEntry]]]) -> list[dict]:
    """A submitter's best speedup vs eager per task, one trace per (track, hardware) slice;
    failed tasks sit at the bottom edge with their verdict in the hover text."""
    fig = go.Figure()
    shown = False
    for label, entries in entries_by_slice:
        if not entries:
            continue
        shown = True
        fig.add_trace(
            go.Scatter(
                x=[html.escape(e.task_name) for e in entries],
                y=[e.speedup_eager if e.passed and e.speedup_eager else None for e in entries],
                mode="markers",
                marker={"size": 10},
                name=html.escape(label),
                text=[
                    "confirmed hack" if e.confirmed_hack else ("passed" if e.passed else html.escape(e.status))
                    for e in entries
                ],
                hovertemplate="%{x}: %{y:.2f}× (%{text})",
            )
        )
    if not shown:
        return []
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(
        title="Best correct kernel per task: speedup vs eager (×, log scale; failed tasks have no point)",
        yaxis={"type": "log", "title": "speedup vs eager (×)"},
        **LAYOUT,
    )
    return [_chart("chart-submitter", _figure_json(fig))]
