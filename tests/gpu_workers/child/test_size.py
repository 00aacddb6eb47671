"""Sizing a KernelBench task on the meta device and scaling its constants under a bound."""

import pytest

from gpu_workers.child.size import (
    SizeError,
    apply_constants,
    constant_names,
    measure,
    size_constants,
    size_task,
)
from gpu_workers.tasks import load_task_module


def test_constant_names_take_expressions_and_tuples():
    # given a task whose constants are an expression, a tuple unpacking and a tuple
    source = "N = 2048 * 2\na, b = 3, 4\nshape = (8, 16)\nflag = True\nscale = 0.5\n"
    # when its names and integer constants are read from the loaded module
    module = load_task_module(source + "class Model: pass\ndef get_inputs(): return []\n"
                              "def get_init_inputs(): return []\n", None)
    names = constant_names(source)
    # then the expression's value, each tuple element and no boolean or float are size constants
    assert names == ["N", "a", "b", "shape", "flag", "scale"]
    assert size_constants(module, names) == {"N": 4096, "a": 3, "b": 4, "shape[0]": 8, "shape[1]": 16}


def test_apply_constants_rebuilds_tuples_and_skips_unknown_names():
    module = load_task_module("shape = (8, 16)\nn = 3\nclass Model: pass\ndef get_inputs(): return []\n"
                              "def get_init_inputs(): return []\n", None)
    apply_constants(module, {"shape[1]": 4, "n": 1, "missing": 7})
    assert module.shape == (8, 4)
    assert module.n == 1
    assert not hasattr(module, "missing")


def test_relu_at_published_size_is_measured_without_allocating(kernelbench):
    # given level1/19_ReLU: a 4096 x 393216 fp32 input (6.4 GB)
    source = (kernelbench / "level1" / "19_ReLU.py").read_text()
    # when it is measured at its own sizes
    sized = size_task(source, None, None)
    # then the bytes are exact and nothing changed
    assert sized["constants"] == {}
    assert sized["bytes"]["input_bytes"] == 4096 * 393216 * 4
    assert sized["bytes"]["output_bytes"] == 4096 * 393216 * 4
    assert sized["bytes"]["largest"] == {"input": 4096 * 393216, "parameter": 0, "output": 4096 * 393216}
    assert sized["bytes"]["how"] == "meta"


def test_relu_scaled_under_a_bound_keeps_every_tensor_within_it(kernelbench):
    sized = size_task((kernelbench / "level1" / "19_ReLU.py").read_text(), None, 4096)
    assert sized["bytes"]["largest"]["input"] <= 4096
    assert sized["bytes"]["largest"]["output"] <= 4096
    # the largest constant is halved each step: 4096 x 393216 ends as 64 x 48 (3072 <= 4096 < 64 x 96)
    assert sized["constants"] == {"batch_size": 64, "dim": 48}


def test_conv_task_keeps_its_kernel_size_and_stride(kernelbench):
    # given a transposed 3-D convolution with kernel 3, stride 2, padding 1
    source = (kernelbench / "level2" / "100_ConvTranspose3d_Clamp_Min_Divide.py").read_text()
    sized = size_task(source, None, 65536)
    # then the structural constants are untouched and every tensor fits
    assert not {"kernel_size", "stride", "padding"} & set(sized["constants"])
    assert max(sized["bytes"]["largest"].values()) <= 65536
    module = load_task_module(source, None)
    apply_constants(module, sized["constants"])
    assert measure(module).largest == sized["bytes"]["largest"]


def test_sizes_inside_get_inputs_cannot_be_scaled_and_say_so():
    source = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
              "batch = 4\ndef get_inputs():\n    return [torch.rand(batch, 100000)]\n"
              "def get_init_inputs():\n    return []\n")
    with pytest.raises(SizeError, match=r"within 1000 elements: its largest (input|output) still has 100000"):
        size_task(source, None, 1000)


def test_forward_without_meta_kernel_runs_on_the_cpu_when_small():
    # given a forward with a data-dependent output shape (no meta kernel)
    source = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
              "        return torch.nonzero(x > 2.0)\n"
              "n = 64\ndef get_inputs():\n    return [torch.arange(n, dtype=torch.float32)]\n"
              "def get_init_inputs():\n    return []\n")
    sized = size_task(source, None, 1 << 20)
    assert sized["bytes"]["how"] == "cpu"
    assert sized["bytes"]["largest"]["output"] == 61  # 3.0 .. 63.0, one index each


def test_forward_without_meta_kernel_is_refused_when_large():
    source = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
              "        return torch.nonzero(x > 2.0)\n"
              "def get_inputs():\n    return [torch.zeros(1 << 24)]\n"
              "def get_init_inputs():\n    return []\n")
    with pytest.raises(SizeError, match="does not run on the meta device"):
        size_task(source, None, None)


