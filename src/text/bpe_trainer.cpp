#include "text/bpe_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>

#include "fp8lm/error.h"
#include "text/byte_level.h"
#include "text/pretokenize.h"
#include "text/utf8.h"

namespace fp8lm::text {

BpeTrainer::BpeTrainer(BpeTrainerOptions o) : o_(std::move(o)) {
  const auto specials = static_cast<int64_t>(o_.special_tokens.size());
  if (o_.vocab_size < specials + 256)
    throw Error(fmt::format("--vocab-size {} is below the {} special tokens and 256 bytes",
                            o_.vocab_size, specials));
  if (o_.min_frequency < 1)
    throw Error(fmt::format("--min-frequency {} must be at least 1", o_.min_frequency));
  for (const std::string& t : o_.special_tokens)
    if (t.empty()) throw Error("--special: a special token is empty");
}

void BpeTrainer::add_text(std::string_view text) {
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  split_gpt2(text, pieces);
  for (const std::string_view p : pieces) ++counts_[std::string(p)];
}

void BpeTrainer::merge_counts(const BpeTrainer& other) {
  for (const auto& [piece, n] : other.counts_) counts_[piece] += n;
}

namespace {

using Pair = std::pair<int32_t, int32_t>;

struct PairHash {
  size_t operator()(const Pair& p) const {
    return std::hash<uint64_t>{}((static_cast<uint64_t>(static_cast<uint32_t>(p.first)) << 32) |
                                 static_cast<uint32_t>(p.second));
  }
};

// The vocabulary being learnt: token strings in the byte-level alphabet, by id.
struct Vocab {
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int32_t> ids;
  // A token spelt as one already learnt (another pair's merge) keeps that one's id.
  int32_t add(std::string t) {
    const auto [it, fresh] = ids.try_emplace(t, static_cast<int32_t>(tokens.size()));
    if (fresh) tokens.push_back(std::move(t));
    return it->second;
  }
};

nlohmann::json byte_level(bool pre) {
  nlohmann::json j = {{"type", "ByteLevel"},
                      {"add_prefix_space", false},
                      {"trim_offsets", true},
                      {"use_regex", true}};
  if (!pre) j["add_prefix_space"] = true;  // as Hugging Face writes its decoder's (unused there)
  return j;
}

}  // namespace

std::string BpeTrainer::train() const {
  const auto specials = static_cast<int64_t>(o_.special_tokens.size());
  Vocab v;
  for (const std::string& s : o_.special_tokens) v.add(s);
  std::array<int32_t, 256> byte_id{};
  {
    // The bytes' symbols in code point order, as Hugging Face's trainer sorts its alphabet.
    std::vector<std::pair<char32_t, int>> alphabet;
    for (int b = 0; b < 256; ++b)
      alphabet.emplace_back(byte_to_code_point()[static_cast<size_t>(b)], b);
    std::sort(alphabet.begin(), alphabet.end());
    for (const auto& [c, b] : alphabet) {
      std::string s;
      append_utf8(s, c);
      byte_id[static_cast<size_t>(b)] = v.add(std::move(s));
    }
  }
  // The distinct pieces as symbol sequences, in a fixed order (the map sorts them), and counts.
  const std::map<std::string, int64_t> sorted(counts_.begin(), counts_.end());
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  for (const auto& [piece, n] : sorted) {
    std::vector<int32_t> w;
    for (const char ch : piece) w.push_back(byte_id[static_cast<uint8_t>(ch)]);
    words.push_back(std::move(w));
    freq.push_back(n);
  }
  // Each adjacent pair's count over all words, and the words it occurs in.
  std::unordered_map<Pair, int64_t, PairHash> count;
  std::unordered_map<Pair, std::set<size_t>, PairHash> where;
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const Pair p{words[w][i], words[w][i + 1]};
      count[p] += freq[w];
      where[p].insert(w);
    }
  // Most frequent first; among equals the merged token that sorts first. Entries go stale as
  // counts change: one whose count is not the current one is dropped when it surfaces (a fresh
  // entry was pushed when the count changed).
  struct Entry {
    int64_t n;
    std::string merged;
    Pair p;
    bool operator<(const Entry& o) const {
      if (n != o.n) return n < o.n;
      if (merged != o.merged) return merged > o.merged;
      return p > o.p;  // two pairs that spell the same token: the lower ids first
    }
  };
  std::priority_queue<Entry> heap;
  const auto push = [&](const Pair& p) {
    const auto it = count.find(p);
    if (it != count.end() && it->second > 0)
      heap.push({it->second,
                 v.tokens[static_cast<size_t>(p.first)] + v.tokens[static_cast<size_t>(p.second)],
                 p});
  };
  for (const auto& [p, n] : count) push(p);
  std::vector<std::pair<std::string, std::string>> merges;
  while (static_cast<int64_t>(v.tokens.size()) < o_.vocab_size && !heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const auto it = count.find(e.p);
    if (it == count.end() || it->second != e.n) continue;  // stale
    if (e.n < o_.min_frequency) break;
    const int32_t id = v.add(e.merged);
    merges.emplace_back(v.tokens[static_cast<size_t>(e.p.first)],
                        v.tokens[static_cast<size_t>(e.p.second)]);
    std::set<Pair> changed;
    const std::set<size_t> in = std::move(where[e.p]);
    where.erase(e.p);
    for (const size_t w : in) {
      std::vector<int32_t>& s = words[w];
      const auto adjust = [&](size_t i, int64_t by) {  // the pair at s[i], s[i + 1]
        const Pair p{s[i], s[i + 1]};
        count[p] += by;
        changed.insert(p);
      };
      // Left to right, each occurrence merged as the encoder will merge it.
      for (size_t i = 0; i + 1 < s.size();) {
        if (s[i] != e.p.first || s[i + 1] != e.p.second) {
          ++i;
          continue;
        }
        if (i > 0) adjust(i - 1, -freq[w]);
        if (i + 2 < s.size()) adjust(i + 1, -freq[w]);
        count[e.p] -= freq[w];
        s[i] = id;
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        if (i > 0) adjust(i - 1, freq[w]);
        if (i + 1 < s.size()) adjust(i, freq[w]);
        ++i;
      }
      for (size_t i = 0; i + 1 < s.size(); ++i) where[{s[i], s[i + 1]}].insert(w);
    }
    count.erase(e.p);
    for (const Pair& p : changed) {
      if (p == e.p) continue;
      const auto c = count.find(p);
      if (c != count.end() && c->second <= 0) {
        count.erase(c);
        where.erase(p);
      } else {
        push(p);
      }
    }
  }

  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t id = 0; id < v.tokens.size(); ++id) vocab[v.tokens[id]] = id;
  nlohmann::ordered_json merge_list = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merges) merge_list.push_back(a + " " + b);
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < specials; ++i) {
    added.push_back({{"id", i},
                     {"content", o_.special_tokens[static_cast<size_t>(i)]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level(true);
  j["post_processor"] = byte_level(false);
  j["decoder"] = byte_level(false);
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::strict);
}

}  // namespace fp8lm::text
