// Light stand-in for PyTorch's <torch/extension.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
