#pragma once
// Output directories that hold nothing of the user's: a command that writes a directory (an
// export, an import, a token dataset) takes a new one or an empty one, and never overwrites.
#include <string>

namespace fp8lm {

// Error "<label>: exists and is not an empty directory; not overwriting it" unless dir is
// absent or an empty directory. label names it as the user gave it ("--out data", "hf/llama").
void require_new_or_empty_dir(const std::string& dir, const std::string& label);
// The same check, then dir (and its parents) created.
void make_new_or_empty_dir(const std::string& dir, const std::string& label);

}  // namespace fp8lm
