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


def test_an_output_at_float32s_noise_floor_is_judged_by_the_tolerance_alone():
    # given a task whose output is mathematically zero (a mean of normalised values): float64 gives
    # 1e-17-sized residue, the fp32 reference and an honest fp32 candidate 1e-9-sized noise of their own
    g = torch.Generator().manual_seed(3)
    r64 = 1e-17 * torch.randn(N, generator=g, dtype=torch.float64)
    r = (r64 + 1e-9 * torch.randn(N, generator=g, dtype=torch.float64)).float()
    honest = (r64 + 1e-9 * torch.randn(N, generator=g, dtype=torch.float64)).float()
    # when each is compared
    got = compare.compare_outputs([honest], [r], [r64], 1e-2, 1e-2)
    # then the honest one passes: its error against float64 is the reference's own, not a wrong answer
    assert got.ok, got.reason
    assert got.ref_rel_norm > 1e6 and got.rel_norm < compare.OWN_ERROR_FACTOR * got.ref_rel_norm


def test_small_but_meaningful_outputs_still_cannot_be_returned_as_zeros():
    # given an output of 1e-4-sized values that fp32 computes accurately (atol would pass zeros)
    g = torch.Generator().manual_seed(4)
    r64 = 1e-4 * torch.randn(N, generator=g, dtype=torch.float64)
    r = r64.float()
    # when a candidate returns zeros, or the values off by 5%
    zeros = compare.compare_outputs([torch.zeros(N)], [r], [r64], 1e-2, 1e-2)
    scaled = compare.compare_outputs([r * 1.05], [r], [r64], 1e-2, 1e-2)
    # then both fail the float64 check, bound by rtol (the reference's own error is far below it)
    assert not zeros.ok and "rtol=0.01 (near-zero" in zeros.reason
    assert not scaled.ok
