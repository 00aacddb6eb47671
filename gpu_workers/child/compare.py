"""Outputs against the reference's: structure, exact type, dtype, shape, NaN/Inf, the elementwise
tolerance and the error against float64, a chunk at a time. One implementation for both places a
comparison is made: the parent (``pipeline/verdict.py``, outputs that travelled) and the trusted
reference child (``child/reference.serve_comparisons``, GPU-sized outputs compared where they are)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Comparison:
    ok: bool
    reason: str = ""
    max_abs: float = 0.0
    rel_norm: float = 0.0  # normwise relative error against the float64 reference
    ref_rel_norm: float = 0.0  # the fp32 reference's own error against float64


# A candidate's error against float64 may be this many times the fp32 reference's own (another
# summation order, a fused kernel) before it counts against it, where that is looser than rtol.
OWN_ERROR_FACTOR = 10.0

_CHUNK = 1 << 18  # elements per pass: float64 temporaries stay in cache instead of streaming 10× through memory
_DEVICE_CHUNK = 1 << 24  # on a GPU (outputs compared on the device): fewer passes, each a few synchronisations


def _finite(x: torch.Tensor) -> bool:
    """Whether every value is finite, in one pass: a sum is finite only if every term is (NaN and
    infinities carry through it); a finite sum that overflowed says no, and the caller checks
    element by element."""
    return x.numel() == 0 or math.isfinite(float(x.sum()))


def _compare_real(c: torch.Tensor, r: torch.Tensor, r64: torch.Tensor | None, label: str, atol: float, rtol: float,
                  result: Comparison) -> Comparison | None:
    """One pass over the output in cache-sized chunks: NaN/Inf, max error, tolerance, and the sums of
    squares for the error against float64. Failures are reported in this order: non-finite values
    first, then the tolerance (with the worst element), then the float64 error. A chunk whose values
    are all finite (nearly always) takes the short way: no masks, and the worst element is looked for
    only where the tolerance failed."""
    cf, rf = c.reshape(-1), r.reshape(-1)
    wf = r64.reshape(-1) if r64 is not None and r64.numel() == r.numel() else None
    bad = 0
    max_abs = 0.0
    worst_excess, worst_at = -float("inf"), 0
    outside = False
    sq_ref = sq_err = sq_own = 0.0
    chunk = _DEVICE_CHUNK if rf.is_cuda else _CHUNK
    for start in range(0, rf.numel(), chunk):
        cd = cf[start:start + chunk].double()
        rd = rf[start:start + chunk].double()
        diff = cd - rd
        all_finite = _finite(diff) and _finite(rd)  # both finite: a finite candidate minus a finite reference
        if all_finite:
            diff.abs_()
            tolerance = rd.abs().mul_(rtol).add_(atol)
            chunk_outside = bool((diff > tolerance).any())
        else:
            finite_r = torch.isfinite(rd)
            bad += int((~torch.isfinite(cd) & finite_r).sum())
            diff.abs_().masked_fill_(~finite_r, 0.0)
            same = (cd == rd) | (torch.isnan(cd) & torch.isnan(rd))
            outside |= bool((~finite_r & ~same).any())
            tolerance = rd.abs().mul_(rtol).add_(atol)
            chunk_outside = True  # the worst element is looked for below, NaN differences counted
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
        if chunk_outside and diff.numel():
            excess = diff - tolerance
            if not all_finite:
                excess.masked_fill_(~finite_r, -float("inf"))
            top = int(torch.argmax(excess))
            top_excess = float(excess[top])
            outside |= top_excess > 0 or bool(torch.isnan(excess).any())
            if top_excess > worst_excess:
                worst_excess, worst_at = top_excess, start + top
        if wf is not None:
            wd = wf[start:start + chunk]
            if not _finite(wd):
                finite_w = torch.isfinite(wd)
                wd = torch.where(finite_w, wd, 0.0)
                cd = torch.where(finite_w, cd, 0.0)
                rd = torch.where(finite_w, rd, 0.0)
            sq_ref += float(torch.dot(wd, wd))
            err = cd - wd
            sq_err += float(torch.dot(err, err))
            err = torch.sub(rd, wd, out=err)
            sq_own += float(torch.dot(err, err))
    if bad:
        return Comparison(False, f"{label} has {bad} NaN/Inf values where the reference is finite")
    result.max_abs = max(result.max_abs, max_abs)
    if outside:
        return Comparison(False, f"{label} differs from the reference: max abs error {max_abs:.3g} "
                                 f"(atol={atol}, rtol={rtol}; worst at flat index {worst_at})", max_abs=max_abs)
    if wf is not None:
        scale = max(sq_ref ** 0.5, 1e-30)
        rel, own = sq_err ** 0.5 / scale, sq_own ** 0.5 / scale
        result.rel_norm = max(result.rel_norm, rel)
        result.ref_rel_norm = max(result.ref_rel_norm, own)
        # As strict as float32 arithmetic allows: where the output is at float32's noise floor (a
        # mean of normalised values, mathematically 0), the fp32 reference itself is far from fp64,
        # and only the elementwise tolerance can judge; anywhere else its own error is small and
        # rtol binds.
        bound = max(rtol, OWN_ERROR_FACTOR * own)
        if rel > bound:
            why = (f"rtol={rtol}" if bound == rtol else
                   f"{OWN_ERROR_FACTOR:g}x the fp32 reference's own error {own:.3g}, which exceeds rtol={rtol}")
            return Comparison(False, f"{label}: relative error {rel:.3g} against the float64 reference "
                                     f"exceeds {why} (near-zero outputs cannot hide behind atol)",
                              max_abs=result.max_abs, rel_norm=rel)
    return None


def _compare_complex(c: torch.Tensor, r: torch.Tensor, label: str, atol: float, rtol: float,
                     result: Comparison) -> Comparison | None:
    bad = ~torch.isfinite(c) & torch.isfinite(r)
    if bool(bad.any()):
        return Comparison(False, f"{label} has {int(bad.sum())} NaN/Inf values where the reference is finite")
    diff = (c.to(torch.complex128) - r.to(torch.complex128)).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    result.max_abs = max(result.max_abs, max_abs)
    if not torch.allclose(c, r, atol=atol, rtol=rtol, equal_nan=True):
        return Comparison(False, f"{label} differs from the reference: max abs error {max_abs:.3g} "
                                 f"(atol={atol}, rtol={rtol})", max_abs=max_abs)
    return None


def compare_outputs(cand: list[Any], ref: list[Any], ref64: list[Any] | None, atol: float, rtol: float) -> Comparison:
    """Structure, exact type, dtype, shape, NaN/Inf, tolerance, then error against float64."""
    if len(cand) != len(ref):
        return Comparison(False, f"returned {len(cand)} outputs, the reference returns {len(ref)}")
    result = Comparison(True)
    for k, (c, r) in enumerate(zip(cand, ref)):
        label = f"output {k}" if len(ref) > 1 else "the output"
        if not isinstance(r, torch.Tensor):
            if c != r:
                return Comparison(False, f"{label} is {c!r}, expected {r!r}")
            continue
        if not isinstance(c, torch.Tensor):
            return Comparison(False, f"{label} is {c} instead of a torch.Tensor")
        if c.dtype != r.dtype:
            return Comparison(False, f"{label} has dtype {c.dtype}, expected {r.dtype}")
        if tuple(c.shape) != tuple(r.shape):
            return Comparison(False, f"{label} has shape {tuple(c.shape)}, expected {tuple(r.shape)}")
        if not r.is_floating_point() and not r.is_complex():
            if not torch.equal(c, r):
                mismatches = int((c != r).sum())
                return Comparison(False, f"{label}: {mismatches} of {r.numel()} values differ")
            continue
        if r.is_complex():
            failure = _compare_complex(c, r, label, atol, rtol, result)
        else:
            r64 = ref64[k] if ref64 is not None and k < len(ref64) and isinstance(ref64[k], torch.Tensor) else None
            failure = _compare_real(c, r, r64, label, atol, rtol, result)
        if failure is not None:
            return failure
    return result
