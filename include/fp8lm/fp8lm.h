#pragma once
// The fp8lm public API: include this one header. It declares what a library user needs and
// nothing of the engine's internals (docs/ARCHITECTURE.md); examples/train_demo.cpp uses it.
#include "fp8lm/error.h"         // Error: every failure, as one line naming the input
#include "fp8lm/fp8_state.h"     // Fp8SlotState: one GEMM slot's scale, scale_inv, amaxes
#include "fp8lm/generation.h"    // Sampling, GenerateOptions
#include "fp8lm/model_config.h"  // GPTConfig, Activation, Normalization
#include "fp8lm/precision.h"     // Precision, PrecisionChoice
#include "fp8lm/recipe.h"        // DelayedScaling, CurrentScaling, Fp8Recipe (TE's fields)
#include "fp8lm/train_config.h"  // TrainConfig, DeviceSpec, StepStats, TrainResult
#include "fp8lm/training.h"      // Training, Model
