// Light stand-in for PyTorch's <ATen/cuda/CUDAUtils.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
