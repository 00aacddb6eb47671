"""Importers: good rows land, bad rows are reported with their line and reason."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from webapp.arena import importers
from webapp.arena.models import Evaluation, Kernel, Task

pytestmark = pytest.mark.django_db

GOOD = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
"""


def _kernelbench(tmp_path):
    (tmp_path / "KernelBench" / "level1").mkdir(parents=True)
    (tmp_path / "KernelBench" / "level2").mkdir()
    (tmp_path / "KernelBench" / "level1" / "1_Double.py").write_text(GOOD)
    (tmp_path / "KernelBench" / "level1" / "2_Broken.py").write_text("class Model(:\n")
    (tmp_path / "KernelBench" / "level2" / "1_NoInputs.py").write_text("class Model: pass\n")
    (tmp_path / "KernelBench" / "level2" / "2_Double.py").write_text(GOOD)
    return tmp_path


def test_kernelbench_import_reports_bad_files_and_keeps_good_ones(tmp_path):
    root = _kernelbench(tmp_path)

    report = importers.tasks_import_kernelbench(path=root)

    assert (report.created, len(report.errors)) == (2, 2)
    reasons = [str(e) for e in report.errors]  # in file order: level1 before level2
    assert reasons[0].endswith(
        "level1/2_Broken.py: the task file is not valid Python: invalid syntax (line 1)"
    )
    assert reasons[1].endswith(
        "level2/1_NoInputs.py: the task file does not define get_inputs, get_init_inputs"
    )
    assert sorted(Task.objects.values_list("level", "name")) == [(1, "1_Double"), (2, "2_Double")]


def test_kernelbench_import_twice_changes_nothing(tmp_path):
    root = _kernelbench(tmp_path)
    importers.tasks_import_kernelbench(path=root)

    report = importers.tasks_import_kernelbench(path=root)

    assert (report.created, report.updated, report.skipped) == (0, 0, 2)


def test_kernelbench_command_on_a_folder_without_levels_fails_clearly(tmp_path):
    with pytest.raises(CommandError, match="no level1..level3 folders"):
        call_command("import_kernelbench", str(tmp_path))


def test_training_tasks_jsonl_with_bad_rows(tmp_path):
    path = tmp_path / "ops.jsonl"
    rows = [
        json.dumps({"ops": ["mul"], "data_source": "ops6k", "code": GOOD}),
        "{not json",
        json.dumps({"ops": ["mul"], "data_source": "ops6k"}),
        "",
        json.dumps({"ops": "relu,add", "data_source": "ops6k", "code": GOOD.replace("x * 2", "x * 3")}),
        json.dumps({"ops": ["x"], "code": "def get_inputs(): pass"}),
        json.dumps([1, 2]),
    ]
    path.write_text("\n".join(rows) + "\n")

    report = importers.tasks_import_training(path=path)

    assert report.created == 2
    assert [(e.line, e.reason.split(":")[0]) for e in report.errors] == [
        (2, "not valid JSON"),
        (3, "missing 'code'"),
        (6, "the task file does not define Model, get_init_inputs"),
        (7, "a row must be a JSON object"),
    ]
    assert sorted(tuple(t.ops) for t in Task.objects.filter(suite="training")) == [("mul",), ("relu", "add")]
    assert set(Task.objects.values_list("data_source", flat=True)) == {"ops6k"}


def test_training_tasks_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "ops.parquet"
    pq.write_table(
        pa.table({"ops": [["mul"], ["add"]], "data_source": ["a", "b"], "code": [GOOD, "nope("]}), path
    )

    report = importers.tasks_import_training(path=path)

    assert report.created == 1
    assert [e.line for e in report.errors] == [2]


def test_kernels_jsonl_import_queues_evaluations_and_reports_bad_rows(tmp_path, make_task, new_kernel_source):
    make_task(suite="kernelbench", level=1, name="19_ReLU")
    path = tmp_path / "kernels.jsonl"
    rows = [
        {"level_id": 1, "task_id": 19, "custom_code": new_kernel_source()},
        {"level_id": 1, "task_id": 20, "custom_code": new_kernel_source()},
        {"level_id": "one", "task_id": 19, "custom_code": new_kernel_source()},
        {"level_id": 1, "task_id": 19, "custom_code": "import torch\n"},
        {"level_id": 1, "task_id": 19},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))

    report = importers.kernels_import(submitter_name="cuda-l1", path=path, track="open")

    assert (report.created, report.queued) == (1, 1)
    assert [(e.line, e.reason) for e in report.errors] == [
        (2, "no task 20 in level 1 of suite 'kernelbench'"),
        (3, "level_id and task_id must be integers"),
        (4, "the kernel file does not define ModelNew"),
        (5, "missing 'custom_code'"),
    ]
    evaluation = Evaluation.objects.get()
    assert (evaluation.status, evaluation.track, evaluation.kernel.origin) == ("queued", "open", "import")
    assert evaluation.kernel.metadata == {"level_id": 1, "task_id": 19}


def test_kernels_folder_import(tmp_path, make_task, new_kernel_source):
    make_task(suite="kernelbench", level=1, name="19_ReLU")
    make_task(suite="kernelbench", level=2, name="3_Conv")
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "19_ReLU.py").write_text(new_kernel_source())
    (tmp_path / "level_2_problem_3.py").write_text(new_kernel_source())
    (tmp_path / "notes.py").write_text(new_kernel_source())

    report = importers.kernels_import(submitter_name="gen", path=tmp_path)

    assert report.created == 2
    assert [e.reason for e in report.errors] == ["cannot tell level and task from the file name"]
    assert sorted(Kernel.objects.values_list("task__name", flat=True)) == ["19_ReLU", "3_Conv"]


def test_builtin_suite_import():
    report = importers.tasks_import_suite()

    assert report.errors == []
    assert report.created == Task.objects.filter(suite=importers.BUILTIN_SUITE).count() > 0
    assert importers.tasks_import_suite().skipped == report.created


def test_import_endpoint_for_training_tasks_needs_staff(client, api_token, staff_token):
    from django.core.files.uploadedfile import SimpleUploadedFile

    body = (json.dumps({"ops": ["mul"], "data_source": "x", "code": GOOD}) + "\n{bad\n").encode()

    not_staff = client.post(
        "/api/import/training-tasks",
        {"file": SimpleUploadedFile("t.jsonl", body)},
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )
    tasks_after_refusal = Task.objects.count()
    response = client.post(
        "/api/import/training-tasks",
        {"file": SimpleUploadedFile("t.jsonl", body)},
        HTTP_AUTHORIZATION=f"Bearer {staff_token}",
    )
    anonymous = client.post("/api/import/training-tasks", {"file": SimpleUploadedFile("t.jsonl", body)})

    assert (not_staff.status_code, tasks_after_refusal) == (403, 0)
    assert "needs a staff user's token" in not_staff.json()["detail"]
    assert response.status_code == 200
    assert response.json()["created"] == 1
    assert response.json()["errors"][0]["line"] == 2
    assert anonymous.status_code == 401


def test_kernelbench_endpoint_needs_staff(client, api_token, staff_token, tmp_path):
    root = _kernelbench(tmp_path)

    refused = client.post(
        "/api/import/kernelbench",
        {"path": str(root)},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )
    accepted = client.post(
        "/api/import/kernelbench",
        {"path": str(root)},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {staff_token}",
    )

    assert refused.status_code == 403
    assert accepted.status_code == 200
    assert accepted.json()["created"] == 2
