import json
import random

import pytest

from agent.prompts import (
    Variant,
    contrastive_prompt,
    load_variants,
    sample_contrastive,
    speedup_bucket,
    system_prompt,
    task_prompt,
)


def test_strict_system_prompt_forbids_library_compute_and_fallbacks():
    text = system_prompt(track="strict", device="cpu")

    assert "library compute and is rejected" in text
    assert "No library fallback" in text
    assert "same constructor arguments as `Model`" in text
    assert "ACTION: verify" in text
    assert "`profile(source)`" in text
    assert "native tool calls" not in text


def test_open_track_prompt_allows_pytorch_rewrites_and_tools_mode_mentions_native_calls():
    text = system_prompt(track="open", device="cuda", tools=True)

    assert "PyTorch-level rewrites" in text
    assert "library compute and is rejected" not in text
    assert "CUDA C++" in text
    assert "native tool calls" in text


def test_system_prompt_rejects_unknown_track():
    with pytest.raises(ValueError, match="unknown track"):
        system_prompt(track="lenient")


def test_task_prompt_carries_the_reference_source():
    text = task_prompt("class Model: pass\n", task_name="relu", device="cpu", track="strict")

    assert "```python\nclass Model: pass\n```" in text
    assert "`relu`" in text


def test_buckets_split_failed_slow_and_fast_variants():
    assert speedup_bucket(Variant("s", None, "incorrect")) == 0
    assert speedup_bucket(Variant("s", 0.5)) == 1
    assert speedup_bucket(Variant("s", 1.2)) == 2
    assert speedup_bucket(Variant("s", 2.0)) == 3
    assert speedup_bucket(Variant("s", 3.0)) == 4


def test_sampling_takes_one_variant_per_bucket_before_a_second_from_any():
    variants = [Variant(f"slow{i}", 0.5 + i / 100) for i in range(10)] + [
        Variant("mid", 1.2),
        Variant("fast", 2.0),
        Variant("fastest", 5.0),
        Variant("broken", None, "incorrect"),
    ]

    chosen = sample_contrastive(variants, 3, rng=random.Random(1))
    four = sample_contrastive(variants, 4, rng=random.Random(1))

    assert [v.source for v in chosen] == ["mid", "fast", "fastest"]
    assert [v.source for v in four][1:] == ["mid", "fast", "fastest"]
    assert four[0].source.startswith("slow")


def test_contrastive_prompt_lists_variants_slowest_first_and_asks_for_analysis():
    prompt = contrastive_prompt("class Model: pass", [Variant("A = 1", 0.8), Variant("B = 2", 2.5)])

    assert prompt.index("### Variant 1: speedup 0.80x") < prompt.index("### Variant 2: speedup 2.50x")
    assert "```python\nB = 2\n```" in prompt
    assert "explain why the faster ones are faster" in prompt


def test_load_variants_reads_jsonl_and_json_lists(tmp_path):
    jsonl = tmp_path / "v.jsonl"
    jsonl.write_text(
        json.dumps({"source": "a", "speedup": 1.5})
        + "\n\n"
        + json.dumps({"kernel_source": "b", "speedup": {"eager": 0.7}})
        + "\n"
    )
    as_list = tmp_path / "v.json"
    as_list.write_text(json.dumps([{"source": "c", "speedup": None, "status": "incorrect"}]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json}\n")

    assert [(v.source, v.speedup, v.status) for v in load_variants(jsonl)] == [
        ("a", 1.5, "passed"),
        ("b", 0.7, "passed"),
    ]
    assert [(v.source, v.passed) for v in load_variants(as_list)] == [("c", False)]
    with pytest.raises(ValueError, match="bad.jsonl:1: not JSON"):
        load_variants(bad)
