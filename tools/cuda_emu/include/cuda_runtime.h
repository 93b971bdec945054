#pragma once
// What nvcc gives every .cu file (the build force-includes this header into the rewritten .cu
// sources, as nvcc does): the runtime API, the declaration specifiers, the built-in variables
// and device functions, and kernel launches.
#include <math.h>

#include "cuda_runtime_api.h"
#include "emu/atomics.h"
#include "emu/intrinsics.h"
#include "emu/launch.h"
#include "emu/qualifiers.h"
#include "emu/thread.h"
#include "emu/vector_types.h"
#include "emu/warp.h"
