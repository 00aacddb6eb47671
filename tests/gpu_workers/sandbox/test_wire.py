"""The judge's wire format: large tensors cross as raw bytes, everything is authenticated first, and
hostile framing is refused."""

from __future__ import annotations

import gc
import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from gpu_workers.sandbox import process as sandbox
from gpu_workers.sandbox import wire as channel

KEY = b"k" * 32


def _child_over_pipe(parts: list, key: bytes | None = KEY) -> sandbox.Child:
    """A Child whose 'process' is this test: the bytes come from a thread writing into a pipe."""
    read_fd, write_fd = os.pipe()

    def pump():
        channel.write_all(write_fd, parts)
        os.close(write_fd)

    threading.Thread(target=pump, daemon=True).start()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return sandbox.Child("candidate", proc, -1, read_fd, Path("/tmp"), Path("/dev/null"), 0, owns_workdir=False,
                         mac_key=key)


def test_large_tensors_of_every_kind_cross_as_raw_bytes_and_come_back_equal():
    big = {
        "f32": torch.randn(1 << 19),
        "bf16": torch.randn(1 << 20).to(torch.bfloat16),
        "f64_2d": torch.randn(512, 512, dtype=torch.float64),
        "bool": torch.rand(1 << 21) > 0.5,
        "i64_strided": torch.arange(1 << 18, dtype=torch.int64).reshape(512, 512).t(),
    }
    message = {"phase": "trial", "seq": 1, "outputs": [big["f32"], (big["bf16"], 3)], "small": torch.ones(4),
               "nested": {"x": [big["f64_2d"], big["bool"], big["i64_strided"]]}, "note": "ok"}
    parts = channel.encode_parts(message, KEY)
    assert int.from_bytes(parts[0][8:16], "big") == 5  # five raw buffers, the small tensor in the skeleton

    got = _child_over_pipe(parts).recv(time.monotonic() + 30)

    assert torch.equal(got["outputs"][0], big["f32"]) and got["outputs"][1][1] == 3
    assert got["outputs"][1][0].dtype == torch.bfloat16 and torch.equal(got["outputs"][1][0], big["bf16"])
    assert torch.equal(got["nested"]["x"][0], big["f64_2d"])
    assert torch.equal(got["nested"]["x"][1], big["bool"])
    assert torch.equal(got["nested"]["x"][2], big["i64_strided"])
    assert torch.equal(got["small"], torch.ones(4)) and got["note"] == "ok"

    # the received tensors own their bytes (mapped, not zero-filled up front): writable, and alive
    # after the message and everything else of it is gone
    kept = got["nested"]["x"][0]
    del got
    gc.collect()
    kept += 1
    assert torch.equal(kept, big["f64_2d"] + 1)


def test_a_changed_byte_anywhere_fails_authentication():
    parts = [bytes(p) for p in channel.encode_parts({"phase": "trial", "outputs": [torch.randn(1 << 19)]}, KEY)]
    raw = bytearray(parts[2])
    raw[12345] ^= 1
    parts[2] = bytes(raw)
    with pytest.raises(sandbox.ChildError, match="failed authentication"):
        _child_over_pipe(parts).recv(time.monotonic() + 30)


def test_announced_sizes_beyond_the_limit_are_refused_before_reading():
    head = channel.COUNTS.pack(10, 1) + channel.WORD.pack(1 << 40)
    with pytest.raises(sandbox.ChildError, match="announced"):
        _child_over_pipe([head]).recv(time.monotonic() + 30, max_bytes=1 << 30)
    with pytest.raises(sandbox.ChildError, match="raw buffers"):
        _child_over_pipe([channel.COUNTS.pack(10, 10**6)]).recv(time.monotonic() + 30)


@pytest.mark.parametrize("mark", [
    {"__ka_raw__": 0, "dtype": "float32", "shape": [3]},  # shape does not match the bytes
    {"__ka_raw__": 5, "dtype": "float32", "shape": [4]},  # no such buffer
    {"__ka_raw__": 0, "dtype": "object", "shape": [4]},  # not a tensor dtype
    {"__ka_raw__": 0, "dtype": "float32", "shape": [-4, -1]},
    {"__ka_raw__": 0, "dtype": "float32", "shape": [4], "extra": 1},
])
def test_forged_tensor_references_are_refused(mark):
    skeleton = io.BytesIO()
    torch.save({"phase": "trial", "outputs": [mark]}, skeleton)
    payload = skeleton.getvalue()
    raw = bytes(16)  # four float32
    head = channel.COUNTS.pack(len(payload), 1) + channel.WORD.pack(len(raw))
    parts = [head, payload, raw]
    parts.append(channel.mac(KEY, parts))
    with pytest.raises(sandbox.ChildError, match="unreadable message"):
        _child_over_pipe(parts).recv(time.monotonic() + 30)


def test_a_child_reads_its_setup_in_the_same_format():
    read_fd, write_fd = os.pipe()
    setup = {"weights": torch.randn(1 << 19), "seeds": [1, 2, 3]}
    writer = threading.Thread(target=lambda: (channel.write_all(write_fd, channel.encode_parts(setup)),
                                              os.close(write_fd)))
    writer.start()
    got = channel.read_message(read_fd)
    writer.join()
    os.close(read_fd)
    assert torch.equal(got["weights"], setup["weights"]) and got["seeds"] == [1, 2, 3]
