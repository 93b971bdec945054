#include "text/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>
#include <unordered_set>

#include "fp8lm/error.h"
#include "text/byte_level.h"
#include "text/pretokenize.h"
#include "text/utf8.h"

namespace fp8lm::text {

struct BpeTokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> tokens;        // by id
  std::array<int32_t, 256> byte_token{};  // each byte's one-symbol token, -1 where absent
  struct Merge {
    int32_t rank, merged;
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left id, right id) -> rank, result
  std::vector<AddedToken> added;
  std::vector<int8_t> is_added;  // by id: 0, 1 added, 2 added and special
  bool add_prefix_space = false, ignore_merges = false;

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // The byte-level spelling of a piece: each byte's code point, in UTF-8.
  static std::string spell(std::string_view piece) {
    std::string s;
    for (const char ch : piece) append_utf8(s, byte_to_code_point()[static_cast<uint8_t>(ch)]);
    return s;
  }

  // BPE on one piece: its bytes' tokens, then the lowest-ranked adjacent pair merged, leftmost
  // first among equal ranks, until no pair has a merge (a heap of candidate pairs, each
  // checked against the symbols when it comes up, so a piece costs n log n, not n^2).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (ignore_merges) {
      const auto it = vocab.find(spell(piece));
      if (it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    struct Symbol {
      int32_t id;
      int32_t prev, next;  // -1 at the ends
    };
    std::vector<Symbol> sym;
    sym.reserve(piece.size());
    for (const char ch : piece) {
      const int32_t id = byte_token[static_cast<uint8_t>(ch)];
      if (id < 0) continue;  // a byte the vocabulary lacks is dropped, as Hugging Face's BPE does
      const auto n = static_cast<int32_t>(sym.size());
      sym.push_back({id, n - 1, -1});
      if (n > 0) sym[static_cast<size_t>(n - 1)].next = n;
    }
    if (sym.size() > 1) {
      using Candidate = std::pair<int32_t, int32_t>;  // rank, left position
      std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
      const auto push = [&](int32_t left) {
        if (left < 0) return;
        const int32_t right = sym[static_cast<size_t>(left)].next;
        if (right < 0) return;
        const auto it = merges.find(
            pair_key(sym[static_cast<size_t>(left)].id, sym[static_cast<size_t>(right)].id));
        if (it != merges.end()) heap.push({it->second.rank, left});
      };
      for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
      while (!heap.empty()) {
        const auto [rank, left] = heap.top();
        heap.pop();
        Symbol& a = sym[static_cast<size_t>(left)];
        if (a.id < 0 || a.next < 0) continue;  // merged away, or at the end now
        Symbol& b = sym[static_cast<size_t>(a.next)];
        const auto it = merges.find(pair_key(a.id, b.id));
        if (it == merges.end() || it->second.rank != rank) continue;  // the pair changed
        a.id = it->second.merged;
        b.id = -1;
        a.next = b.next;
        if (b.next >= 0) sym[static_cast<size_t>(b.next)].prev = left;
        push(a.prev);
        push(left);
      }
    }
    for (const Symbol& s : sym)
      if (s.id >= 0) out.push_back(s.id);
  }

  // The text between added tokens: split, each piece merged.
  void encode_plain(std::string_view part, std::vector<int32_t>& out) const {
    if (part.empty()) return;
    std::string prefixed;
    if (add_prefix_space && part.front() != ' ') {
      prefixed.assign(1, ' ');
      prefixed.append(part);
      part = prefixed;
    }
    thread_local std::vector<std::string_view> pieces;
    pieces.clear();
    split_gpt2(part, pieces);
    for (const std::string_view p : pieces) encode_piece(p, out);
  }

  // The bytes of ids, each one a token id.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    for (const int32_t id : ids) {
      const std::string& t = tokens[static_cast<size_t>(id)];
      const int8_t kind = is_added[static_cast<size_t>(id)];
      if (kind) {
        if (!(skip_special && kind == 2)) out += t;
        continue;
      }
      for (size_t i = 0; i < t.size();) {
        const CodePoint c = next_code_point(t, i);
        const int b = c.valid ? code_point_to_byte(c.value) : -1;
        if (b >= 0) {
          out += static_cast<char>(b);
        } else {
          out.append(t, i, c.length);  // not in the byte-level alphabet: kept as written
        }
        i += c.length;
      }
    }
    return out;
  }

  // The added token that starts at text[i], longest first; null where none does.
  const AddedToken* added_at(std::string_view text, size_t i) const {
    const AddedToken* best = nullptr;
    for (const AddedToken& a : added) {
      if (text.compare(i, a.content.size(), a.content) == 0 &&
          (!best || a.content.size() > best->content.size()))
        best = &a;
    }
    return best;
  }
};

