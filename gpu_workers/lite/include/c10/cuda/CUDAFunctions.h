// Light stand-in for PyTorch's <c10/cuda/CUDAFunctions.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
