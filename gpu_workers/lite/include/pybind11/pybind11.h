// Light stand-in for PyTorch's <pybind11/pybind11.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
