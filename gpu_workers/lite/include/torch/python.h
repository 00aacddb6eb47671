// Light stand-in for PyTorch's <torch/python.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
