// fp8lm generate and eval: a trained model file, generation and held-out loss.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/parse.h"
#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "text/bpe_tokenizer.h"
#include "train/token_shards.h"
#include "train/trainer.h"

namespace fp8lm::cli {
namespace {

bool is_text_model(const TrainConfig& c) {
  return !c.data.empty();
}

// A model trained on a token dataset reads and writes text through a tokenizer: --tokenizer,
// else the one its dataset directory holds. Byte-level and stride models have none; a model
// that came without its data (fp8lm import) takes one with --tokenizer.
std::optional<text::BpeTokenizer> model_tokenizer(const TrainConfig& c, const std::string& flag) {
  if (!flag.empty()) {
    text::BpeTokenizer tok = text::BpeTokenizer::load(flag);
    if (tok.vocab_size() > c.model.vocab)
      throw Error(fmt::format("--tokenizer {}: {} tokens, more than the model's vocabulary {}",
                              flag, tok.vocab_size(), c.model.vocab));
    return tok;
  }
  if (c.data.empty() || !is_token_dataset(c.data)) return std::nullopt;
  const ShardManifest m = read_manifest(c.data);
  return text::BpeTokenizer::load((std::filesystem::path(c.data) / m.tokenizer).string());
}

// Token ids ("3 10 17") for stride models, the tokenizer's ids of the text for models of a
// token dataset, raw bytes for byte-level text models.
std::vector<int32_t> parse_prompt(const std::string& prompt, const TrainConfig& c,
                                  const std::optional<text::BpeTokenizer>& tok) {
  std::vector<int32_t> ids;
  if (tok) {
    ids = tok->encode(prompt);
    for (const int32_t id : ids)
      if (id >= c.model.vocab)
        throw Error(fmt::format("--prompt: token {} is beyond the model's vocabulary {}", id,
                                c.model.vocab));
  } else if (is_text_model(c)) {
    for (unsigned char ch : prompt) ids.push_back(ch);
  } else {
    ids = parse_token_ids(prompt, c.model.vocab, "--prompt");
  }
  if (ids.empty()) throw Error("--prompt is empty");
  return ids;
}

struct GenerateFlags {
  std::string checkpoint, prompt;
  int64_t max_new_tokens = 16;
  bool json = false;
  std::string device = "auto";
  Sampling sampling;
  std::vector<int64_t> stop_tokens;
  std::vector<std::string> stop_texts;
  std::string tokenizer;
};

// A --stop text with its escapes (\n, \t, \\) read, as a shell cannot easily pass a newline.
std::string unescape_stop(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) throw Error(fmt::format("--stop '{}' ends in a lone backslash", s));
    switch (s[i]) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case '\\':
        out += '\\';
        break;
      default:
        throw Error(fmt::format("--stop '{}': \\{} is not an escape (\\n, \\t, \\\\)", s, s[i]));
    }
  }
  if (out.empty()) throw Error("--stop is empty");
  return out;
}

GenerateOptions generate_options(const GenerateFlags& f, const TrainConfig& c, bool text_model) {
  GenerateOptions o;
  o.sampling = f.sampling;
  o.sampling.validate();
  for (const int64_t t : f.stop_tokens) {
    if (t < 0 || t >= c.model.vocab)
      throw Error(fmt::format("--stop-token {} is not a token id (0 to {})", t, c.model.vocab - 1));
    o.stop_tokens.push_back(static_cast<int32_t>(t));
  }
  if (!f.stop_texts.empty() && !text_model)
    throw Error("--stop: this model was trained on the stride task, not text (use --stop-token)");
  return o;
}

