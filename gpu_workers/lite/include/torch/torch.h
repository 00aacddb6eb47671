// Light stand-in for PyTorch's <torch/torch.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
