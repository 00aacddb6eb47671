// Light stand-in for PyTorch's <c10/util/BFloat16.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
