// The one JSON reader (core/json.h): nesting bounded below what overflows the stack, numbers
// beyond a double's range refused, errors as one line naming the input, and typed fields whose
// errors name the input and the key.
#include <gtest/gtest.h>

#include <string>

#include "core/json.h"
#include "fp8lm/error.h"
#include "test_util.h"

namespace fp8lm {
namespace {

std::string nested(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  for (int i = 0; i < depth; ++i) s += "}";
  return s;
}

using test::error_of;

TEST(Json, ParsesNestingUpToTheLimit) {
  const nlohmann::json j = parse_json(nested(kMaxJsonDepth), "f.json");
  EXPECT_FALSE(j.dump().empty());  // dump recurses: safe at this depth
  EXPECT_EQ(parse_json("[" + nested(kMaxJsonDepth - 1) + "]", "f.json").size(), 1u);
}

TEST(Json, RefusesNestingPastTheLimitBeforeParsing) {
  EXPECT_EQ(error_of([] { parse_json(nested(kMaxJsonDepth + 1), "f.json"); }),
            "f.json: JSON nested deeper than 64 levels (line 1)");
  // The probe's input: 100000 levels, which nlohmann's dump and copy overflow the stack on.
  EXPECT_NE(error_of([] {
              parse_json(nested(100000), "--config c.json");
            }).find("--config c.json: JSON nested deeper"),
            std::string::npos);
  // Unclosed, over several lines: the line where the limit is passed.
  std::string open_only;
  for (int i = 0; i < 70; ++i) open_only += "[\n";
  EXPECT_EQ(error_of([&] { parse_json(open_only, "m.jsonl line 4"); }),
            "m.jsonl line 4: JSON nested deeper than 64 levels (line 65)");
}

TEST(Json, BracketsInsideStringsAreNotNesting) {
  const std::string deep_text = "{\"k\": \"" + std::string(1000, '[') + "\\\"{{{\"}";
  EXPECT_EQ(parse_json(deep_text, "f").at("k").get<std::string>().size(), 1004u);
}

TEST(Json, RefusesANumberBeyondADoublesRange) {
  const std::string msg = error_of([] { parse_json(R"({"lr": 1e400})", "--config c.json"); });
  EXPECT_NE(msg.find("--config c.json: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("1e400"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
  EXPECT_NO_THROW(parse_json("[1e-400, 1e308, 18446744073709551616]", "f"));  // 0, and doubles
}

TEST(Json, InvalidTextIsOneLineNamingTheInput) {
  const std::string msg = error_of([] { parse_json("{\"a\": 1,\n}", "run/metrics.jsonl line 7"); });
  EXPECT_TRUE(msg.starts_with("run/metrics.jsonl line 7: not valid JSON (")) << msg;
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;  // nlohmann's position in the text
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { parse_json("", "empty.json"); }).find("empty.json: not valid JSON"),
            std::string::npos);
}

TEST(Json, TypedFieldsNameTheInputAndTheKey) {
  const nlohmann::json j = parse_json(
      R"({"step": "ten", "n": 3, "big": 5000000000, "neg": -1, "f": 0.5, "ok": true, "z": null})",
      "m.jsonl line 3");
  EXPECT_EQ(json_require<int64_t>(j, "n", "w"), 3);
  EXPECT_EQ(json_value<double>(j, "n", 0.0, "w"), 3.0);  // an integer is a number
  EXPECT_EQ(json_value<int32_t>(j, "missing", 7, "w"), 7);
  EXPECT_EQ(json_value<int32_t>(j, "z", 7, "w"), 7);  // null reads as absent
  EXPECT_TRUE(json_value<bool>(j, "ok", false, "w"));
  EXPECT_EQ(error_of([&] { json_require<double>(j, "step", "m.jsonl line 3"); }),
            "m.jsonl line 3: \"step\" is \"ten\", not a number");
  EXPECT_EQ(error_of([&] { json_value<int32_t>(j, "big", 0, "cfg"); }),
            "cfg: \"big\" is 5000000000, not an integer from -2147483648 to 2147483647");
  EXPECT_EQ(error_of([&] { json_value<uint32_t>(j, "neg", 0u, "cfg"); }),
            "cfg: \"neg\" is -1, not an integer from 0 to 4294967295");
  EXPECT_EQ(error_of([&] { json_value<int64_t>(j, "f", 0, "cfg"); }),
            "cfg: \"f\" is 0.5, not an integer from -9223372036854775808 to 9223372036854775807");
  EXPECT_EQ(error_of([&] { json_require<std::string>(j, "gone", "cfg"); }), "cfg: no \"gone\"");
  EXPECT_EQ(error_of([&] { json_value<int>(nlohmann::json::array(), "k", 0, "cfg"); }),
            "cfg: not a JSON object");
}

}  // namespace
}  // namespace fp8lm
