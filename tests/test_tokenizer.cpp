// The byte-level BPE tokenizer: UTF-8 reading, the byte-level alphabet, GPT-2's pre-tokenizer
// split, and encode/decode against ids made by Hugging Face's `tokenizers` (committed fixtures,
// tests/data/tokenizer, written by tools/tokenizer_check.py make; `check` there compares a few
// MB of text when the library is installed).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "fp8lm/error.h"
#include "test_util.h"
#include "text/bpe_tokenizer.h"
#include "text/bpe_trainer.h"
#include "text/byte_level.h"
#include "text/pretokenize.h"
#include "text/utf8.h"

namespace fp8lm::text {
namespace {

const std::string kData = FP8LM_TEST_DATA "/tokenizer";

TEST(Utf8, ReadsWellFormedSequencesAndMarksEveryOtherByte) {
  const std::string s = "a\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80";  // a é 日 😀
  size_t i = 0;
  std::vector<char32_t> got;
  while (i < s.size()) {
    const CodePoint c = next_code_point(s, i);
    EXPECT_TRUE(c.valid);
    got.push_back(c.value);
    i += c.length;
  }
  EXPECT_EQ(got, (std::vector<char32_t>{'a', 0xe9, 0x65e5, 0x1f600}));
  for (const std::string bad : {"\x80", "\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
                                "\xf4\x90\x80\x80", "\xff", "\xe6\x97"}) {
    const CodePoint c = next_code_point(bad, 0);
    EXPECT_FALSE(c.valid) << testing::PrintToString(bad);
    EXPECT_EQ(c.length, 1) << testing::PrintToString(bad);
  }
  std::string round;
  for (const char32_t c : got) append_utf8(round, c);
  EXPECT_EQ(round, s);
}

TEST(ByteLevel, EveryByteHasItsOwnPrintableCodePoint) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_to_code_point()[static_cast<size_t>(b)];
    EXPECT_TRUE(seen.insert(c).second) << b;
    EXPECT_EQ(code_point_to_byte(c), b);
  }
  EXPECT_EQ(byte_to_code_point()[' '], 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_code_point()['\n'], 0x10au);  // 'Ċ'
  EXPECT_EQ(byte_to_code_point()['A'], static_cast<char32_t>('A'));
  EXPECT_EQ(code_point_to_byte(0x4e00), -1);
}

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string_view> v;
  split_gpt2(s, v);
  return {v.begin(), v.end()};
}

// Pieces worked out by hand from GPT-2's pattern, one rule each.
TEST(Pretokenize, CutsAsGpt2sPattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("it's we'll they're I've I'm you'd don't"),
            (V{"it", "'s", " we", "'ll", " they", "'re", " I", "'ve", " I", "'m", " you", "'d",
               " don", "'t"}));
  EXPECT_EQ(split("IT'S 'x"), (V{"IT", "'", "S", " '", "x"}));  // upper case: no contraction
  EXPECT_EQ(split("a  b"), (V{"a", " ", " b"}));                // the last space joins b
  EXPECT_EQ(split("a\n\nb"), (V{"a", "\n", "\n", "b"}));        // a lone \n is \s+ alone
  EXPECT_EQ(split("end   "), (V{"end", "   "}));                // white space to the end
  EXPECT_EQ(split("x 123 4.5"), (V{"x", " 123", " 4", ".", "5"}));
  EXPECT_EQ(split("hi!!! ?? (a)"), (V{"hi", "!!!", " ??", " (", "a", ")"}));
  EXPECT_EQ(split("\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac"),
            (V{"\xc3\xa9t\xc3\xa9", " \xe6\x97\xa5\xe6\x9c\xac"}));
  EXPECT_EQ(split("a\xc2\xa0"
                  "b"),
            (V{"a", "\xc2\xa0", "b"}));  // U+00A0 is white space
  EXPECT_EQ(split("\xff\xfe"
                  "ab"),
            (V{"\xff\xfe", "ab"}));  // bytes that are not UTF-8
  EXPECT_EQ(split(""), V{});
}

struct Fixture {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};

Fixture expected() {
  std::ifstream in(kData + "/expected.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  Fixture f;
  for (const auto& d : j["documents"]) {
    f.texts.push_back(d["text"].get<std::string>());
    f.ids.push_back(d["ids"].get<std::vector<int32_t>>());
  }
  return f;
}

// Each document's ids as Hugging Face's library made them (several scripts, emoji, white space
// of every kind, code, a special token), from tokenizer.json and from GPT-2's two files, and
// decode gives each document back.
TEST(BpeTokenizer, EncodesAsHuggingFaceAndDecodesBack) {
  const Fixture f = expected();
  ASSERT_GT(f.texts.size(), 30u);
  const BpeTokenizer hf = BpeTokenizer::load(kData + "/tokenizer.json");
  const BpeTokenizer gpt2 = BpeTokenizer::load(kData + "/gpt2");
  EXPECT_EQ(hf.vocab_size(), 2000);
  for (size_t i = 0; i < f.texts.size(); ++i) {
    EXPECT_EQ(hf.encode(f.texts[i]), f.ids[i]) << i << ": " << f.texts[i];
    EXPECT_EQ(gpt2.encode(f.texts[i]), f.ids[i]) << i << ": " << f.texts[i];
    EXPECT_EQ(hf.decode(f.ids[i]), f.texts[i]) << i;
  }
  const int32_t eot = *hf.token_id("<|endoftext|>");
  const std::vector<int32_t> ids = hf.encode("a<|endoftext|>b");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 1);
  EXPECT_EQ(hf.decode(ids, true), "ab");
}

