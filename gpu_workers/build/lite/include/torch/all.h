// Light stand-in for PyTorch's <torch/all.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
