// Light stand-in for PyTorch's <c10/macros/Macros.h> (see kernelcourt_lite.h).
#pragma once
#include <kernelcourt_lite.h>
