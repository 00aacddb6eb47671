// Light stand-in for PyTorch's <c10/cuda/CUDAException.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
