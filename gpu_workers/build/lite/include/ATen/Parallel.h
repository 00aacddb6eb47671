// Light stand-in for PyTorch's <ATen/Parallel.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
