// fp8lm fp8 table|encode|decode: look at the two FP8 formats code by code.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/parse.h"
#include "fp8/quantize.h"
#include "fp8lm/error.h"

namespace fp8lm::cli {
namespace {

// float as number_float_t, so JSON numbers print in float's shortest round-trip form.
using Json = nlohmann::basic_json<std::map, std::vector, std::string, bool, std::int64_t,
                                  std::uint64_t, float>;

// Shortest text that reads back to the same float ("448", "0.001953125", "nan", "-inf"). A
// NaN's sign means nothing: always "nan".
std::string float_text(float v) {
  return std::isnan(v) ? "nan" : fmt::format("{}", v);
}

// JSON has no NaN or Inf; those travel as strings.
Json json_float(float v) {
  return std::isfinite(v) ? Json(v) : Json(float_text(v));
}

std::string code_text(uint8_t code) {
  return fmt::format("0x{:02x}", code);
}

std::string bit_fields(uint8_t code, Fp8Format f) {
  const int man_bits = fp8_spec(f).man_bits, exp_bits = fp8_spec(f).exp_bits;
  const auto bits = [&](int value, int width) {
    std::string s;
    for (int b = width - 1; b >= 0; --b) s += ((value >> b) & 1) ? '1' : '0';
    return s;
  };
  return fmt::format("{}.{}.{}", code >> 7,
                     bits((code >> man_bits) & ((1 << exp_bits) - 1), exp_bits),
                     bits(code & ((1 << man_bits) - 1), man_bits));
}

struct Fp8Options {
  std::string format = "";
  bool json = false;
  bool no_saturate = false;
  std::string scale = "1";
  std::vector<std::string> values;
};

// Each value from the arguments, or whitespace-separated from stdin when none were given, read
// one at a time: a million values pass through in bounded memory.
template <class F>
void for_each_value(const std::vector<std::string>& args, F f) {
  bool only_values = false;  // after "--", "-5" and "--5" are values
  for (const auto& a : args) {
    if (a == "--" && !only_values) {
      only_values = true;
    } else if (a.starts_with("--") && !only_values) {
      throw Error(fmt::format("unknown flag '{}' (see --help)", a));
    }
  }
  if (!args.empty()) {
    for (const auto& a : args)
      if (a != "--") f(a);
    return;
  }
  for (std::string t; std::cin >> t;) f(t);
}

// Rows printed as they come: text lines, or one JSON array written element by element.
class RowPrinter {
 public:
  explicit RowPrinter(bool json) : json_(json) {}
  void row(const Json& j, const std::string& text) {
    if (!json_) {
      fmt::print("{}\n", text);
      return;
    }
    fmt::print("{}{}", first_ ? "[" : ",", j.dump());
    first_ = false;
  }
  void finish() {
    if (json_) fmt::print("{}]\n", first_ ? "[" : "");
  }

