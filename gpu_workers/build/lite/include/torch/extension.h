// Light stand-in for PyTorch's <torch/extension.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
