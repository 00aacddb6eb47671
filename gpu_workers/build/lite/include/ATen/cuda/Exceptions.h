// Light stand-in for PyTorch's <ATen/cuda/Exceptions.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
