// Light stand-in for PyTorch's <ATen/Functions.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
