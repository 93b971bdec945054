// fp8lm data prepare: text files (a document per file or per line) or JSONL ({"text": ...} per
// line) tokenized on every thread into token shards, a held-out validation shard and a
// manifest (train/token_shards.h), for train --data DIR.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/parse.h"
#include "core/counter_rng.h"
#include "core/input_file.h"
#include "fp8lm/error.h"
#include "io/new_dir.h"
#include "text/bpe_tokenizer.h"
#include "train/token_shards.h"

namespace fp8lm::cli {
namespace {
namespace fs = std::filesystem;

struct PrepareFlags {
  std::string tokenizer, out, eot = "<|endoftext|>";
  std::vector<std::string> files;
  bool split_lines = false;
  double val_fraction = 0.01;
  int64_t shard_tokens = 100'000'000;
  uint64_t seed = 0;
};

// The documents of the input files, in order, a batch at a time (about 16 MB).
class DocumentReader {
 public:
  DocumentReader(const std::vector<std::string>& files, bool split_lines)
      : files_(files), split_lines_(split_lines) {
    // Every input checked before any is read: an unreadable last file fails at once.
    for (const std::string& f : files)
      total_bytes_ += static_cast<int64_t>(InputFile(f, "").size());
  }
  int64_t total_bytes() const { return total_bytes_; }
  int64_t bytes_read() const { return bytes_read_; }

  // false at the end of the last file.
  bool next_batch(std::vector<std::string>& docs) {
    docs.clear();
    size_t bytes = 0;
    while (bytes < (16u << 20) && docs.size() < 65536) {
      if (!in_ || in_->peek() == EOF) {
        in_.reset();
        if (next_file_ == files_.size()) break;
        path_ = files_[next_file_++];
        in_ = std::make_unique<InputStream>(path_, "");
        line_ = 0;
        jsonl_ = path_.ends_with(".jsonl");
        if (!jsonl_ && !split_lines_) {  // the whole file is one document
          docs.emplace_back(std::istreambuf_iterator<char>(*in_), std::istreambuf_iterator<char>());
          bytes += docs.back().size();
          bytes_read_ += static_cast<int64_t>(docs.back().size());
          in_.reset();
          continue;
        }
      }
      std::string line;
      std::getline(*in_, line);
      ++line_;
      bytes_read_ += static_cast<int64_t>(line.size()) + 1;
      if (line.empty()) continue;
      if (jsonl_) {
        docs.push_back(jsonl_text(line, path_, line_));
      } else {
        docs.push_back(std::move(line));
      }
      bytes += docs.back().size();
    }
    return !docs.empty();
  }

