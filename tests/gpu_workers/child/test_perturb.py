"""The second weight configuration, made during construction, for the reference and the candidate alike."""

import torch
import torch.nn.functional as F
from torch import nn

from gpu_workers.child.perturb import perturbed_construction


def _build(cls, seed: int, *args):
    torch.manual_seed(7)
    with perturbed_construction(seed) as state:
        model = cls(*args)
    state.finish(model)
    return model


class Reference(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3)
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        return self.norm((self.conv(x) * 2.0).permute(0, 2, 3, 1))


class PreScaled(nn.Module):
    """Derives its weight from the conv's in __init__ (x2 folded in), and keeps its own LayerNorm."""

    def __init__(self, c: int):
        super().__init__()
        conv = nn.Conv2d(c, c, 3)
        self.w = nn.Parameter(conv.weight.detach() * 2.0)
        self.b = nn.Parameter(conv.bias.detach() * 2.0)
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        return self.norm(F.conv2d(x, self.w, self.b).permute(0, 2, 3, 1))


class AssumesUnitNorm(nn.Module):
    """A shortcut: LayerNorm without its affine parameters (true only while they are ones and zeros)."""

    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3)
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        y = (self.conv(x) * 2.0).permute(0, 2, 3, 1)
        return F.layer_norm(y, y.shape[-1:])


def test_every_floating_parameter_moves_constants_included():
    plain = (torch.manual_seed(7), Reference(4))[1]
    perturbed = _build(Reference, 123, 4)
    for (name, a), b in zip(plain.named_parameters(), perturbed.parameters()):
        assert not torch.equal(a, b), name
    assert not torch.equal(perturbed.norm.weight, torch.ones(4))


def test_the_noise_depends_on_the_seed_and_the_values_only():
    a, b, c = _build(Reference, 123, 4), _build(Reference, 123, 4), _build(Reference, 124, 4)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.conv.weight, c.conv.weight)


def test_a_weight_derived_in_init_sees_the_perturbation():
    # given the reference and a candidate that pre-scales the conv weight into its own parameter
    reference = _build(Reference, 99, 4)
    candidate = _build(PreScaled, 99, 4)
    # then the derived parameter is twice the reference's perturbed weight, not perturbed again
    assert torch.equal(candidate.w, reference.conv.weight * 2.0)
    assert torch.equal(candidate.b, reference.conv.bias * 2.0)
    assert torch.equal(candidate.norm.weight, reference.norm.weight)
    x = torch.randn(2, 4, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(candidate(x), reference(x))


def test_a_shortcut_on_constants_still_shows():
    reference = _build(Reference, 99, 4)
    shortcut = _build(AssumesUnitNorm, 99, 4)
    x = torch.randn(2, 4, 8, 8)
    with torch.no_grad():
        assert not torch.allclose(shortcut(x), reference(x), atol=1e-2, rtol=1e-2)
        # the unperturbed configuration cannot tell the shortcut apart: that is why the second one exists
        torch.manual_seed(7)
        plain_ref = Reference(4)
        torch.manual_seed(7)
        plain_short = AssumesUnitNorm(4)
        torch.testing.assert_close(plain_short(x), plain_ref(x))


def test_a_parameter_written_in_place_from_perturbed_values_is_derived():
    class CopiesIn(nn.Module):
        def __init__(self, c: int):
            super().__init__()
            conv = nn.Conv2d(c, c, 3)
            self.w = nn.Parameter(torch.empty_like(conv.weight))
            with torch.no_grad():
                self.w.copy_(conv.weight * 2.0)

    reference = _build(Reference, 5, 4)
    candidate = _build(CopiesIn, 5, 4)
    assert torch.equal(candidate.w, reference.conv.weight * 2.0)


class ScalarWeight(nn.Module):
    """KernelBench's level2/3: a learned scalar (a 0-dimensional parameter) beside a conv."""

    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3)
        self.sum_weight = nn.Parameter(torch.tensor(1.0))

    def forward(self, x):
        return self.conv(x) + self.sum_weight


def test_a_zero_dimensional_parameter_is_perturbed_like_any_other():
    plain = (torch.manual_seed(7), ScalarWeight(4))[1]
    perturbed = _build(ScalarWeight, 123, 4)
    assert perturbed.sum_weight.dim() == 0 and not torch.equal(plain.sum_weight, perturbed.sum_weight)
    assert torch.equal(_build(ScalarWeight, 123, 4).sum_weight, perturbed.sum_weight)


def test_a_strided_parameter_gets_the_noise_of_its_contiguous_equal(monkeypatch):
    from gpu_workers.child import perturb

    monkeypatch.setattr(perturb, "CHUNK", 7)  # several pieces, one of them short
    values = torch.randn(6, 5)
    plain = nn.Parameter(values.clone())
    strided = nn.Parameter(torch.empty(5, 6).t())
    with torch.no_grad():
        strided.copy_(values)
    assert not strided.is_contiguous()
    with torch.no_grad():
        perturb.perturb_(5, plain)
        perturb.perturb_(5, strided)
    assert torch.equal(plain, strided)
    assert not torch.equal(plain, values)


def test_a_large_parameter_is_perturbed_without_a_second_copy_on_the_host():
    # ru_maxrss is the process's peak: a subprocess starts it at its own baseline
    import subprocess
    import sys

    code = """
import resource, torch
from torch import nn
from gpu_workers.child.perturb import perturb_
param = nn.Parameter(torch.rand(128, 1 << 20))  # 512 MiB, touched
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with torch.no_grad():
    perturb_(3, param)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    grown_mib = int(done.stdout.split()[-1])
    assert grown_mib < 128, f"perturbing a 512 MiB parameter raised the peak by {grown_mib} MiB"
