#pragma once
// The special tokens a Hugging Face export names, so that transformers' AutoTokenizer and
// generate know where a text ends: the end-of-text token (which also begins a text, as GPT-2
// has it: our token datasets put it between documents) and a padding token. Without them
// transformers falls back on its classes' defaults: GPT2Config's 50256, past a small
// vocabulary, or LlamaConfig's 1 and 2, ordinary tokens of ours; it pads with them and never
// stops at the end of a text.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

namespace fp8lm {

struct HfToken {
  int32_t id = 0;
  std::string content;  // as tokenizer.json writes it
};

struct HfSpecialTokens {
  std::optional<HfToken> end_of_text;  // none: generation ends only at its length
  std::optional<HfToken> pad;          // the tokenizer's own padding token, where it has one
};

// Read from a tokenizer.json: the token whose id is end_of_text (a token dataset's, the one
// the model learnt to end documents with), else the token written <|endoftext|>; the padding
// token of its "padding" settings, else an added special token named <pad>, <|pad|> or [PAD].
// Error naming the file and an id that is no token, or a tokenizer with more tokens than the
// model's vocabulary.
HfSpecialTokens hf_special_tokens(const std::string& tokenizer_json,
                                  std::optional<int32_t> end_of_text, int64_t vocab);

// config.json's bos_token_id and eos_token_id (null where there is no end-of-text token, so no
// class default applies) and pad_token_id (where the tokenizer has a padding token).
void add_hf_token_ids(nlohmann::json& config, const HfSpecialTokens& t);

// generation_config.json: those ids, and the padding id generate needs, which is the
// end-of-text token's where the tokenizer has no padding token (without one, generate warns
// and sets that itself); max_length is the model's positions, so generate neither warns about
// a default length nor runs past them.
nlohmann::json hf_generation_config(const HfSpecialTokens& t, int64_t seq_len);

// tokenizer_config.json: PreTrainedTokenizerFast, which takes tokenizer.json as it is (the
// model-specific classes rebuild parts of it: GPT2TokenizerFast its prefix space, Llama's a
// leading <s>), with the special tokens; no token_type_ids (GPT-2 would add the embedding of
// token 0 for them, Llama refuses them) and no clean-up of spaces in decode, so that text
// round-trips as fp8lm's tokenizer has it.
nlohmann::json hf_tokenizer_config(const HfSpecialTokens& t, int64_t seq_len);

// special_tokens_map.json: the special tokens by role.
nlohmann::json hf_special_tokens_map(const HfSpecialTokens& t);

}  // namespace fp8lm
