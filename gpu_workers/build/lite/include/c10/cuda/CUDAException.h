// Light stand-in for PyTorch's <c10/cuda/CUDAException.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
