"""A worker's warm-up: the zygote, a compile child and the light-build bridge before any evaluation."""

from __future__ import annotations

import pytest

from gpu_workers import build, litebuild, warmup, zygote


def test_warm_up_starts_the_zygote_and_leaves_the_bridge_built(kernelarena_cache_dir):
    steps = warmup.warm_up("cpu")
    assert set(steps) == {"probe", "compile_child"} and all(s >= 0 for s in steps.values())
    if zygote.enabled():
        assert any(z.alive for z in zygote.running())
    if litebuild.enabled():
        assert list((kernelarena_cache_dir / "lite").glob("kernelarena_bridge_*/bridge.ok"))
    with build._spares_lock:
        assert build._spares  # the next compile finds a child ready


def test_warm_up_in_the_background_reports_what_it_did(capfd):
    warmup.warm_up_in_background("cpu", who="test worker").join(timeout=600)
    err = capfd.readouterr().err
    assert "test worker" in err and "warmed up for cpu: probe" in err


def test_the_warm_up_device_is_named_or_none(monkeypatch):
    monkeypatch.delenv("KERNELARENA_WARM_UP", raising=False)
    assert warmup.configured_device() is None
    for value, expected in (("cuda", "cuda"), (" CPU ", "cpu"), ("0", None), ("off", None)):
        assert warmup.configured_device(value) == expected
    with pytest.raises(ValueError, match="cuda, cpu or empty"):
        warmup.configured_device("tpu")
