// Light stand-in for PyTorch's <torch/csrc/utils/pybind.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
