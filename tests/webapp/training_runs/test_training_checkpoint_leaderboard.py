"""A training checkpoint on the leaderboard: exported as a Hugging Face directory, evaluated on a
suite through the agent (a real rollout job, the real CPU evaluator), its passing kernel stored
under the checkpoint's submitter; the API endpoint, the admin action and the command call the
same service."""

from __future__ import annotations

import json

import pytest
import torch
from django.core.management import CommandError, call_command

from agent.prompts import system_prompt, task_prompt
from gpu_workers.suite import get_task
from training.checkpoint import RunState, checkpoint_dir, save_checkpoint
from training.policy import ByteTokenizer, ModelSpec, build_model
from training.recipes import tiny_cpu_grpo
from webapp.arena import selectors as arena_selectors
from webapp.rollouts import services as rollout_services
from webapp.training_runs import services
from webapp.training_runs.models import TrainingRun

KERNEL = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)
"""
REPLY = f"A SiLU is x times its sigmoid.\n```python\n{KERNEL}```\n"
SETTINGS = {"track": "open", "device": "cpu", "max_turns": 1, "temperature": 0.0, "baselines": ["eager"]}


def writer_of(reply: str, prompt_len: int, tok: ByteTokenizer):
    """A GPT-2 whose blocks add nothing and whose position embeddings alone pick the next token: after
    a ``prompt_len``-token prompt it writes ``reply`` then ends its turn (greedy decoding)."""
    spec = ModelSpec(kind="tiny_gpt2", hidden_size=264, num_layers=1, num_heads=4, max_positions=8192)
    model = build_model(spec, tok, seed=0)
    targets = tok.encode(reply) + [tok.eos_token_id]
    with torch.no_grad():
        for block in model.transformer.h:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                proj.weight.zero_()
                proj.bias.zero_()
        model.transformer.wte.weight.copy_(torch.eye(tok.vocab_size, spec.hidden_size))
        model.transformer.wpe.weight.zero_()
        for i, token in enumerate(targets):
            model.transformer.wpe.weight[prompt_len - 1 + i, token] = 100.0
    return spec, model


@pytest.fixture
def checkpointed_run(tmp_path, make_task):
    """A run directory with a step-3 checkpoint of a model that writes REPLY for the silu task."""
    silu = get_task("silu")
    task = make_task(name="silu", suite="ckpt-suite", source=silu.task_source, ops=["silu"])
    tok = ByteTokenizer()
    prompt = tok.prompt_ids(system_prompt(track="open", device="cpu"),
                            task_prompt(task.source, task_name="silu", device="cpu", track="open"))
    spec, model = writer_of(REPLY, len(prompt), tok)
    config = tiny_cpu_grpo()
    config.model = spec
    out = tmp_path / "run"
    save_checkpoint(out, state=RunState(step=3, stage_index=1), config=config.to_dict(), modules={"policy": model})
    run = TrainingRun.objects.create(name="writer", config=config.to_dict(), config_hash=config.config_hash(),
                                     base_model="tiny:tiny_gpt2", task_set="suite", status="succeeded",
                                     total_steps=3, out_dir=str(out))
    checkpoint = services.training_checkpoint_store(
        run_id=run.pk, info={"step": 3, "path": str(checkpoint_dir(out, 3)), "stage": "grpo",
                             "config_hash": config.config_hash()})
    return run, checkpoint, task


@pytest.mark.slow
@pytest.mark.django_db
def test_a_checkpoint_is_evaluated_through_the_agent_and_its_kernel_enters_the_leaderboard(checkpointed_run):
    run, checkpoint, task = checkpointed_run

    # when: the checkpoint is put on the leaderboard, and the rollout job runs
    batch = services.training_checkpoint_leaderboard(run_id=run.pk, step=3, suite="ckpt-suite", settings=SETTINGS)
    (rollout,) = batch.rollouts.all()
    rollout_services.rollout_run(rollout_id=rollout.pk)

    # then: the exported directory is a Hugging Face model + tokenizer of that step
    export = rollout.base_url.removeprefix("local:")
    assert json.loads(open(f"{export}/kernelcourt_checkpoint.json").read())["step"] == 3
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert type(AutoModelForCausalLM.from_pretrained(export)).__name__ == "GPT2LMHeadModel"
    assert AutoTokenizer.from_pretrained(export).encode("ok", add_special_tokens=False) == [111, 107]
    # and the agent ran it: one reply, submitted, passed; the kernel is the checkpoint's on the leaderboard
    rollout.refresh_from_db()
    assert (rollout.status, rollout.stop_reason, rollout.passed) == ("succeeded", "success", True)
    assert batch.submitter == checkpoint.submitter and checkpoint.submitter.kind == "checkpoint"
    kernel = rollout.best_kernel
    assert (kernel.source, kernel.submitter_id, kernel.task_id, kernel.origin) == (
        KERNEL, checkpoint.submitter_id, task.pk, "rollout")
    entries = arena_selectors.leaderboard_entries(
        track="open", hardware_id=rollout.best_evaluation.hardware_id, submitter_id=checkpoint.submitter_id)
    assert [e.kernel_id for e in entries] == [kernel.pk]


@pytest.mark.django_db
def test_the_api_endpoint_and_the_command_call_the_same_service(checkpointed_run, client, api_token, capsys):
    run, checkpoint, _ = checkpointed_run
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_token}"}

    launched = client.post(f"/api/training/{run.pk}/checkpoints/3/leaderboard",
                           {"suite": "ckpt-suite", "settings": SETTINGS}, content_type="application/json", **auth)
    missing = client.post(f"/api/training/{run.pk}/checkpoints/9/leaderboard", {"suite": "ckpt-suite"},
                          content_type="application/json", **auth)
    no_suite = client.post(f"/api/training/{run.pk}/checkpoints/3/leaderboard", {"suite": "nope"},
                           content_type="application/json", **auth)
    anonymous = client.post(f"/api/training/{run.pk}/checkpoints/3/leaderboard", {"suite": "ckpt-suite"},
                            content_type="application/json")
    call_command("checkpoint_leaderboard", str(run.pk), "--step", "3", "--suite", "ckpt-suite",
                 "--rollout-settings", json.dumps(SETTINGS))
    printed = json.loads(capsys.readouterr().out)

    body = launched.json()
    assert launched.status_code == 202 and body["submitter"] == checkpoint.submitter.name and body["rollouts"] == 1
    assert (missing.status_code, missing.json()) == (422, {"detail": f"training run {run.pk} has no checkpoint at step 9"})
    assert (no_suite.status_code, no_suite.json()) == (422, {"detail": "no tasks in suite 'nope'"})
    assert anonymous.status_code == 401
    assert printed["submitter"] == checkpoint.submitter.name and len(printed["rollouts"]) == 1
    with pytest.raises(CommandError, match="has no checkpoint at step 4"):
        call_command("checkpoint_leaderboard", str(run.pk), "--step", "4", "--suite", "ckpt-suite")


@pytest.mark.django_db
def test_the_admin_action_queues_the_checkpoint_on_the_default_suite(checkpointed_run, admin_client, settings):
    run, checkpoint, _ = checkpointed_run
    settings.TRAINING_LEADERBOARD_SUITE = "ckpt-suite"
    response = admin_client.post("/admin/training_runs/trainingcheckpoint/",
                                 {"action": "evaluate_on_leaderboard", "_selected_action": [checkpoint.pk]},
                                 follow=True)
    from webapp.rollouts.models import RolloutBatch

    (batch,) = RolloutBatch.objects.filter(submitter=checkpoint.submitter)
    assert response.status_code == 200
    assert f"rollout batch {batch.pk} queued" in response.content.decode()
    assert batch.suite == "ckpt-suite" and batch.rollouts.count() == 1


@pytest.mark.django_db
def test_users_cannot_point_a_rollout_at_a_local_directory(make_task):
    # given a registered endpoint whose URL is a local directory: refused when staff register it
    with pytest.raises(rollout_services.InvalidInput, match="base_url"):
        rollout_services.llm_endpoint_register(name="sneaky", base_url="local:/etc", model="x")
    # and users name endpoints only, never a URL or a directory
    task = make_task(suite="ckpt-suite")
    with pytest.raises(rollout_services.InvalidInput, match="no LLM endpoint 'local:/etc'"):
        rollout_services.rollout_launch(task_id=task.pk, submitter_name="mallory", endpoint="local:/etc")
    with pytest.raises(rollout_services.InvalidInput, match="no LLM endpoint 'local:/etc'"):
        rollout_services.rollout_launch_suite(suite="ckpt-suite", submitter_name="mallory", endpoint="local:/etc")
