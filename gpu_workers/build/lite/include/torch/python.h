// Light stand-in for PyTorch's <torch/python.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
