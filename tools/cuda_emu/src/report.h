#pragma once
// The emulator's diagnostics: one line on stderr, prefixed "[cuda-emu]", for every misuse it
// catches (a real GPU would give a bare error code, a wrong result or a hang).
#include <cstdio>
#include <utility>

namespace emu::detail {

template <typename... A>
void report(const char* format, A&&... args) {
  std::fputs("[cuda-emu] ", stderr);
  if constexpr (sizeof...(A) == 0) {
    std::fputs(format, stderr);
  } else {
    std::fprintf(stderr, format, std::forward<A>(args)...);
  }
  std::fputc('\n', stderr);
}

}  // namespace emu::detail
