#include "io/hf_special_tokens.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"

namespace fp8lm {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kEndOfText = "<|endoftext|>";
// The names tokenizers give a padding token of their own.
constexpr std::array<std::string_view, 3> kPadNames = {"<pad>", "<|pad|>", "[PAD]"};

// A tokenizer.json's tokens: its added tokens first (special tokens live there), then its
// model's vocabulary.
class TokenTable {
 public:
  explicit TokenTable(const std::string& path) : path_(path) {
    j_ = read_json_file(path, kTokenizerFileBytes);
    if (!j_.is_object()) throw Error(fmt::format("{}: not a tokenizer.json", path));
  }

  std::optional<HfToken> by_content(std::string_view content) const {
    for (const Json& t : added())
      if (content_of(t) == content) return token(t);
    const Json* v = vocab();
    if (v && v->contains(content) && (*v)[std::string(content)].is_number_unsigned())
      return HfToken{(*v)[std::string(content)].get<int32_t>(), std::string(content)};
    return std::nullopt;
  }

  std::optional<HfToken> by_id(int32_t id) const {
    for (const Json& t : added())
      if (token(t).id == id) return token(t);
    if (const Json* v = vocab())
      for (const auto& [content, i] : v->items())
        if (i.is_number_unsigned() && i.get<int32_t>() == id) return HfToken{id, content};
    return std::nullopt;
  }

  // One past the largest id.
  int64_t size() const {
    int64_t n = 0;
    for (const Json& t : added()) n = std::max<int64_t>(n, token(t).id + int64_t{1});
    if (const Json* v = vocab())
      for (const auto& [content, i] : v->items())
        if (i.is_number_unsigned()) n = std::max<int64_t>(n, i.get<int64_t>() + 1);
    return n;
  }

  std::optional<HfToken> pad() const {
    if (j_.contains("padding") && j_["padding"].is_object()) {
      const Json& p = j_["padding"];
      if (p.contains("pad_token") && p["pad_token"].is_string())
        return by_content(p["pad_token"].get<std::string>());
    }
    for (const Json& t : added())
      for (const std::string_view name : kPadNames)
        if (json_value<bool>(t, "special", false, path_ + ": added token") && content_of(t) == name)
          return token(t);
    return std::nullopt;
  }

 private:
  std::string path_;
  Json j_;

  const Json& added() const {
    static const Json none = Json::array();
    return j_.contains("added_tokens") && j_["added_tokens"].is_array() ? j_["added_tokens"] : none;
  }
  const Json* vocab() const {
    if (!j_.contains("model") || !j_["model"].is_object()) return nullptr;
    const Json& m = j_["model"];
    return m.contains("vocab") && m["vocab"].is_object() ? &m["vocab"] : nullptr;
  }
  std::string content_of(const Json& t) const {
    return json_value<std::string>(t, "content", "", path_ + ": added token");
  }
  HfToken token(const Json& t) const {
    if (!t.contains("id") || !t["id"].is_number_unsigned() || t["id"].get<uint64_t>() > INT32_MAX ||
        !t.contains("content") || !t["content"].is_string())
      throw Error(fmt::format("{}: an added token without an id and a content", path_));
    return {t["id"].get<int32_t>(), t["content"].get<std::string>()};
  }
};

}  // namespace

HfSpecialTokens hf_special_tokens(const std::string& tokenizer_json,
                                  std::optional<int32_t> end_of_text, int64_t vocab) {
  const TokenTable table(tokenizer_json);
  // Ids past the embedding would fail in transformers' forward, far from the cause.
  if (table.size() > vocab) {
    throw Error(fmt::format("{}: {} tokens, more than the model's vocabulary of {}", tokenizer_json,
                            table.size(), vocab));
  }
  HfSpecialTokens out;
  if (end_of_text) {
    out.end_of_text = table.by_id(*end_of_text);
    if (!out.end_of_text) {
      throw Error(fmt::format("{}: no token has id {}, the end-of-text token of the model's data",
                              tokenizer_json, *end_of_text));
    }
  } else {
    out.end_of_text = table.by_content(kEndOfText);
  }
  out.pad = table.pad();
  return out;
}

void add_hf_token_ids(Json& config, const HfSpecialTokens& t) {
  const Json eot = t.end_of_text ? Json(t.end_of_text->id) : Json();
  config["bos_token_id"] = eot;
  config["eos_token_id"] = eot;
  if (t.pad) config["pad_token_id"] = t.pad->id;
}

Json hf_generation_config(const HfSpecialTokens& t, int64_t seq_len) {
  Json j = {{"max_length", seq_len}};
  if (t.end_of_text) {
    j["bos_token_id"] = t.end_of_text->id;
    j["eos_token_id"] = t.end_of_text->id;
    j["pad_token_id"] = t.end_of_text->id;
  }
  if (t.pad) j["pad_token_id"] = t.pad->id;
  return j;
}

Json hf_tokenizer_config(const HfSpecialTokens& t, int64_t seq_len) {
  Json j = {{"tokenizer_class", "PreTrainedTokenizerFast"},
            {"model_input_names", {"input_ids", "attention_mask"}},
            {"clean_up_tokenization_spaces", false},
            {"model_max_length", seq_len}};
  j.update(hf_special_tokens_map(t));
  return j;
}

Json hf_special_tokens_map(const HfSpecialTokens& t) {
  Json j = Json::object();
  if (t.end_of_text) {
    j["bos_token"] = t.end_of_text->content;
    j["eos_token"] = t.end_of_text->content;
  }
  if (t.pad) j["pad_token"] = t.pad->content;
  return j;
}

}  // namespace fp8lm
