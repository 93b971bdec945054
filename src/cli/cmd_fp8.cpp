// fp8lm fp8 table|encode|decode: look at the FP8 formats and the block-scaled recipes' formats
// (E2M1 values, E8M0 scales) code by code, and at one block quantized the way MXFP8 and NVFP4
// quantize it (--block).
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/parse.h"
#include "core/e2m1.h"
#include "core/e8m0.h"
#include "fp8/mx_quantize.h"
#include "fp8/nvfp4_quantize.h"
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

// A format the command shows: E4M3 and E5M2 (FP8 values), E2M1 (NVFP4's values, 16 codes)
// and E8M0 (the MX block scales: no sign, no mantissa).
struct ShownFormat {
  std::string name;
  std::optional<DType> fp8;  // E4M3 or E5M2
  bool e2m1 = false, e8m0 = false;
  int codes() const { return e2m1 ? 16 : 256; }
  float decode(uint8_t code) const {
    if (fp8) return fp8_decode(code, *fp8);
    return e2m1 ? e2m1_decode(code) : e8m0_decode(code);
  }
  std::string code_text(uint8_t code) const {
    return e2m1 ? fmt::format("0x{:x}", code) : fmt::format("0x{:02x}", code);
  }
  // sign.exponent.mantissa as bits (E8M0: its 8 exponent bits).
  std::string bit_fields(uint8_t code) const {
    const auto bits = [&](unsigned value, int width) {
      std::string t;
      for (int b = width - 1; b >= 0; --b) t += ((value >> b) & 1u) ? '1' : '0';
      return t;
    };
    if (e8m0) return bits(code, 8);
    const int man_bits = e2m1 ? 1 : fp8_spec(*fp8).man_bits;
    const int exp_bits = e2m1 ? 2 : fp8_spec(*fp8).exp_bits;
    const int sign_at = e2m1 ? 3 : 7;
    return fmt::format("{}.{}.{}", (code >> sign_at) & 1, bits(code >> man_bits, exp_bits),
                       bits(code, man_bits));
  }
};

ShownFormat shown_format(std::string_view name) {
  const std::optional<DType> d = parse_dtype(name);
  const std::string shown(d ? dtype_short_name(*d) : "");
  if (d && is_fp8(*d)) return {shown, *d};
  if (d == DType::E2M1) return {shown, std::nullopt, true, false};
  if (d == DType::E8M0) return {shown, std::nullopt, false, true};
  throw Error(
      fmt::format("--format: unknown format '{}' (expected e4m3, e5m2, e2m1 or e8m0)", name));
}

struct Fp8Options {
  std::string format = "";
  bool json = false;
  bool no_saturate = false;
  bool block = false;
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
  const ShownFormat f = shown_format(o.format);
  RowPrinter out(o.json);
  for (int c = 0; c < f.codes(); ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float v = f.decode(code);
    out.row({{"code", f.code_text(code)}, {"bits", f.bit_fields(code)}, {"value", json_float(v)}},
            fmt::format("{} {} {}", f.code_text(code), f.bit_fields(code), float_text(v)));
  }
  out.finish();
}

// Every value of the arguments (or stdin) at once: a block is quantized as a whole.
std::vector<float> all_values(const Fp8Options& o) {
  std::vector<float> x;
  for_each_value(o.values, [&](const std::string& t) { x.push_back(parse_float(t)); });
  return x;
}

