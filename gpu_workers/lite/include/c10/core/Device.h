// Light stand-in for PyTorch's <c10/core/Device.h> (see kernelarena_lite.h).
#pragma once
#include <kernelarena_lite.h>
