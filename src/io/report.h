#pragma once
// report.html for a run directory: one self-contained page (inline SVG, no scripts, no network)
// with charts of train and validation loss, throughput, learning rate, gradient norm, and per
// layer the amax, scale and saturation of every GEMM's input, weight and grad_output over time.
#include <string>

namespace fp8lm {

// Reads dir/metrics.jsonl (and summary.json, config.json when present); writes dir/report.html.
void write_report(const std::string& run_dir);

}  // namespace fp8lm