 private:
  bool json_;
  bool first_ = true;
};

void run_table(const Fp8Options& o) {
  const Fp8Format f = parse_format_flag(o.format);
  RowPrinter out(o.json);
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float v = fp8_decode(code, f);
    out.row({{"code", code_text(code)}, {"bits", bit_fields(code, f)}, {"value", json_float(v)}},
            fmt::format("{} {} {}", code_text(code), bit_fields(code, f), float_text(v)));
  }
  out.finish();
}

void run_encode(const Fp8Options& o) {
  const Fp8Format f = parse_format_flag(o.format);
  const float scale = parse_float(o.scale);
  // A subnormal scale has no finite inverse (1e-40 -> 1/scale = inf): refused, as are 0 and Inf.
  if (!std::isnormal(scale) || !(scale > 0.0f) || !std::isfinite(1.0f / scale)) {
    throw Error(fmt::format("--scale {}: the scale must be a positive normal float (from {} to {})",
                            o.scale, float_text(std::numeric_limits<float>::min()),
                            float_text(std::numeric_limits<float>::max())));
  }
  const float scale_inv = 1.0f / scale;
  RowPrinter out(o.json);
  std::vector<float> x;
  std::vector<uint8_t> codes;
  const auto flush = [&] {  // a chunk at a time through the vectorized cast
    codes.resize(x.size());
    quantize(codes.data(), x.data(), static_cast<int64_t>(x.size()), scale, f, !o.no_saturate);
    for (size_t i = 0; i < x.size(); ++i) {
      const float fp8_value = fp8_decode(codes[i], f);
      const float value = fp8_value * scale_inv;
      out.row({{"input", json_float(x[i])},
               {"code", code_text(codes[i])},
               {"fp8_value", json_float(fp8_value)},
               {"value", json_float(value)}},
              fmt::format("{} {} {}", float_text(x[i]), code_text(codes[i]), float_text(value)));
    }
    x.clear();
  };
  for_each_value(o.values, [&](const std::string& t) {
    x.push_back(parse_float(t));
    if (x.size() == 4096) flush();
  });
  flush();
  out.finish();
}

void run_decode(const Fp8Options& o) {
  const Fp8Format f = parse_format_flag(o.format);
  RowPrinter out(o.json);
  for_each_value(o.values, [&](const std::string& t) {
    const uint8_t code = parse_code(t);
    const float v = fp8_decode(code, f);
    out.row({{"code", code_text(code)}, {"value", json_float(v)}},
            fmt::format("{} {}", code_text(code), float_text(v)));
  });
  out.finish();
}

// The values of `encode VALUES` / `decode CODES`: what the subcommand left over, then what
// followed "--" (which CLI11 passes up to the parent), in command-line order.
std::vector<std::string> values_of(const CLI::App& sub, const CLI::App& parent) {
  std::vector<std::string> values = sub.remaining();
  const std::vector<std::string> after_dashes = parent.remaining();
  if (!after_dashes.empty()) values.push_back("--");
  values.insert(values.end(), after_dashes.begin(), after_dashes.end());
  return values;
}

}  // namespace

void add_fp8_command(CLI::App& app) {
  auto* fp8 = app.add_subcommand("fp8", "Inspect the FP8 formats: table, encode, decode");
  fp8->require_subcommand(1);
  fp8->allow_extras();  // CLI11 hands what follows "--" up to here
  auto opts = std::make_shared<Fp8Options>();
  const auto add_common = [&](CLI::App* sub) {
    sub->add_option("--format", opts->format, "e4m3 or e5m2")->required();
    sub->add_flag("--json", opts->json, "print JSON instead of text");
  };

  auto* table = fp8->add_subcommand("table", "All 256 codes: 0xNN sign.exponent.mantissa value");
  add_common(table);
  table->callback([opts, table, fp8] {
    const std::vector<std::string> extra = values_of(*table, *fp8);
    if (!extra.empty()) throw Error(fmt::format("fp8 table takes no values ('{}')", extra.back()));
    run_table(*opts);
  });

  auto* encode = fp8->add_subcommand(
      "encode", "Encode values (arguments, or stdin when none): input 0xNN decoded/scale");
  add_common(encode);
  encode->add_flag("--no-saturate", opts->no_saturate,
                   "overflow to Inf (E5M2) or NaN (E4M3) instead of clamping to max");
  encode->add_option("--scale", opts->scale, "multiply by this before the cast (default 1)");
  // Values are taken as extras so that "-inf" and "-nan" are not mistaken for flags;
  // anything that is not a number (a mistyped flag included) is rejected by the parser.
  encode->allow_extras();
  encode->footer("VALUES: numbers to encode (e.g. 1.5 -inf nan); none: read stdin");
  encode->callback([opts, encode, fp8] {
    opts->values = values_of(*encode, *fp8);
    if (parse_only() && opts->values.empty()) return;  // would read stdin
    run_encode(*opts);
  });

  auto* decode = fp8->add_subcommand("decode", "Decode codes (0xNN or decimal; stdin when none)");
  add_common(decode);
  decode->allow_extras();
  decode->footer("CODES: 0xNN or decimal; none: read stdin");
  decode->callback([opts, decode, fp8] {
    opts->values = values_of(*decode, *fp8);
    if (parse_only() && opts->values.empty()) return;  // would read stdin
    run_decode(*opts);
  });
}

}  // namespace fp8lm::cli
