#include "cli/model_text.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/input_file.h"
#include "fp8lm/error.h"
#include "train/token_shards.h"

namespace fp8lm::cli {
namespace {

namespace fs = std::filesystem;

std::string dataset_tokenizer(const std::string& dir) {
  return (fs::path(dir) / read_manifest(dir).tokenizer).string();
}

// The same tokenizer: the same file, or files of the same bytes (a GPT-2 vocab.json +
// merges.txt directory is compared by where it is).
bool same_tokenizer(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  if (!fs::is_regular_file(a) || !fs::is_regular_file(b)) return false;
  return read_input_file(a, "", kTokenizerFileBytes) == read_input_file(b, "", kTokenizerFileBytes);
}

}  // namespace

ModelInput model_input(const TrainConfig& c, const std::map<std::string, std::string>& metadata) {
  if (!c.data.empty()) return is_token_dataset(c.data) ? ModelInput::Tokens : ModelInput::Bytes;
  // fp8lm import writes "source" (and step 0, which is how older imports are told apart: a
  // trained model has steps).
  const auto is = [&](const char* key, const char* value) {
    const auto it = metadata.find(key);
    return it != metadata.end() && it->second == value;
  };
  return is("source", "huggingface") || is("step", "0") ? ModelInput::Tokens
                                                        : ModelInput::StrideIds;
}

std::string model_tokenizer_file(const TrainConfig& c,
                                 const std::map<std::string, std::string>& metadata,
                                 const std::string& model_path) {
  if (model_input(c, metadata) != ModelInput::Tokens) return "";
  if (!c.data.empty()) return dataset_tokenizer(c.data);
  const fs::path beside = fs::path(model_path).parent_path() / "tokenizer.json";
  return fs::is_regular_file(beside) ? beside.string() : "";
}

void check_model_reads(const TrainConfig& c, const std::map<std::string, std::string>& metadata,
                       const std::string& model_path, const std::string& data,
                       const std::string& model) {
  const ModelInput input = model_input(c, metadata);
  if (input == ModelInput::StrideIds)
    throw Error(fmt::format("{} was trained on the stride task, not text", model));
  if (!is_token_dataset(data)) {
    if (input == ModelInput::Tokens)
      throw Error(fmt::format(
          "{} reads a tokenizer's ids, and {} would be read as bytes; make a token dataset of "
          "it (fp8lm data prepare --tokenizer ...)",
          model, data));
    return;
  }
  if (input == ModelInput::Bytes)
    throw Error(fmt::format(
        "{} is a token dataset, but {} reads bytes (it trained on {}); give it a text file", data,
        model, c.data));
  const int64_t vocab = read_manifest(data).vocab_size;
  if (vocab > c.model.vocab)
    throw Error(fmt::format("{}: its vocabulary {} is beyond the model's {} ({})", data, vocab,
                            c.model.vocab, model));
  const std::string ours = model_tokenizer_file(c, metadata, model_path);
  if (!ours.empty() && !same_tokenizer(ours, dataset_tokenizer(data)))
    throw Error(fmt::format(
        "{} was made with another tokenizer than {}'s ({}): its ids would mean other tokens", data,
        model, ours));
}

}  // namespace fp8lm::cli
