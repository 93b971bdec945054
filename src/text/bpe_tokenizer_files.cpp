// BpeTokenizer from its files (text/bpe_tokenizer.h): Hugging Face's tokenizer.json, or GPT-2's
// vocab.json and merges.txt; every field this tokenizer would run differently from Hugging
// Face's refused by name.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"
#include "text/bpe_tokenizer.h"

namespace fp8lm::text {

namespace {

nlohmann::json read_json(const std::string& path) {
  return read_json_file(path, kTokenizerFileBytes);
}

// A token's id as the file writes it: an integer from 0 to INT32_MAX (read as written, so that
// 2^31 is not taken for a negative number nor 5.5 for 5).
int32_t token_id_of(const nlohmann::json& id, const std::string& what) {
  const bool ok = id.is_number_unsigned() ? id.get<uint64_t>() <= INT32_MAX
                                          : id.is_number_integer() && id.get<int64_t>() >= 0 &&
                                                id.get<int64_t>() <= INT32_MAX;
  if (!ok)
    throw Error(
        fmt::format("{} has id {}, not an integer from 0 to {}", what, id.dump(), INT32_MAX));
  return static_cast<int32_t>(id.get<int64_t>());
}

std::unordered_map<std::string, int32_t> read_vocab(const nlohmann::json& v,
                                                    const std::string& where) {
  if (!v.is_object())
    throw Error(fmt::format("{}: the vocabulary is not an object of token ids", where));
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto& [token, id] : v.items())
    vocab.emplace(token, token_id_of(id, fmt::format("{}: token '{}'", where, token)));
  return vocab;
}

// "a b" (the space splits, as no byte-level token holds a space).
std::pair<std::string, std::string> split_merge(const std::string& line, const std::string& where) {
  const size_t sp = line.find(' ');
  if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
      line.find(' ', sp + 1) != std::string::npos)
    throw Error(fmt::format("{}: merge '{}' is not two tokens", where, line));
  return {line.substr(0, sp), line.substr(sp + 1)};
}

// A field that must be absent, null or the given value for this tokenizer to run it as
// Hugging Face's does.
void expect_default(const nlohmann::json& obj, const char* field, const nlohmann::json& ok,
                    const std::string& where) {
  if (!obj.contains(field) || obj[field].is_null() || obj[field] == ok) return;
  throw Error(fmt::format("{}: {} = {} is not supported", where, field, obj[field].dump()));
}

// The tokenizer made, its errors naming the file it came from.
template <class Make>
BpeTokenizer in_file(const std::string& path, Make make) {
  try {
    return make();
  } catch (const Error& e) {
    std::string_view what = e.what();
    if (what.starts_with("tokenizer: ")) what.remove_prefix(11);
    throw Error(fmt::format("{}: {}", path, what));
  }
}

}  // namespace

BpeTokenizer BpeTokenizer::from_hf_json(const std::string& path) {
  const nlohmann::json j = read_json(path);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw Error(fmt::format("{}: no \"model\" object (not a Hugging Face tokenizer.json)", path));
  const nlohmann::json& model = j["model"];
  const std::string type = json_value<std::string>(model, "type", "BPE", path + ": model");
  if (type != "BPE") throw Error(fmt::format("{}: model type '{}' is not BPE", path, type));
  const std::string where = path + ": model";
  expect_default(model, "dropout", 0.0, where);
  expect_default(model, "byte_fallback", false, where);
  expect_default(model, "continuing_subword_prefix", "", where);
  expect_default(model, "end_of_word_suffix", "", where);
  expect_default(model, "unk_token", nullptr, where);
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    throw Error(
        fmt::format("{}: normalizer '{}' is not supported", path,
                    json_value<std::string>(j["normalizer"], "type", "?", path + ": normalizer")));
  const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
  if (!pre.is_object() ||
      json_value<std::string>(pre, "type", "", path + ": pre_tokenizer") != "ByteLevel")
    throw Error(fmt::format("{}: pre_tokenizer {} is not ByteLevel", path, pre.dump()));
  expect_default(pre, "use_regex", true, path + ": pre_tokenizer");
  const nlohmann::json post = j.value("post_processor", nlohmann::json());
  if (!post.is_null() &&
      json_value<std::string>(post, "type", "", path + ": post_processor") != "ByteLevel")
    throw Error(fmt::format("{}: post_processor '{}' is not supported (it would add tokens)", path,
                            json_value<std::string>(post, "type", "?", path)));

  auto vocab = read_vocab(model.value("vocab", nlohmann::json()), where + ".vocab");
  std::vector<std::pair<std::string, std::string>> merges;
  const nlohmann::json mj = model.value("merges", nlohmann::json::array());
  if (!mj.is_array()) throw Error(fmt::format("{}.merges is not a list", where));
  for (const auto& e : mj) {
    if (e.is_string()) {
      merges.push_back(split_merge(e.get<std::string>(), where + ".merges"));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      throw Error(fmt::format("{}.merges: {} is not a pair of tokens", where, e.dump()));
    }
  }
  std::vector<AddedToken> added;
  for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
    if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string())
      throw Error(fmt::format("{}: added token {} has no id and content", path, a.dump()));
    const std::string at =
        fmt::format("{}: added token '{}'", path, a["content"].get<std::string>());
    for (const char* f : {"single_word", "lstrip", "rstrip"}) expect_default(a, f, false, at);
    added.push_back({token_id_of(a["id"], at), a["content"].get<std::string>(),
                     json_value<bool>(a, "special", false, at)});
  }
  const bool ignore_merges = json_value<bool>(model, "ignore_merges", false, where);
  const bool prefix_space =
      json_value<bool>(pre, "add_prefix_space", false, path + ": pre_tokenizer");
  return in_file(path, [&] {
    return BpeTokenizer(std::move(vocab), merges, std::move(added), prefix_space, ignore_merges);
  });
}

BpeTokenizer BpeTokenizer::from_gpt2_files(const std::string& vocab_json,
                                           const std::string& merges_txt) {
  auto vocab = read_vocab(read_json(vocab_json), vocab_json);
  InputStream in(merges_txt, "");
  std::vector<std::pair<std::string, std::string>> merges;
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 1 && line.starts_with("#version"))) continue;
    merges.push_back(split_merge(line, fmt::format("{} line {}", merges_txt, n)));
  }
  // GPT-2's files name no added tokens; <|endoftext|> is in vocab.json and is special.
  std::vector<AddedToken> added;
  const auto eot = vocab.find("<|endoftext|>");
  if (eot != vocab.end()) added.push_back({eot->second, eot->first, true});
  return in_file(vocab_json,
                 [&] { return BpeTokenizer(std::move(vocab), merges, std::move(added)); });
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  // The non-throwing forms: a path the system refuses to look up (a name too long, a loop)
  // is not a directory, and opening it as a file names the reason.
  std::error_code ec;
  const auto has = [&](const char* name) { return fs::exists(fs::path(path) / name, ec); };
  if (!fs::is_directory(path, ec)) return from_hf_json(path);
  if (has("tokenizer.json")) return from_hf_json((fs::path(path) / "tokenizer.json").string());
  if (has("vocab.json") && has("merges.txt"))
    return from_gpt2_files((fs::path(path) / "vocab.json").string(),
                           (fs::path(path) / "merges.txt").string());
  throw Error(fmt::format("{}: holds neither tokenizer.json nor vocab.json with merges.txt", path));
}

}  // namespace fp8lm::text
