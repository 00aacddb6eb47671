// Light stand-in for PyTorch's <pybind11/stl.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