@pytest.mark.parametrize("bias_shape", ["(out_channels, 1, 1)", "(128, 1, 1)"])
def test_a_shape_constant_that_repeats_another_is_scaled_only_where_the_forward_still_runs(bias_shape):
    # given a task whose bias shape repeats the channel count (as KernelBench's level2 conv tasks do),
    # computed from it or written out again: halving out_channels alone builds the model but breaks the forward
    source = ("import torch\nfrom torch import nn\n"
              "class Model(nn.Module):\n"
              "    def __init__(self, cin, cout, k, bias_shape):\n"
              "        super().__init__()\n"
              "        self.conv = nn.Conv2d(cin, cout, k)\n"
              "        self.bias = nn.Parameter(torch.randn(bias_shape))\n"
              "    def forward(self, x):\n"
              "        return torch.relu(self.conv(x)) + self.bias\n"
              "batch_size = 128\nin_channels = 64\nout_channels = 128\nheight = width = 128\nkernel_size = 3\n"
              f"bias_shape = {bias_shape}\n"
              "def get_inputs():\n    return [torch.rand(batch_size, in_channels, height, width)]\n"
              "def get_init_inputs():\n    return [in_channels, out_channels, kernel_size, bias_shape]\n")
    # when it is scaled under a bound
    sized = size_task(source, None, 16384)
    # then every tensor fits and the forward runs at the constants chosen (a computed bias shape follows
    # the channel count; one written out is scaled only together with it)
    assert max(sized["bytes"]["largest"].values()) <= 16384
    module = load_task_module(source, None)
    apply_constants(module, sized["constants"], source)
    assert module.bias_shape[0] == module.out_channels
    assert measure(module).largest == sized["bytes"]["largest"]
    if bias_shape.startswith("(out"):
        assert "bias_shape[0]" not in sized["constants"]


def test_the_forwards_flops_are_counted_from_the_shapes_while_sizing(kernelbench):
    # given the published square matmul (N = 4096)
    module = load_task_module((kernelbench / "level1" / "1_Square_matrix_multiplication_.py").read_text(), None)
    n = module.N
    # when it is measured on the meta device
    sizes = measure(module)
    # then its FLOP count is the matmul's, with no memory allocated for it
    assert sizes.flops == 2 * n ** 3 and sizes.how == "meta"


def test_sizes_computed_from_other_constants_follow_them(kernelbench):
    # given KernelBench's cross-entropy task: the predictions' shape is input_shape = (num_classes,), the
    # targets are drawn below num_classes
    source = (kernelbench / "level1" / "95_CrossEntropyLoss.py").read_text()
    # when it is scaled under a bound
    sized = size_task(source, None, 16384)
    # then only the constants themselves were scaled, and the derived shape follows them
    assert "input_shape[0]" not in sized["constants"] and "num_classes" in sized["constants"]
    module = load_task_module(source, None)
    apply_constants(module, sized["constants"], source)
    assert module.input_shape == (module.num_classes,)
    # and the task runs for real at those sizes (every target is a class of the predictions)
    predictions, targets = module.get_inputs()
    assert predictions.numel() <= 16384 and int(targets.max()) < predictions.shape[1]
    module.Model()(predictions, targets)


def test_a_constructor_that_reads_a_value_is_measured_with_its_weights_on_meta():
    # given a task whose constructor reads a value (no meta tensor has one) and holds a 4 GiB weight
    source = ("import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.scale = float(torch.linspace(0.0, 1.0, 5)[2].item())\n"
              "        self.linear = torch.nn.Linear(n, n)\n"
              "        self.register_buffer('shift', torch.full((n,), self.scale))\n"
              "    def forward(self, x):\n        return self.linear(x) * self.scale + self.shift\n"
              "n = 1 << 15\nbatch = 8\ndef get_inputs():\n    return [torch.rand(batch, n)]\n"
              "def get_init_inputs():\n    return []\n")
    # when it is sized at its own sizes
    sized = size_task(source, None, None)
    # then it is measured on the meta device, its weights and buffer counted, never made on the CPU
    n = 1 << 15
    assert sized["bytes"]["how"] == "meta"
    assert sized["bytes"]["parameter_bytes"] == (n * n + n + n) * 4
    assert sized["bytes"]["largest"] == {"input": 8 * n, "parameter": n * n, "output": 8 * n}
    # and the constructor's own patching of torch is gone afterwards
    import torch

    assert torch.nn.Linear(2, 2).weight.device.type == "cpu"


def test_swin_at_its_published_size_is_measured(kernelbench):
    # given level3/29_SwinMLP, whose constructor reads its stages' drop rates with .item()
    source = (kernelbench / "level3" / "29_SwinMLP.py").read_text()
    sized = size_task(source, None, None)
    # then its bytes are those of the model built for real
    module = load_task_module(source, None)
    model = module.Model(*module.get_init_inputs())
    weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert sized["bytes"]["parameter_bytes"] == weights
    assert sized["bytes"]["largest"]["output"] == module.batch_size * model.head.out_features


WIDENING = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        wide = x.repeat(1, 16)  # 16 times the input
        doubled = wide * 2  # another 16 times, while the first lives
        del wide
        x.relu_()  # in place on the input: the input's bytes, not the forward's
        out = doubled.sum(dim=1, keepdim=True)
        for _ in range(8):
            out = out * 3  # a chain: one link lives at a time
        return out.view(-1)  # a view: the same storage


def get_inputs():
    return [torch.randn(1024, 64)]


def get_init_inputs():
    return []
'''


def test_the_forwards_working_set_is_the_most_its_own_tensors_hold_at_once(kernelbench):
    # given a forward whose intermediates are 32 times its 256 KiB input, and one that is elementwise
    module = load_task_module(WIDENING, None)
    # when each is measured on the meta device
    sizes = measure(module)
    relu = measure(load_task_module((kernelbench / "level1" / "19_ReLU.py").read_text(), None))
    # then the working set is the two 4 MiB intermediates alive together, not the output, the input
    # or the sum of every tensor the forward made; ReLU's is its output
    assert sizes.input_bytes == 1024 * 64 * 4 and sizes.output_bytes == 1024 * 4
    assert sizes.working_bytes == 2 * 1024 * 64 * 16 * 4
    assert relu.working_bytes == relu.output_bytes == 4096 * 393216 * 4
