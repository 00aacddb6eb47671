// Light stand-in for PyTorch's <ATen/cuda/CUDAContext.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
