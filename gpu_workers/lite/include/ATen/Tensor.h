// Light stand-in for PyTorch's <ATen/Tensor.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
