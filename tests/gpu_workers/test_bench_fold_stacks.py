"""bench/fold_stacks.py: py-spy's collapsed stacks folded into shares, and the GIL's share of instants."""

from __future__ import annotations


def test_stacks_fold_by_leaf_and_by_any_frame(tmp_path, capsys, bench_module):
    fold_stacks = bench_module("fold_stacks")
    lines = ["run (a.py:1);judge (b.py:2);compare (c.py:3) 30", "run (a.py:1);recv (d.py:4) 10",
             "run (a.py:1);judge (b.py:2) 10", "not a line", ""]
    total, leaves, anywhere = fold_stacks.fold(lines)
    assert total == 50
    assert leaves["compare (c.py:3)"] == 30 and leaves["judge (b.py:2)"] == 10
    assert anywhere["judge (b.py:2)"] == 40 and anywhere["run (a.py:1)"] == 50

    path = tmp_path / "gil.txt"
    path.write_text("\n".join(lines))
    assert fold_stacks.main([str(path), "--rate", "10", "--seconds", "10"]) == 0
    out = capsys.readouterr().out
    assert "50 samples" in out and "held the GIL in 50% of 100 instants" in out
    assert "60.0%  compare (c.py:3)" in out
