// Light stand-in for PyTorch's <c10/util/ArrayRef.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
