#include "io/warning.h"

#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <set>

namespace fp8lm {
namespace {

std::mutex g_mutex;
std::set<std::string> g_said;
std::function<void(const std::string&)> g_sink;

}  // namespace

void warn(const std::string& text) {
  const std::lock_guard lock(g_mutex);
  if (!g_said.insert(text).second) return;  // a file read twice (resume: config, then load)
  if (g_sink) {
    g_sink(text);
  } else {
    fmt::print(stderr, "warning: {}\n", text);
  }
}

void set_warning_sink(std::function<void(const std::string&)> sink) {
  const std::lock_guard lock(g_mutex);
  g_sink = std::move(sink);
  g_said.clear();
}

}  // namespace fp8lm