void run_generate(const GenerateFlags& f) {
  const DeviceSpec device = parse_device(f.device);
  LoadedModel m = load_model(f.checkpoint);
  const TrainConfig& c = m.config;
  const std::optional<text::BpeTokenizer> tok = model_tokenizer(c, f.tokenizer);
  const std::vector<int32_t> prompt = parse_prompt(f.prompt, c, tok);
  if (f.max_new_tokens < 0)
    throw Error(fmt::format("--max-new-tokens {} is negative", f.max_new_tokens));
  const bool text_model = is_text_model(c) || tok.has_value();
  GenerateOptions o = generate_options(f, c, text_model);
  // A model of a token dataset ends a text where its documents end, as Hugging Face's generate
  // stops at the end-of-sequence token.
  if (tok && is_token_dataset(c.data)) o.stop_tokens.push_back(read_manifest(c.data).eot);
  std::vector<std::string> stops;
  for (const std::string& s : f.stop_texts) stops.push_back(unescape_stop(s));
  InferenceModel model(*m.model, c, device);
  const auto P = static_cast<int64_t>(prompt.size());
  // Tokens print as they come (bytes for a text model, ids for the stride task) unless the
  // whole answer is JSON; a text stop ends generation once the text ends with it.
  std::string text;
  int64_t printed = 0;
  o.on_token = [&](int64_t, int32_t token) {
    if (text_model) {
      const std::string piece =
          tok ? tok->decode({token}) : std::string(1, static_cast<char>(token));
      text += piece;
      if (!f.json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      return std::none_of(stops.begin(), stops.end(),
                          [&](const std::string& s) { return text.ends_with(s); });
    }
    if (!f.json) {
      fmt::print("{}{}", printed++ == 0 ? "" : " ", token);
      std::fflush(stdout);
    }
    return true;
  };
  const std::vector<int32_t> out =
      model.generate_sequences(prompt.data(), 1, P, f.max_new_tokens, o)[0];
  if (!f.json) {
    fmt::print("\n");
    return;
  }
  if (text_model) {
    // Bytes are not always UTF-8 (a byte model can generate any byte): in the text, an
    // invalid sequence shows as U+FFFD; "generated_bytes" holds the exact bytes.
    nlohmann::json j = {{"prompt", f.prompt}, {"generated", text}};
    if (tok) {
      j["generated_ids"] = out;
    } else {
      j["generated_bytes"] = out;
    }
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  const auto ok = StrideTask::continues_stride(prompt, out, c.model.vocab);
  const bool kept = P >= 2 && std::all_of(ok.begin(), ok.end(), [](bool b) { return b; });
  fmt::print("{}\n",
             nlohmann::json{{"prompt", prompt}, {"generated", out}, {"stride_kept", kept}}.dump());
}

struct EvalFlags {
  std::string checkpoint, data;
  int64_t batches = 8;
  bool json = false;
  std::string device = "auto";
};

void run_eval(const EvalFlags& f) {
  // Each batch is a forward pass; a million of them is days, not a typo worth running.
  if (f.batches < 1 || f.batches > 1000000)
    throw Error(fmt::format("--batches {} must be between 1 and 1000000", f.batches));
  const DeviceSpec device = parse_device(f.device);
  LoadedModel m = load_model(f.checkpoint);
  TrainConfig c = m.config;
  if (!f.data.empty()) {
    c.data = f.data;
    if (is_token_dataset(c.data) && read_manifest(c.data).vocab_size > c.model.vocab)
      throw Error(fmt::format("--data {}: its vocabulary {} is beyond the model's {}", c.data,
                              read_manifest(c.data).vocab_size, c.model.vocab));
  }
  InferenceModel model(*m.model, c, device);
  const int64_t B = c.batch_size, T = c.model.seq_len;
  nlohmann::json j;
  if (is_text_model(c)) {
    const auto text = open_text_source(c.data, T, c.seed);
    const double loss = mean_loss(model.model(), text->validation(B, T, f.batches));
    j = {{"data", c.data}, {"loss", loss}, {"perplexity", std::exp(loss)}};
  } else {
    if (!f.data.empty()) throw Error("--data: this model was trained on the stride task, not text");
    const double loss = mean_loss(model.model(), stride_held_out_batches(c, f.batches));
    j = {{"loss", loss},
         {"perplexity", std::exp(loss)},
         {"stride_accuracy", stride_accuracy(model.model(), c)}};
  }
  if (f.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("loss {:.4f} · perplexity {:.4f}", j["loss"].get<double>(),
             j["perplexity"].get<double>());
  if (j.contains("stride_accuracy"))
    fmt::print(" · stride accuracy {:.4f}", j["stride_accuracy"].get<double>());
  fmt::print("\n");
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "generate", "Generation from a model file: greedy, or sampled with --temperature");
  auto f = std::make_shared<GenerateFlags>();
  cmd->add_option("--checkpoint", f->checkpoint, "model.safetensors written by fp8lm train")
      ->required();
  cmd->add_option("--prompt", f->prompt, "token ids (\"3 10 17\"), or text for text models")
      ->required();
  cmd->add_option("--max-new-tokens", f->max_new_tokens, "tokens to generate (default 16)");
  cmd->add_option("--temperature", f->sampling.temperature,
                  "sample at this temperature (default 0: greedy)");
  cmd->add_option("--top-k", f->sampling.top_k, "sample from the k most likely tokens (0: all)");
  cmd->add_option("--top-p", f->sampling.top_p,
                  "sample from the most likely tokens up to this probability (default 1: all)");
  cmd->add_option("--seed", f->sampling.seed, "the sampling seed (default 0)");
  cmd->add_option("--stop-token", f->stop_tokens, "end after this token id (repeatable)");
  cmd->add_option("--stop", f->stop_texts,
                  "text models: end once the text ends with this (\\n, \\t; repeatable)");
  cmd->add_option("--tokenizer", f->tokenizer,
                  "models of a token dataset: this tokenizer (default: the dataset's)");
  cmd->add_flag("--json", f->json, "print {prompt, generated, stride_kept}");
  cmd->add_option("--device", f->device, "auto|cpu|cuda|cuda:N (default auto)");
  cmd->callback([f] {
    if (!parse_only()) run_generate(*f);
  });
}

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Loss, perplexity (and stride accuracy) of a model file");
  auto f = std::make_shared<EvalFlags>();
  cmd->add_option("--checkpoint", f->checkpoint, "model.safetensors written by fp8lm train")
      ->required();
  cmd->add_option("--data", f->data, "text file (byte-level models; default: the training file)");
  cmd->add_option("--batches", f->batches, "held-out batches (default 8)");
  cmd->add_flag("--json", f->json, "print JSON");
  cmd->add_option("--device", f->device, "auto|cpu|cuda|cuda:N (default auto)");
  cmd->callback([f] {
    if (!parse_only()) run_eval(*f);
  });
}

}  // namespace fp8lm::cli
