"""Outputs handed from the candidate's judge to the trusted reference child, to be compared there:
on a GPU through CUDA IPC, so GPU-sized outputs are compared where they are, never copied to the host
and sent across processes; on the CPU by value (the host is the device).

The candidate's judge exports its own clone of each output (``export``): the allocation's IPC handle
and the tensor's geometry, as plain data. The reference child (``open_outputs``) maps the handles,
checks every field it was given (a hostile candidate writes these messages: a wrong dtype, a geometry
outside the allocation or a handle that does not open is its failure, reported as such) and compares
the mapped tensors with its own outputs for the same inputs (``judge.compare_outputs``). The
candidate's process is paused at that moment, waiting for its go, and its clone is the judge's, made
after the output was final.
"""

from __future__ import annotations

from typing import Any

import torch

# bound before any candidate code (the judge's own)
_SHARE = torch.UntypedStorage._share_cuda_
_STORAGE, _STRIDE, _OFFSET = torch.Tensor.untyped_storage, torch.Tensor.stride, torch.Tensor.storage_offset
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
    torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128)}


class HandoverError(RuntimeError):
    """What the candidate handed over cannot be read as an output."""


def export(leaves: list[Any]) -> list[Any]:
    """Plain-data descriptors of the judge's clones of a call's outputs (CUDA tensors); a CPU
    tensor goes by value, any other leaf (a number, None, the repr of an object) as it is."""
    out: list[Any] = []
    for leaf in leaves:
        if type(leaf) is torch.Tensor and leaf.device.type == "cpu":
            out.append(leaf)
            continue
        if type(leaf) is not torch.Tensor or leaf.device.type != "cuda":
            out.append(leaf if isinstance(leaf, int | float | bool | str) or leaf is None else repr(type(leaf)))
            continue
        if leaf.numel() == 0:
            out.append({"handover": "empty", "dtype": str(leaf.dtype).removeprefix("torch."),
                        "shape": list(leaf.shape)})
            continue
        (device, handle, size, offset, counter, counter_offset, event, event_sync) = _SHARE(_STORAGE(leaf))
        out.append({"handover": "cuda", "device": int(device), "handle": bytes(handle), "storage_bytes": int(size),
                    "storage_offset": int(offset), "counter": bytes(counter), "counter_offset": int(counter_offset),
                    "event": bytes(event) if event is not None else None, "event_sync": bool(event_sync),
                    "dtype": str(leaf.dtype).removeprefix("torch."), "shape": list(leaf.shape),
                    "stride": list(_STRIDE(leaf)), "offset": int(_OFFSET(leaf))})
    return out


def _int_list(value: Any, what: str) -> list[int]:
    if type(value) is not list or len(value) > 16 or any(type(v) is not int or v < 0 for v in value):
        raise HandoverError(f"the handed-over {what} is not a list of sizes")
    return value


def _open_one(d: dict[str, Any], device: torch.device) -> torch.Tensor:
    dtype = _DTYPES.get(d.get("dtype"))
    if dtype is None:
        raise HandoverError(f"the handed-over output has dtype {d.get('dtype')!r}")
    shape = _int_list(d.get("shape"), "shape")
    if d.get("handover") == "empty":
        if any(shape) and 0 not in shape:
            raise HandoverError("an output handed over as empty has elements")
        return torch.empty(shape, dtype=dtype, device=device)
    stride = _int_list(d.get("stride"), "stride")
    fields = ("device", "storage_bytes", "storage_offset", "counter_offset", "offset")
    if len(stride) != len(shape) or any(type(d.get(k)) is not int or d[k] < 0 for k in fields):
        raise HandoverError("the handed-over output's geometry is malformed")
    if any(type(d.get(k)) is not bytes for k in ("handle", "counter")) or \
            not (d.get("event") is None or type(d.get("event")) is bytes) or type(d.get("event_sync")) is not bool:
        raise HandoverError("the handed-over output's handles are malformed")
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
    if (d["offset"] + extent) * torch.empty((), dtype=dtype).element_size() > d["storage_bytes"]:
        raise HandoverError("the handed-over output reaches past its own allocation")
    try:
        storage = torch.UntypedStorage._new_shared_cuda(
            d["device"], d["handle"], d["storage_bytes"], d["storage_offset"], d["counter"], d["counter_offset"],
            d["event"], d["event_sync"])
    except Exception as exc:  # noqa: BLE001 - a handle that does not open is the candidate's failure
        raise HandoverError(f"the handed-over output could not be opened: {exc}") from None
    if storage.device.index != device.index:
        raise HandoverError("the handed-over output is on another GPU")
    return torch.empty(0, dtype=dtype, device=device).set_(storage, d["offset"], shape, stride)


def open_outputs(descriptors: Any, device: torch.device) -> list[Any]:
    """The candidate's outputs, mapped from what ``export`` described (plain leaves as they are).
    Raises HandoverError for anything that is not a well-formed description of an output."""
    if type(descriptors) is not list or len(descriptors) > 4096:
        raise HandoverError("the handed-over outputs are not a list")
    out = []
    for d in descriptors:
        if type(d) is torch.Tensor:  # by value: the wire rebuilt it as a plain CPU tensor
            if device.type != "cpu":
                raise HandoverError("an output was handed over by value to a comparison on the GPU")
            out.append(d)
        else:
            out.append(_open_one(d, device) if type(d) is dict else d)
    return out