BpeTokenizer::BpeTokenizer(std::unordered_map<std::string, int32_t> vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges,
                           std::vector<AddedToken> added, bool add_prefix_space, bool ignore_merges)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.vocab = std::move(vocab);
  m.add_prefix_space = add_prefix_space;
  m.ignore_merges = ignore_merges;
  int32_t top = -1;
  for (const auto& [token, id] : m.vocab) {
    if (id < 0) throw Error(fmt::format("tokenizer: token '{}' has a negative id {}", token, id));
    top = std::max(top, id);
  }
  for (const AddedToken& a : added) {
    if (a.id < 0)
      throw Error(fmt::format("tokenizer: added token '{}' has a negative id", a.content));
    if (a.content.empty()) throw Error(fmt::format("tokenizer: added token {} is empty", a.id));
    top = std::max(top, a.id);
  }
  // Every id names one token, 0 to the largest without a gap: an id shared by two tokens, or
  // one that names none, decodes to something other than what was encoded (or to nothing). An
  // added token may repeat its vocabulary entry (GPT-2's <|endoftext|> is in both), nothing else.
  // The ids are checked before anything is sized by the largest.
  std::unordered_set<int32_t> ids;
  for (const auto& [token, id] : m.vocab) ids.insert(id);
  for (const AddedToken& a : added) ids.insert(a.id);
  if (top >= 0 && static_cast<size_t>(top) >= ids.size()) {
    int32_t gap = 0;  // among the first ids.size() + 1, by counting
    while (ids.contains(gap)) ++gap;
    throw Error(
        fmt::format("tokenizer: no token has id {} (ids run 0 to {}): ids have gaps", gap, top));
  }
  m.tokens.resize(static_cast<size_t>(top + 1));
  std::vector<bool> named(m.tokens.size(), false);
  for (const auto& [token, id] : m.vocab) {
    const auto i = static_cast<size_t>(id);
    if (named[i])
      throw Error(fmt::format("tokenizer: tokens '{}' and '{}' both have id {}",
                              std::min(token, m.tokens[i]), std::max(token, m.tokens[i]), id));
    m.tokens[i] = token;
    named[i] = true;
  }
  std::vector<const AddedToken*> added_at(m.tokens.size(), nullptr);
  for (const AddedToken& a : added) {
    const auto i = static_cast<size_t>(a.id);
    if (const AddedToken* other = added_at[i]; other && other->content != a.content)
      throw Error(fmt::format("tokenizer: added tokens '{}' and '{}' both have id {}",
                              other->content, a.content, a.id));
    if (named[i] && !added_at[i] && m.tokens[i] != a.content &&
        m.tokens[i] != Impl::spell(a.content))
      throw Error(fmt::format("tokenizer: added token '{}' has id {}, the id of token '{}'",
                              a.content, a.id, m.tokens[i]));
    added_at[i] = &a;
    named[i] = true;
  }
  m.byte_token.fill(-1);
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, byte_to_code_point()[static_cast<size_t>(b)]);
    const auto it = m.vocab.find(s);
    if (it != m.vocab.end()) m.byte_token[static_cast<size_t>(b)] = it->second;
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto a = m.vocab.find(left), b = m.vocab.find(right), ab = m.vocab.find(left + right);
    if (a == m.vocab.end() || b == m.vocab.end() || ab == m.vocab.end()) {
      throw Error(fmt::format("tokenizer: merge {} ('{}' '{}') is not of tokens in the vocabulary",
                              rank, left, right));
    }
    // A pair listed twice keeps its first (lowest) rank, as Hugging Face's BPE does.
    m.merges.try_emplace(Impl::pair_key(a->second, b->second),
                         Impl::Merge{static_cast<int32_t>(rank), ab->second});
  }
  m.is_added.assign(m.tokens.size(), 0);
  for (AddedToken& a : added) {
    m.tokens[static_cast<size_t>(a.id)] = a.content;
    m.is_added[static_cast<size_t>(a.id)] = a.special ? 2 : 1;
  }
  m.added = std::move(added);
}

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& m = *impl_;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* a = m.added.empty() ? nullptr : m.added_at(text, i);
    if (!a) {
      ++i;
      continue;
    }
    m.encode_plain(text.substr(start, i - start), out);
    out.push_back(a->id);
    i += a->content.size();
    start = i;
  }
  m.encode_plain(text.substr(start), out);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode(text, out);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  for (const int32_t id : ids)
    if (id < 0 || id >= vocab_size())
      throw Error(fmt::format("decode: {} is not a token id (0 to {})", id, vocab_size() - 1));
  return impl_->decode(ids, skip_special);
}

std::string BpeTokenizer::decode_generated(const std::vector<int32_t>& ids) const {
  std::string out;
  std::vector<int32_t> known;
  for (const int32_t id : ids) {
    if (id >= 0 && id < vocab_size()) {
      known.push_back(id);
      continue;
    }
    out += impl_->decode(known, false);
    known.clear();
    out += fmt::format("<|id {}|>", id);
  }
  return out + impl_->decode(known, false);
}

int64_t BpeTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->tokens.size());
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& a : impl_->added)
    if (a.content == token) return a.id;
  const auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeTokenizer::token(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw Error(fmt::format("{} is not a token id (0 to {})", id, vocab_size() - 1));
  return impl_->tokens[static_cast<size_t>(id)];
}

const std::vector<AddedToken>& BpeTokenizer::added_tokens() const {
  return impl_->added;
}

}  // namespace fp8lm::text
