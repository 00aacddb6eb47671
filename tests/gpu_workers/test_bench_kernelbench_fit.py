"""bench/kernelbench_fit.py: what the tasks' announcements put on any schedule of them on one GPU,
from an earlier run's rows."""

from __future__ import annotations

import json


def _row(task: str, total: int, sized: bool = True) -> dict:
    row = {"task": task, "sized": sized}
    if sized:
        row.update({"bytes": {"input_bytes": total // 4, "output_bytes": total // 4, "parameter_bytes": 0},
                    "on_device": True, "announced": {"total": total, "fp64": True}, "fits": True})
    else:
        row["error"] = "not measured"
    return row


def test_the_bound_counts_what_fits_and_the_tasks_that_run_alone(bench_module):
    fit = bench_module("kernelbench_fit")
    rows = [_row("a", 60), _row("b", 30), _row("c", 51), _row("d", 200)]
    rows[-1]["fits"] = False  # more than the GPU admits: never scheduled, so no part of the bound
    bound = fit.schedule_bound(rows, usable=100)
    assert bound == {"gpus": 1.41, "alone": 2, "alone_gpus": 1.11}


def test_rows_of_an_earlier_run_are_summarised_against_the_capacity_asked_for(tmp_path, capsys, bench_module):
    fit = bench_module("kernelbench_fit")
    gb = 10**9
    rows = [_row("big", 80 * gb), _row("small", 10 * gb), _row("other", 10 * gb), _row("unsized", 0, sized=False)]
    path = tmp_path / "fit.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    # 100 GB admitted of a 111.2 GB GPU: everything measured fits, one task runs alone
    assert fit.main(["--rows", str(path), "--capacity", str(int(100 * gb / 0.9)), "--minutes", "10"]) == 0
    out = capsys.readouterr().out
    assert "measured: 3; fit: 3" in out and "unsized: not measured" in out
    assert "add up to 1.0 times what it admits" in out and "that mean is at most 600.0 s" in out
    assert "1 tasks announce more than half" in out and "600.0 s each at most" in out

    # on a GPU admitting 50 GB the big one does not fit, and nothing runs alone
    assert fit.main(["--rows", str(path), "--capacity", str(int(50 * gb / 0.9)), "--minutes", "10"]) == 0
    out = capsys.readouterr().out
    assert "measured: 3; fit: 2" in out and "big: announces 80,000,000,000 bytes" in out
    assert "add up to 0.4 times" in out and "more than half" not in out
