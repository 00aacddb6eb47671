"""compare_outputs works in cache-sized chunks; its verdicts must not depend on where chunks fall."""

from __future__ import annotations

import torch

from gpu_workers.child import compare

N = 3 * compare._CHUNK + 123  # several chunks and a ragged tail


def _ref():
    g = torch.Generator().manual_seed(7)
    return torch.randn(N, generator=g)


def test_errors_against_float64_equal_the_whole_tensor_norms():
    r = _ref()
    c = r + 1e-5 * torch.randn(N, generator=torch.Generator().manual_seed(8))
    r64 = r.double() + 1e-8
    got = compare.compare_outputs([c], [r], [r64], 1e-2, 1e-2)
    expected_rel = float(torch.linalg.vector_norm(c.double() - r64) / torch.linalg.vector_norm(r64))
    expected_own = float(torch.linalg.vector_norm(r.double() - r64) / torch.linalg.vector_norm(r64))
    assert got.ok
    assert abs(got.rel_norm - expected_rel) <= 1e-9 * expected_rel
    assert abs(got.ref_rel_norm - expected_own) <= 1e-9 * expected_own
    assert got.max_abs == float((c.double() - r.double()).abs().max())


def test_a_nan_in_a_late_chunk_is_reported_before_a_tolerance_miss_in_an_early_one():
    r = _ref()
    c = r.clone()
    c[10] += 5.0
    c[N - 5] = float("nan")
    got = compare.compare_outputs([c], [r], None, 1e-2, 1e-2)
    assert not got.ok and got.reason == "the output has 1 NaN/Inf values where the reference is finite"


def test_the_worst_index_is_found_across_chunks():
    r = _ref()
    c = r.clone()
    c[compare._CHUNK + 17] += 0.5
    c[2 * compare._CHUNK + 3] += 3.0
    got = compare.compare_outputs([c], [r], None, 1e-2, 1e-2)
    assert not got.ok and f"worst at flat index {2 * compare._CHUNK + 3}" in got.reason


def test_infinities_must_match_and_nans_may():
    r = _ref()
    r[compare._CHUNK + 1] = float("inf")
    r[5] = float("nan")
    assert compare.compare_outputs([r.clone()], [r], None, 1e-2, 1e-2).ok
    c = r.clone()
    c[compare._CHUNK + 1] = -float("inf")
    assert not compare.compare_outputs([c], [r], None, 1e-2, 1e-2).ok


def test_complex_outputs_compare_both_parts():
    z = torch.complex(torch.randn(64), torch.randn(64))
    assert compare.compare_outputs([z.clone()], [z], None, 1e-3, 1e-3).ok
    assert not compare.compare_outputs([z.conj().resolve_conj()], [z], None, 1e-3, 1e-3).ok


def test_values_whose_sum_overflows_are_still_compared_one_by_one():
    r = torch.full((N,), 1e307, dtype=torch.float64)  # every value finite, their sum is not
    r[7] = 3e307
    assert not compare._finite(r[: compare._CHUNK])
    assert compare.compare_outputs([r.clone()], [r], [r.clone()], 1e-2, 1e-2).ok
    c = r.clone()
    c[compare._CHUNK + 9] *= 1.5
    got = compare.compare_outputs([c], [r], None, 1e-2, 1e-2)
    assert not got.ok and f"worst at flat index {compare._CHUNK + 9}" in got.reason


def test_an_infinite_candidate_value_is_counted_where_the_reference_is_finite():
    r = _ref()
    c = r.clone()
    c[compare._CHUNK + 2] = float("inf")
    c[3] = -float("inf")
    got = compare.compare_outputs([c], [r], [r.double()], 1e-2, 1e-2)
    assert not got.ok and got.reason == "the output has 2 NaN/Inf values where the reference is finite"