// One block quantized as the block-scaled recipes do it: MXFP8 for E4M3/E5M2 (one E8M0 scale,
// fp8/mx_quantize.h), NVFP4 for E2M1 with the block as the whole tensor (fp8/nvfp4_quantize.h).
void run_block(const Fp8Options& o, const ShownFormat& f) {
  if (f.e8m0) throw Error("--block quantizes e4m3, e5m2 or e2m1 values (e8m0 is the MX scale)");
  if (o.scale != "1") throw Error("--block sets the scale itself: drop --scale");
  if (o.no_saturate)
    throw Error("--block quantizes as the recipes do, saturating: drop --no-saturate");
  const std::vector<float> x = all_values(o);
  if (x.empty()) throw Error("--block needs at least one value");
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> codes(x.size());
  float amax = 0.0f;
  for (float v : x) amax = std::fmax(amax, std::fabs(v));
  float decode;  // what a code's value is multiplied by to give back the value
  Json scale;
  std::string scale_text;
  if (f.fp8) {
    const uint8_t e = mxfp8_quantize_block(codes.data(), x.data(), n, *f.fp8);
    decode = e8m0_decode(e);
    scale = {{"recipe", "mxfp8"},
             {"amax", json_float(amax)},
             {"e8m0", fmt::format("0x{:02x}", e)},
             {"scale", json_float(decode)}};
    scale_text = fmt::format("block scale 0x{:02x} (e8m0) = {} · amax {}", e, float_text(decode),
                             float_text(amax));
  } else {
    const Nvfp4BlockScales s = nvfp4_quantize_block(codes.data(), x.data(), n, amax);
    decode = s.decode();
    scale = {{"recipe", "nvfp4"},
             {"amax", json_float(amax)},
             {"global_encode_scale", json_float(s.global_encode)},
             {"e4m3", fmt::format("0x{:02x}", s.block_e4m3)},
             {"block_scale", json_float(s.block())}};
    scale_text = fmt::format("block scale 0x{:02x} (e4m3) = {} · global encode scale {} · amax {}",
                             s.block_e4m3, float_text(s.block()), float_text(s.global_encode),
                             float_text(amax));
  }
  Json values = Json::array();
  std::vector<std::string> rows;
  for (size_t i = 0; i < x.size(); ++i) {
    const float value = f.decode(codes[i]) * decode;
    values.push_back({{"input", json_float(x[i])},
                      {"code", f.code_text(codes[i])},
                      {"element", json_float(f.decode(codes[i]))},
                      {"value", json_float(value)}});
    rows.push_back(
        fmt::format("{} {} {}", float_text(x[i]), f.code_text(codes[i]), float_text(value)));
  }
  if (o.json) {
    fmt::print("{}\n", Json{{"block", scale}, {"values", values}}.dump());
    return;
  }
  fmt::print("{}\n", scale_text);
  for (const std::string& r : rows) fmt::print("{}\n", r);
}

void run_encode(const Fp8Options& o) {
  const ShownFormat f = shown_format(o.format);
  if (o.block) {
    run_block(o, f);
    return;
  }
  if (f.e8m0 && o.scale != "1") throw Error("--scale does not apply to e8m0 (a scale format)");
  if (!f.fp8 && o.no_saturate)
    throw Error(fmt::format("--no-saturate: {} has no Inf or NaN to overflow to", f.name));
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
  const auto flush = [&] {  // a chunk at a time (FP8: through the vectorized cast)
    codes.resize(x.size());
    if (f.fp8) {
      quantize(codes.data(), x.data(), static_cast<int64_t>(x.size()), scale, *f.fp8,
               !o.no_saturate);
    } else {
      for (size_t i = 0; i < x.size(); ++i)
        codes[i] = f.e2m1 ? e2m1_encode(x[i] * scale) : e8m0_encode_round_up(x[i]);
    }
    for (size_t i = 0; i < x.size(); ++i) {
      const float element = f.decode(codes[i]);
      const float value = element * scale_inv;
      out.row({{"input", json_float(x[i])},
               {"code", f.code_text(codes[i])},
               {f.fp8 ? "fp8_value" : f.name + "_value", json_float(element)},
               {"value", json_float(value)}},
              fmt::format("{} {} {}", float_text(x[i]), f.code_text(codes[i]), float_text(value)));
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
  const ShownFormat f = shown_format(o.format);
  RowPrinter out(o.json);
  for_each_value(o.values, [&](const std::string& t) {
    const uint8_t code = parse_code(t);
    if (code >= f.codes())
      throw Error(fmt::format("{} code '{}' is out of range (0 to {})", f.name, t, f.codes() - 1));
    const float v = f.decode(code);
    out.row({{"code", f.code_text(code)}, {"value", json_float(v)}},
            fmt::format("{} {}", f.code_text(code), float_text(v)));
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
  auto* fp8 = app.add_subcommand(
      "fp8", "Inspect the FP8 formats and the block formats (e2m1, e8m0): table, encode, decode");
  fp8->require_subcommand(1);
  fp8->allow_extras();  // CLI11 hands what follows "--" up to here
  auto opts = std::make_shared<Fp8Options>();
  const auto add_common = [&](CLI::App* sub) {
    sub->add_option("--format", opts->format, "e4m3, e5m2, e2m1 (NVFP4 values) or e8m0 (MX scales)")
        ->type_name("{e4m3,e5m2,e2m1,e8m0}")
        ->required();
    sub->add_flag("--json", opts->json, "print JSON instead of text");
  };

  auto* table =
      fp8->add_subcommand("table", "Every code (256; e2m1: 16): 0xNN sign.exponent.mantissa value");
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
  encode->add_option("--scale", opts->scale, "multiply by this before the cast")
      ->type_name("FLOAT");
  encode->add_flag("--block", opts->block,
                   "quantize the values as one block: MXFP8 (e4m3, e5m2) or NVFP4 (e2m1), "
                   "printing the block's scales first");
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
