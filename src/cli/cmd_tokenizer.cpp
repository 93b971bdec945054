// fp8lm tokenizer encode|decode|train: a byte-level BPE tokenizer (Hugging Face's
// tokenizer.json, or GPT-2's vocab.json + merges.txt) on text or ids, and learning one.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/parse.h"
#include "core/input_file.h"
#include "fp8lm/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "text/bpe_tokenizer.h"
#include "text/bpe_trainer.h"

namespace fp8lm::cli {
namespace {

struct TokenizerFlags {
  std::string tokenizer, text, file;
  std::vector<std::string> ids;
  bool json = false, skip_special = false, jsonl = false;
};

std::string read_input(const TokenizerFlags& f) {
  if (!f.file.empty() && !f.text.empty()) throw Error("give the text or --file, not both");
  if (f.file.empty()) return f.text;
  return read_input_file(f.file, "--file", kTextFileBytes);
}

// --jsonl: a document per line ({"text": ...}), its ids printed as a JSON list per line, in
// order; the documents are encoded on every thread.
void encode_jsonl(const text::BpeTokenizer& tok, const TokenizerFlags& f) {
  if (f.file.empty()) throw Error("--jsonl reads --file");
  InputStream in(f.file, "--file");
  std::vector<std::string> docs;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!line.empty()) docs.push_back(jsonl_text(line, f.file, line_no));
  }
  std::vector<std::vector<int32_t>> ids(docs.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < docs.size(); ++i) ids[i] = tok.encode(docs[i]);
  for (const auto& d : ids) fmt::print("{}\n", nlohmann::json(d).dump());
}

void run_encode(const TokenizerFlags& f) {
  const text::BpeTokenizer tok = text::BpeTokenizer::load(f.tokenizer);
  if (f.jsonl) return encode_jsonl(tok, f);
  const std::vector<int32_t> ids = tok.encode(read_input(f));
  if (f.json) {
    fmt::print("{}\n", nlohmann::json(ids).dump());
  } else {
    fmt::print("{}\n", fmt::join(ids, " "));
  }
}

void run_decode(const TokenizerFlags& f) {
  const text::BpeTokenizer tok = text::BpeTokenizer::load(f.tokenizer);
  std::vector<int32_t> ids;
  for (const std::string& arg : f.ids) {  // "3 10 17" as one argument or several
    const std::vector<int32_t> some = parse_token_ids(arg, tok.vocab_size(), "");
    ids.insert(ids.end(), some.begin(), some.end());
  }
  const std::string text = tok.decode(ids, f.skip_special);
  if (f.json) {
    fmt::print("{}\n",
               nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
}

struct TrainFlags {
  std::vector<std::string> files;
  std::string out;
  text::BpeTrainerOptions options;
};

// A file's documents for counting: a JSONL file's "text" fields, or a text file in pieces of
// about 1 MiB cut after a newline (a piece of the pre-tokenizer never spans one, except a run
// of white space, whose count the cut may split).
void read_documents(const std::string& path, std::vector<std::string>& out) {
  if (path.ends_with(".jsonl")) {
    InputStream in(path, "");
    int64_t n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (!line.empty()) out.push_back(jsonl_text(line, path, n));
    }
    return;
  }
  const std::string all = read_input_file(path, "", kTextFileBytes);
  constexpr size_t kPiece = 1 << 20;
  for (size_t at = 0; at < all.size();) {
    size_t end = std::min(all.size(), at + kPiece);
    if (end < all.size()) {
      const size_t nl = all.rfind('\n', end);
      if (nl != std::string::npos && nl >= at) end = nl + 1;
    }
    out.push_back(all.substr(at, end - at));
    at = end;
  }
}

void run_train(const TrainFlags& f) {
  namespace fs = std::filesystem;
  if (fs::exists(f.out)) throw Error(fmt::format("--out {} exists: not overwritten", f.out));
  text::BpeTrainer all(f.options);  // the options' errors before any reading
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> docs;
  for (const std::string& file : f.files) read_documents(file, docs);
  int64_t bytes = 0;
  for (const std::string& d : docs) bytes += static_cast<int64_t>(d.size());
#pragma omp parallel
  {
    text::BpeTrainer mine(f.options);
#pragma omp for schedule(dynamic, 1) nowait
    for (size_t i = 0; i < docs.size(); ++i) mine.add_text(docs[i]);
#pragma omp critical(fp8lm_bpe_counts)
    all.merge_counts(mine);
  }
  const std::string json = all.train();
  // Written whole or not at all, with the reason when it cannot be (a full disk, ulimit -f).
  write_text_atomic(f.out, json);
  const text::BpeTokenizer tok = text::BpeTokenizer::from_hf_json(f.out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("learnt a vocabulary of {} from {:.2f} MB ({} distinct pieces) in {:.1f}s; wrote {}\n",
             tok.vocab_size(), static_cast<double>(bytes) / 1e6, all.pieces(), s, f.out);
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "Byte-level BPE tokenizers: encode, decode, train");
  cmd->require_subcommand(1);
  auto f = std::make_shared<TokenizerFlags>();
  const auto common = [&](CLI::App* sub) {
    sub->add_option("--tokenizer", f->tokenizer,
                    "tokenizer.json, or a directory with it or with vocab.json + merges.txt")
        ->type_name("TOKENIZER")
        ->required();
    sub->add_flag("--json", f->json, "print JSON");
  };
  auto* enc = cmd->add_subcommand("encode", "Text to token ids");
  common(enc);
  enc->add_option("text", f->text, "the text (or --file)");
  enc->add_option("--file", f->file, "read the text from this file")->type_name("FILE");
  enc->add_flag("--jsonl", f->jsonl,
                "--file is JSONL, a {\"text\": ...} document per line: print each one's ids");
  on_call(enc, f, run_encode);
  auto* dec = cmd->add_subcommand("decode", "Token ids to text (the exact bytes)");
  common(dec);
  dec->add_option("ids", f->ids, "token ids")->required();
  dec->add_flag("--skip-special", f->skip_special, "leave out special tokens");
  on_call(dec, f, run_decode);
  auto t = std::make_shared<TrainFlags>();
  auto* train = cmd->add_subcommand("train", "Learn a byte-level BPE; write its tokenizer.json");
  train->add_option("files", t->files, "text files, or .jsonl files of {\"text\": ...} lines")
      ->type_name("FILE")
      ->required();
  train->add_option("--out", t->out, "the tokenizer.json to write (must not exist)")
      ->type_name("FILE")
      ->required();
  train->add_option("--vocab-size", t->options.vocab_size,
                    "special tokens + 256 bytes + merges (default 8192)");
  train->add_option("--min-frequency", t->options.min_frequency,
                    "stop before a pair seen fewer times (default 2)");
  train->add_option("--special", t->options.special_tokens,
                    "special tokens, first ids (default <|endoftext|>)");
  on_call(train, t, run_train);
}

}  // namespace fp8lm::cli
