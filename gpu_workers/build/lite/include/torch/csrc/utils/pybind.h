// Light stand-in for PyTorch's <torch/csrc/utils/pybind.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
