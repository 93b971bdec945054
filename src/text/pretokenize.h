#pragma once
// GPT-2's pre-tokenizer split (Hugging Face's ByteLevel with use_regex): the pieces BPE then
// works on, as the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// cuts a text, leftmost alternative first at each position. Written out as a scanner over
// code points rather than run through a regex engine: the same pieces, in one pass.
#include <string_view>
#include <vector>

namespace fp8lm::text {

// Appends the pieces of text to out (views into text; together they are all of it).
void split_gpt2(std::string_view text, std::vector<std::string_view>& out);

}  // namespace fp8lm::text