 private:
  const std::vector<std::string>& files_;
  bool split_lines_;
  size_t next_file_ = 0;
  std::unique_ptr<InputStream> in_;
  std::string path_;
  int64_t line_ = 0, total_bytes_ = 0, bytes_read_ = 0;
  bool jsonl_ = false;
};

void run_prepare(const PrepareFlags& f) {
  if (!(f.val_fraction > 0.0 && f.val_fraction < 1.0))
    throw Error(fmt::format("--val-fraction {} must be between 0 and 1", f.val_fraction));
  if (f.shard_tokens < 1024)
    throw Error(fmt::format("--shard-tokens {} is below 1024", f.shard_tokens));
  require_new_or_empty_dir(f.out, "--out " + f.out);
  const text::BpeTokenizer tok = text::BpeTokenizer::load(f.tokenizer);
  const std::optional<int32_t> eot = tok.token_id(f.eot);
  if (!eot) throw Error(fmt::format("--eot '{}' is not a token of {}", f.eot, f.tokenizer));
  // The end-of-text token marks where a document ends, and generation stops at it: an ordinary
  // token ("the") would cut documents at a word and end every sample there.
  const auto& added = tok.added_tokens();
  if (std::none_of(added.begin(), added.end(),
                   [&](const text::AddedToken& a) { return a.content == f.eot; }))
    throw Error(fmt::format(
        "--eot '{}' is an ordinary token of {} (id {}), not one of its added tokens: documents "
        "would end at a word; give a special token such as <|endoftext|>",
        f.eot, f.tokenizer, *eot));
  DocumentReader reader(f.files, f.split_lines);

  // Everything is written under a temporary name and renamed at the end: a failed or killed
  // prepare leaves no directory that looks whole.
  const std::string tmp = f.out + ".preparing";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  ShardManifest m;
  m.vocab_size = tok.vocab_size();
  m.eot = *eot;
  m.token_bytes = m.vocab_size <= 65536 ? 2 : 4;
  const auto shard_name = [](size_t i) { return fmt::format("train-{:05d}.tok", i); };
  auto train =
      std::make_unique<ShardWriter>((fs::path(tmp) / shard_name(0)).string(), m.token_bytes);
  ShardWriter val((fs::path(tmp) / "val.tok").string(), m.token_bytes);
  // A document is held out when its 32 random bits (by its index and the seed) fall below the
  // fraction: the same documents on every run, spread over all the inputs.
  const uint32_t key = counter_key(f.seed);
  const auto held_out = [&](int64_t doc) {
    return static_cast<double>(counter_bits(key, static_cast<uint32_t>(doc))) <
           f.val_fraction * 4294967296.0;
  };
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> docs;
  std::vector<std::vector<int32_t>> ids;
  while (reader.next_batch(docs)) {
    ids.assign(docs.size(), {});
#pragma omp parallel for schedule(dynamic, 16)
    for (size_t i = 0; i < docs.size(); ++i) {
      tok.encode(docs[i], ids[i]);
      ids[i].push_back(*eot);
    }
    for (auto& d : ids) {
      if (held_out(m.documents++)) {
        val.append(d);
        ++m.validation_documents;
        continue;
      }
      train->append(d);
      if (train->tokens() >= f.shard_tokens) {
        m.train.emplace_back(shard_name(m.train.size()), train->tokens());
        train->finish();
        train = std::make_unique<ShardWriter>((fs::path(tmp) / shard_name(m.train.size())).string(),
                                              m.token_bytes);
      }
    }
    if (tty) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double done = static_cast<double>(reader.bytes_read()) /
                          static_cast<double>(std::max<int64_t>(1, reader.total_bytes()));
      const int bar = static_cast<int>(std::min(1.0, done) * 30);
      fmt::print(stderr, "\r[{:=<{}}{:<{}}] {:5.1f}% · {:.1f} MB/s · {} documents", "", bar, "",
                 30 - bar, 100 * std::min(1.0, done),
                 static_cast<double>(reader.bytes_read()) / 1e6 / std::max(s, 1e-9), m.documents);
    }
  }
  if (tty) fmt::print(stderr, "\n");
  if (train->tokens() > 0 || m.train.empty()) {
    m.train.emplace_back(shard_name(m.train.size()), train->tokens());
    train->finish();
  }
  m.validation = {"val.tok", val.tokens()};
  val.finish();
  if (m.documents > 0 && m.validation_documents == m.documents) {
    fs::remove_all(tmp, ec);
    throw Error(fmt::format(
        "--val-fraction {} held out all {} documents ({} tokens), leaving none to train on: give "
        "a smaller fraction or more documents (--split-lines makes each line one)",
        f.val_fraction, m.documents, val.tokens()));
  }
  if (m.validation_documents == 0) {
    fs::remove_all(tmp, ec);
    throw Error(
        fmt::format("no document of {} was held out for validation (--val-fraction {}): give more "
                    "documents (--split-lines makes each line one) or a larger fraction",
                    m.documents, f.val_fraction));
  }
  // The tokenizer travels with the shards: tokenizer.json, or GPT-2's two files.
  const fs::path src = f.tokenizer;
  if (fs::is_directory(src) && !fs::exists(src / "tokenizer.json")) {
    fs::copy_file(src / "vocab.json", fs::path(tmp) / "vocab.json");
    fs::copy_file(src / "merges.txt", fs::path(tmp) / "merges.txt");
    m.tokenizer = ".";
  } else {
    fs::copy_file(fs::is_directory(src) ? src / "tokenizer.json" : src,
                  fs::path(tmp) / "tokenizer.json");
  }
  write_manifest(tmp, m);
  if (fs::exists(f.out, ec)) fs::remove(f.out);  // the empty directory checked above
  fs::rename(tmp, f.out);
  int64_t train_tokens = 0;
  for (const auto& [file, n] : m.train) train_tokens += n;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "prepared {} documents ({} held out): {} train tokens in {} shard(s), {} validation tokens, "
      "from {:.2f} MB in {:.1f}s ({:.1f} MB/s); wrote {}\n",
      m.documents, m.validation_documents, train_tokens, m.train.size(), m.validation.second,
      static_cast<double>(reader.total_bytes()) / 1e6, s,
      static_cast<double>(reader.total_bytes()) / 1e6 / std::max(s, 1e-9), f.out);
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "Token datasets: prepare");
  cmd->require_subcommand(1);
  auto f = std::make_shared<PrepareFlags>();
  auto* prep = cmd->add_subcommand(
      "prepare", "Tokenize text into token shards, a validation shard and a manifest");
  prep->add_option("files", f->files,
                   "text files (a document each, or per line with --split-lines), or .jsonl "
                   "files of {\"text\": ...} lines")
      ->type_name("FILE")
      ->required();
  prep->add_option("--tokenizer", f->tokenizer,
                   "tokenizer.json, or a directory with it or with vocab.json + merges.txt")
      ->type_name("TOKENIZER")
      ->required();
  prep->add_option("--out", f->out, "the dataset directory to write (new, or empty)")
      ->type_name("DIR")
      ->required();
  prep->add_flag("--split-lines", f->split_lines, "each line of a text file is a document");
  prep->add_option("--val-fraction", f->val_fraction,
                   "fraction of documents held out for validation (default 0.01)");
  prep->add_option("--shard-tokens", f->shard_tokens, "tokens per train shard (default 1e8)");
  prep->add_option("--eot", f->eot, "the token after each document (default <|endoftext|>)");
  prep->add_option("--seed", f->seed, "which documents are held out (default 0)");
  on_call(prep, f, run_prepare);
}

}  // namespace fp8lm::cli
