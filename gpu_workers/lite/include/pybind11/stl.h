// Light stand-in for PyTorch's <pybind11/stl.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