// Any bytes come back exactly, UTF-8 or not; a piece of 100,000 spaces merges in n log n.
TEST(BpeTokenizer, AnyBytesRoundTrip) {
  const BpeTokenizer tok = BpeTokenizer::load(kData + "/tokenizer.json");
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(static_cast<size_t>(rng() % 300), '\0');
    for (char& c : s) c = static_cast<char>(rng() % (trial % 2 ? 256 : 128));
    ASSERT_EQ(tok.decode(tok.encode(s)), s) << trial;
  }
  const std::string spaces(100000, ' ');
  const std::vector<int32_t> ids = tok.encode(spaces + "x");
  EXPECT_EQ(tok.decode(ids), spaces + "x");
  EXPECT_LT(ids.size(), spaces.size() / 2) << "runs of spaces merge";
}

// A file of the running test's own: ctest runs tests as parallel processes sharing TempDir().
std::string bad_tokenizer_path() {
  return testing::TempDir() + "fp8lm_bad_tokenizer_" +
         testing::UnitTest::GetInstance()->current_test_info()->name() + ".json";
}

void expect_error(const std::string& json_text, const std::string& needle) {
  const std::string path = bad_tokenizer_path();
  std::ofstream(path) << json_text;
  try {
    BpeTokenizer::load(path);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

// The test tokenizer.json, to edit into malformed ones.
nlohmann::json test_tokenizer_json() {
  std::ifstream in(kData + "/tokenizer.json");
  return nlohmann::json::parse(in);
}

std::string edited(nlohmann::json j, const std::function<void(nlohmann::json&)>& edit) {
  edit(j);
  return j.dump();
}

TEST(BpeTokenizer, MalformedFilesNameTheProblem) {
  const nlohmann::json good = test_tokenizer_json();
  const auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    return edited(good, edit);
  };
  expect_error("{ not json", "not valid JSON");
  expect_error("{}", "no \"model\"");
  expect_error(with([](auto& j) { j["model"]["type"] = "WordPiece"; }), "is not BPE");
  expect_error(with([](auto& j) { j["model"]["merges"][0] = "Ġ zzzz"; }), "merge 0");
  expect_error(with([](auto& j) { j["model"]["merges"][1] = "abc"; }), "not two tokens");
  expect_error(with([](auto& j) { j["model"]["vocab"]["x"] = "seven"; }), "token 'x'");
  expect_error(with([](auto& j) { j["model"]["byte_fallback"] = true; }), "byte_fallback");
  expect_error(with([](auto& j) { j["normalizer"] = {{"type", "NFKC"}}; }), "normalizer 'NFKC'");
  expect_error(with([](auto& j) {
                 j["pre_tokenizer"] = {{"type", "Whitespace"}};
               }),
               "is not ByteLevel");
  expect_error(with([](auto& j) {
                 j["post_processor"] = {{"type", "TemplateProcessing"}};
               }),
               "TemplateProcessing");
  expect_error(with([](auto& j) { j["added_tokens"][0]["lstrip"] = true; }), "lstrip");
  EXPECT_THROW(BpeTokenizer::load(testing::TempDir() + "no-such-tokenizer.json"), Error);
  // A directory with neither (its own: the temporary directory may hold another test's files).
  EXPECT_THROW(BpeTokenizer::load(test::fresh_dir("fp8lm_no_tokenizer")), Error);
  const std::string merges = testing::TempDir() + "fp8lm_bad_merges.txt";
  std::ofstream(merges) << "#version: 0.2\na b c\n";
  try {
    BpeTokenizer::from_gpt2_files(kData + "/gpt2/vocab.json", merges);
    ADD_FAILURE() << "no error for a bad merges line";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

// Issue 30 (D20, D17): a tokenizer whose ids do not name one token each decoded to other text
// than it encoded; each is refused naming the tokens and ids, and an id of 2^31 is out of range,
// not "negative".
TEST(BpeTokenizer, IdsThatDoNotNameOneTokenEachAreRefused) {
  const nlohmann::json good = test_tokenizer_json();
  const auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    return edited(good, edit);
  };
  const std::string a = good["model"]["vocab"].begin().key();
  const int32_t a_id = good["model"]["vocab"].begin().value().get<int32_t>();
  expect_error(with([](auto& j) { j["model"]["vocab"]["zzzz"] = 7; }), "both have id 7");
  expect_error(with([](auto& j) { j["model"]["vocab"]["zzzz"] = 2100; }),
               "no token has id 2000 (ids run 0 to 2100): ids have gaps");
  expect_error(with([](auto& j) { j["model"]["vocab"]["zzzz"] = 2001; }),
               "no token has id 2000 (ids run 0 to 2001): ids have gaps");
  expect_error(with([&](auto& j) { j["added_tokens"][0]["id"] = a_id; }),
               fmt::format("added token '<|endoftext|>' has id {}, the id of token '{}'", a_id, a));
  expect_error(
      with([](auto& j) {
        j["added_tokens"].push_back({{"id", 0}, {"content", "<|pad|>"}, {"special", true}});
      }),
      "added tokens '<|endoftext|>' and '<|pad|>' both have id 0");
  expect_error(
      with([](auto& j) { j["added_tokens"][0]["id"] = 2147483648u; }),
      "added token '<|endoftext|>' has id 2147483648, not an integer from 0 to 2147483647");
  expect_error(with([](auto& j) { j["model"]["vocab"]["x"] = 5.5; }), "token 'x' has id 5.5");
  expect_error(with([](auto& j) { j["model"]["vocab"]["zzzz"] = 7; }),
               bad_tokenizer_path() + ": ");  // the file is named
  // An added token repeating its vocabulary entry (GPT-2's <|endoftext|>) is one token.
  EXPECT_EQ(BpeTokenizer::load(kData + "/gpt2").vocab_size(), 2000);
}

// Issue 30 (D7): a model's vocabulary may be padded past its tokenizer's; what it generates
// there is written as an id, not refused after a whole run has trained.
TEST(BpeTokenizer, GeneratedIdsPastTheTokenizerAreWrittenAsIds) {
  const BpeTokenizer tok = BpeTokenizer::load(kData + "/tokenizer.json");
  std::vector<int32_t> ids = tok.encode("hello");
  const std::vector<int32_t> padded = {ids[0], 2000, 47605};
  EXPECT_THROW(tok.decode(padded), Error);
  EXPECT_EQ(tok.decode_generated(padded), tok.decode({ids[0]}) + "<|id 2000|><|id 47605|>");
  ids.push_back(0);
  EXPECT_EQ(tok.decode_generated(ids), tok.decode(ids));
}

BpeTokenizer tokenizer_from(const std::string& json) {
  const std::string path = testing::TempDir() + "fp8lm_trained_tokenizer.json";
  std::ofstream(path) << json;
  return BpeTokenizer::from_hf_json(path);
}

// The counts and their updates as merges rewrite the pieces: "ab" thrice (once bare, twice
// after a space), "cd" once. a+b is the most frequent pair (3), then Ġ+ab (2); every other pair
// occurs once, below min_frequency 2.
TEST(BpeTrainer, MergesTheMostFrequentPairFirst) {
  BpeTrainerOptions o;
  o.vocab_size = 1000;
  BpeTrainer t(o);
  t.add_text("ab ab ab cd");
  const nlohmann::json j = nlohmann::json::parse(t.train());
  EXPECT_EQ(j["model"]["merges"], (std::vector<std::string>{"a b", "\xc4\xa0 ab"}));
  EXPECT_EQ(j["model"]["vocab"].size(), 1u + 256u + 2u);
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  const BpeTokenizer tok = tokenizer_from(t.train());
  EXPECT_EQ(tok.encode("ab ab").size(), 2u);
  EXPECT_EQ(tok.encode(" cd").size(), 3u);
}

// On the varied documents: the vocabulary has its size, every document comes back through the
// learnt tokenizer and English text takes fewer tokens than bytes; counts gathered by two
// trainers and joined give the same file as one trainer, and training again gives it too.
TEST(BpeTrainer, LearnsAVocabularyThatRoundTripsTheText) {
  const Fixture f = expected();
  BpeTrainerOptions o;
  o.vocab_size = 600;
  o.min_frequency = 1;
  BpeTrainer all(o), first(o), second(o);
  for (size_t i = 0; i < f.texts.size(); ++i) {
    for (int r = 0; r < 3; ++r) all.add_text(f.texts[i]);
    for (int r = 0; r < 3; ++r) (i % 2 ? first : second).add_text(f.texts[i]);
  }
  first.merge_counts(second);
  const std::string json = all.train();
  EXPECT_EQ(first.train(), json);
  EXPECT_EQ(all.train(), json);
  const BpeTokenizer tok = tokenizer_from(json);
  EXPECT_EQ(tok.vocab_size(), 600);
  for (const std::string& text : f.texts) EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_LT(tok.encode(f.texts[0]).size(), f.texts[0].size() * 3 / 4);
  BpeTrainerOptions small;
  small.vocab_size = 200;
  EXPECT_THROW(BpeTrainer{small}, Error);
  BpeTrainerOptions never;
  never.min_frequency = 0;
  EXPECT_THROW(BpeTrainer{never}, Error);
}

}  // namespace
}  // namespace fp8lm::text
