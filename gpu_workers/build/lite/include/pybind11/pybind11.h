// Light stand-in for PyTorch's <pybind11/pybind11.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
