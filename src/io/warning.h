#pragma once
// The library's few remarks to the user on what it read (an old file it cannot verify, a run
// written before run ids), as one "warning: ..." line on stderr, once per text per process, with
// no caller in between to pass them through.
#include <functional>
#include <string>

namespace fp8lm {

void warn(const std::string& text);
// Where warnings go instead of stderr (tests); an empty function restores stderr.
void set_warning_sink(std::function<void(const std::string&)> sink);

}  // namespace fp8lm
