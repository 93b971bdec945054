#pragma once
// The parts of CUB the project uses.
#include "cub/device/device_radix_sort.cuh"
