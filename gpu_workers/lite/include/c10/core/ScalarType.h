// Light stand-in for PyTorch's <c10/core/ScalarType.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
