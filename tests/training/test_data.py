import json

import pytest

from gpu_workers.suite import get_task
from training.data import (
    TrainingTask,
    check_contamination,
    normalise_source,
    ops_jsonl_tasks,
    similarity,
    suite_tasks,
)

ORIGINAL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix multiply then ReLU."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):  # the reference
        return torch.relu(torch.matmul(a, b)) * self.scale
'''
RENAMED = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor
    def forward(self, left, right):
        return torch.relu(torch.matmul(left, right)) * self.factor
'''


def test_normalise_drops_comments_docstrings_and_renames_locals():
    tokens = normalise_source(ORIGINAL)
    assert "Matrix" not in " ".join(tokens) and "#" not in " ".join(tokens)
    assert tokens == normalise_source(RENAMED)
    assert "matmul" in tokens and "relu" in tokens  # API names after a dot keep their spelling


def test_similarity_of_a_renamed_copy_is_one_and_of_another_op_is_low():
    assert similarity(ORIGINAL, RENAMED) == 1.0
    assert similarity(ORIGINAL, RENAMED, method="difflib") == 1.0
    other = get_task("softmax").task_source
    assert similarity(ORIGINAL, other) < 0.3


def test_contamination_refuses_copies_of_eval_tasks():
    silu = get_task("silu").task_source
    disguised = "# training copy\n" + silu.replace("x", "inp").replace('"""SiLU', '"""Swish')
    train = [TrainingTask("copy_of_silu", disguised), TrainingTask("matmul_relu", ORIGINAL)]
    report = check_contamination(train, {"silu": silu}, threshold=0.6)
    assert [t.name for t in report.kept] == ["matmul_relu"]
    assert report.refused == [{"task": "copy_of_silu", "closest_eval_task": "silu", "score": 1.0}]


def test_ops_jsonl_rows(tmp_path):
    path = tmp_path / "ops.jsonl"
    path.write_text(json.dumps({"ops": ["matmul", "relu"], "data_source": "ops6k", "code": ORIGINAL}) + "\n\n")
    (task,) = ops_jsonl_tasks(path)
    assert (task.name, task.ops, task.data_source) == ("ops_00001", ("matmul", "relu"), "ops6k")
    path.write_text('{"ops": []}\n')
    with pytest.raises(ValueError, match="no 'code'"):
        ops_jsonl_tasks(path)


def test_suite_tasks_come_with_sources():
    tasks = {t.name: t for t in suite_tasks("cpu")}
    assert "silu" in tasks and "class Model" in tasks["silu"].task_source
    assert tasks["silu"].data_source == "suite"
