// fp8lm generate and eval: a trained model file, generation and held-out loss.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/model_text.h"
#include "cli/parse.h"
#include "core/input_file.h"
#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "text/bpe_tokenizer.h"
#include "train/token_shards.h"
#include "train/trainer.h"

namespace fp8lm::cli {
namespace {

ModelInput model_input(const LoadedModel& m) {
  return cli::model_input(m.config, m.file.metadata());
}

bool is_text_model(const TrainConfig& c) {
  return !c.data.empty();
}

// A tokenizer and the file it came from.
struct ModelTokenizer {
  text::BpeTokenizer tokenizer;
  std::string path;
};

// A model of token ids reads and writes text through a tokenizer: --tokenizer, else the one
// its dataset directory holds, else a tokenizer.json beside the model file (fp8lm import puts
// the Hugging Face one there). Byte-level and stride models have none.
std::optional<ModelTokenizer> model_tokenizer(const LoadedModel& m, const std::string& model_path,
                                              const std::string& flag) {
  const TrainConfig& c = m.config;
  const std::string path =
      flag.empty() ? model_tokenizer_file(c, m.file.metadata(), model_path) : flag;
  if (path.empty()) return std::nullopt;
  text::BpeTokenizer tok = text::BpeTokenizer::load(path);
  if (tok.vocab_size() > c.model.vocab)
    throw Error(fmt::format("{} {}: {} tokens, more than the model's vocabulary {}",
                            flag.empty() ? "tokenizer" : "--tokenizer", path, tok.vocab_size(),
                            c.model.vocab));
  return ModelTokenizer{std::move(tok), path};
}

// Token ids ("3 10 17") for stride models, the tokenizer's ids of the text for models of a
// token dataset, raw bytes for byte-level text models.
std::vector<int32_t> parse_prompt(const std::string& prompt, const TrainConfig& c,
                                  const text::BpeTokenizer* tok) {
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
  bool seed_given = false;  // --seed on the command line
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
  if (f.seed_given && o.sampling.greedy())
    throw Error("--seed picks the samples of sampled generation; give a --temperature above 0");
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
  const std::string path = model_file_path(f.checkpoint);
  LoadedModel m = load_model(path);
  const TrainConfig& c = m.config;
  const std::optional<ModelTokenizer> model_tok = model_tokenizer(m, path, f.tokenizer);
  const text::BpeTokenizer* tok = model_tok ? &model_tok->tokenizer : nullptr;
  const std::vector<int32_t> prompt = parse_prompt(f.prompt, c, tok);
  // Said once generation has begun (the prompt and length were accepted).
  bool short_prompt =
      model_input(m) == ModelInput::StrideIds && static_cast<int64_t>(prompt.size()) < c.prompt_len;
  if (f.max_new_tokens < 0)
    throw Error(fmt::format("--max-new-tokens {} is negative", f.max_new_tokens));
  const bool text_model = is_text_model(c) || tok != nullptr;
  GenerateOptions o = generate_options(f, c, text_model);
  // A model of a token dataset ends a text where its documents end, as Hugging Face's generate
  // stops at the end-of-sequence token.
  if (tok && is_token_dataset(c.data)) o.stop_tokens.push_back(read_manifest(c.data).eot);
  if (tok && c.data.empty())  // an imported model ends where its tokenizer's documents do
    if (const auto eot = tok->token_id("<|endoftext|>")) o.stop_tokens.push_back(*eot);
  std::vector<std::string> stops;
  for (const std::string& s : f.stop_texts) stops.push_back(unescape_stop(s));
  InferenceModel model(*m.model, c, device);
  const auto P = static_cast<int64_t>(prompt.size());
  // Tokens print as they come (bytes for a text model, ids for the stride task) unless the
  // whole answer is JSON; a text stop ends generation once the text ends with it.
  std::string text;
  int64_t printed = 0;
  o.on_token = [&](int64_t, int32_t token) {
    if (short_prompt) {
      fmt::print(stderr,
                 "warning: this stride model learned to continue {}-token prompts; a {}-token "
                 "one may not keep its stride\n",
                 c.prompt_len, prompt.size());
      short_prompt = false;
    }
    if (text_model) {
      const std::string piece =
          tok ? tok->decode_generated({token}) : std::string(1, static_cast<char>(token));
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
  if (model_input(m) != ModelInput::StrideIds) {  // token ids without a tokenizer
    fmt::print("{}\n", nlohmann::json{{"prompt", prompt}, {"generated", out}}.dump());
    return;
  }
  const auto ok = StrideTask::continues_stride(prompt, out, c.model.vocab);
  const bool kept = P >= 2 && std::all_of(ok.begin(), ok.end(), [](bool b) { return b; });
  fmt::print("{}\n",
             nlohmann::json{{"prompt", prompt}, {"generated", out}, {"stride_kept", kept}}.dump());
}

struct EvalFlags {
  std::string checkpoint, data, tokenizer;
  int64_t batches = 8;
  bool json = false;
  std::string device = "auto";
};

// The held-out batches `eval` measures, and what they are ("the validation split of ...").
struct EvalData {
  std::vector<Batch> batches;
  std::string source;
};

// --data given: a token dataset's validation split, or a whole text file read as the model
// reads (bytes, or its tokenizer's ids). A file or dataset the model cannot read is refused:
// its ids would mean other tokens.
EvalData explicit_eval_data(const EvalFlags& f, const LoadedModel& m, const std::string& path) {
  const TrainConfig& c = m.config;
  const int64_t B = c.batch_size, T = c.model.seq_len;
  const ModelInput input = model_input(m);
  if (is_token_dataset(f.data)) {
    check_model_reads(c, m.file.metadata(), path, f.data, "this model");
    const auto text = open_text_source(f.data, T, c.seed, c.model.vocab);
    return {text->validation(B, T, f.batches), fmt::format("the validation split of {}", f.data)};
  }
  if (input == ModelInput::StrideIds)
    throw Error("--data: this model was trained on the stride task, not text");
  const std::optional<ModelTokenizer> tok = model_tokenizer(m, path, f.tokenizer);
  const std::string bytes = read_input_file(f.data, "--data", kTextFileBytes);
  std::vector<int32_t> ids;
  if (input == ModelInput::Bytes) {
    ids.assign(reinterpret_cast<const unsigned char*>(bytes.data()),
               reinterpret_cast<const unsigned char*>(bytes.data()) + bytes.size());
  } else if (tok) {
    ids = tok->tokenizer.encode(bytes);
  } else {
    throw Error(fmt::format(
        "--data {}: this model reads a tokenizer's ids and has none; give --tokenizer FILE",
        f.data));
  }
  if (static_cast<int64_t>(ids.size()) < T + 1)
    throw Error(
        fmt::format("--data {}: {} tokens, fewer than --seq-len {} + 1", f.data, ids.size(), T));
  return {consecutive_batches(ids, B, T, f.batches),
          fmt::format("{} ({}{})", f.data, input == ModelInput::Bytes ? "bytes" : "tokenized by ",
                      input == ModelInput::Bytes ? "" : tok->path)};
}

void run_eval(const EvalFlags& f) {
  // Each batch is a forward pass; a million of them is days, not a typo worth running.
  if (f.batches < 1 || f.batches > 1000000)
    throw Error(fmt::format("--batches {} must be between 1 and 1000000", f.batches));
  const DeviceSpec device = parse_device(f.device);
  const std::string path = model_file_path(f.checkpoint);
  LoadedModel m = load_model(path);
  const TrainConfig& c = m.config;
  InferenceModel model(*m.model, c, device);
  nlohmann::json j;
  if (!f.data.empty()) {
    const EvalData d = explicit_eval_data(f, m, path);
    const double loss = mean_loss(model.model(), d.batches);
    j = {{"data", d.source}, {"loss", loss}, {"perplexity", std::exp(loss)}};
  } else if (model_input(m) == ModelInput::StrideIds) {
    const double loss = mean_loss(model.model(), stride_held_out_batches(c, f.batches));
    j = {{"loss", loss},
         {"perplexity", std::exp(loss)},
         {"stride_accuracy", stride_accuracy(model.model(), c)}};
  } else if (c.data.empty()) {
    throw Error(fmt::format(
        "{} came without its data (fp8lm import): give --data FILE (text) or a token dataset",
        path));
  } else {
    const auto text = open_text_source(c.data, c.model.seq_len, c.seed, c.model.vocab);
    const double loss =
        mean_loss(model.model(), text->validation(c.batch_size, c.model.seq_len, f.batches));
    j = {{"data", fmt::format("the validation split of {}", c.data)},
         {"loss", loss},
         {"perplexity", std::exp(loss)}};
  }
  const double loss = j["loss"].get<double>();
  if (f.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("loss {:.4f} · perplexity {:.4f}", loss, j["perplexity"].get<double>());
    if (j.contains("stride_accuracy"))
      fmt::print(" · stride accuracy {:.4f}", j["stride_accuracy"].get<double>());
    if (j.contains("data")) fmt::print(" · on {}", j["data"].get<std::string>());
    fmt::print("\n");
  }
  // A loss that is no number measures nothing: the model is broken, not merely bad.
  if (!std::isfinite(loss))
    throw Error(fmt::format("{}: the loss is {}; the model's outputs are not finite", path, loss));
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "generate", "Generation from a model file: greedy, or sampled with --temperature");
  auto f = std::make_shared<GenerateFlags>();
  cmd->add_option("--checkpoint", f->checkpoint, "a model file or a run directory")
      ->type_name("MODEL")
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
                  "models of token ids: this tokenizer (default: the dataset's, or the "
                  "tokenizer.json beside the model)")
      ->type_name("TOKENIZER");
  cmd->add_flag("--json", f->json, "print {prompt, generated, stride_kept}");
  cmd->add_option("--device", f->device, "auto: a GPU when one is present")
      ->type_name("{auto,cpu,cuda,cuda:N}");
  cmd->callback([f, cmd] {
    f->seed_given = cmd->get_option("--seed")->count() > 0;
    if (!parse_only()) run_generate(*f);
  });
}

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Loss, perplexity (and stride accuracy) of a model file");
  auto f = std::make_shared<EvalFlags>();
  cmd->add_option("--checkpoint", f->checkpoint, "a model file or a run directory")
      ->type_name("MODEL")
      ->required();
  cmd->add_option("--data", f->data,
                  "a text file (read whole, as the model reads text) or a token dataset "
                  "(its validation split); default: the validation split of the training data")
      ->type_name("PATH");
  cmd->add_option("--tokenizer", f->tokenizer,
                  "models of token ids: this tokenizer (default: the dataset's, or the "
                  "tokenizer.json beside the model)")
      ->type_name("TOKENIZER");
  cmd->add_option("--batches", f->batches, "held-out batches (default 8)");
  cmd->add_flag("--json", f->json, "print JSON");
  cmd->add_option("--device", f->device, "auto: a GPU when one is present")
      ->type_name("{auto,cpu,cuda,cuda:N}");
  on_call(cmd, f, run_eval);
}

}  // namespace fp8lm::cli
