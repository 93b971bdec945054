// libFuzzer target: a run's metrics.jsonl, as a resumed run reads it back (metrics_kept
// keeps the lines up to its step) and as `fp8lm report` draws it (write_report), is either
// read or refused with fp8lm::Error — never a crash, hang, leak or undefined behaviour
// (ASan + UBSan). A line that does not read is dropped (resume) or named on the page (report).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fp8lm/error.h"
#include "fuzz_files.h"
#include "io/metrics_file.h"
#include "io/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = fp8lm::fuzz::scratch_dir("metrics");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fp8lm::fuzz::write_file(dir + "/metrics.jsonl", text);
  try {
    fp8lm::write_report(dir);
  } catch (const fp8lm::Error&) {
  }
  try {
    (void)fp8lm::metrics_kept(dir + "/metrics.jsonl", /*step=*/2);
  } catch (const fp8lm::Error&) {
  }
  return 0;
}
