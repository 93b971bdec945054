#pragma once
// The fp8lm public API: include this one header.
#include "core/bf16.h"          // bf16_from_float / bf16_to_float
#include "core/cpu_features.h"  // cpu_features()
#include "core/error.h"         // fp8lm::Error
#include "core/fp16.h"          // fp16_from_float / fp16_to_float
#include "core/fp8_dtype.h"     // Fp8Format, fp8_encode / fp8_decode
#include "core/precision.h"     // Precision, resolve_cpu_precision / resolve_cuda_precision
#include "fp8/quantize.h"       // quantize / dequantize (+ amax, saturation and flush counts)
#include "fp8/recipe.h"         // DelayedScaling, CurrentScaling, Format (E4M3 | HYBRID)
#include "fp8/scaling.h"        // ScalingState, Fp8Meta, update_delayed_scaling
#include "nn/autocast.h"        // Autocast (FP8), GemmPrecision (bf16 | fp32)
#include "nn/gpt.h"             // GPT, TransformerLayer, and the modules under them
#include "train/adamw.h"        // AdamW, clip_grad_norm, learning_rate
#include "train/data.h"         // StrideTask, TextData
#include "train/trainer.h"      // train()
