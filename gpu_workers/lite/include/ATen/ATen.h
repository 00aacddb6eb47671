// Light stand-in for PyTorch's <ATen/ATen.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
