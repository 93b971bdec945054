// A TrainConfig as JSON and back: the flat object of every setting (train/settings.h).
#include "train/settings.h"

#include <fmt/format.h>

#include "core/parse_number.h"
#include "fp8lm/error.h"

namespace fp8lm {
namespace {

// Files written before the flat schema: {"precision", "recipe": {...}, "model": {...}, ...},
// some keys under other names. Returns the flat object.
nlohmann::json flatten_nested(const nlohmann::json& j) {
  nlohmann::json flat = nlohmann::json::object();
  for (const auto& [key, value] : j.items()) {
    if (key == "model" || key == "recipe") continue;
    flat[key] = value;
  }
  for (const auto& [key, value] : j["model"].items())
    flat[key == "tied_head" ? "tie_embeddings" : key] = value;
  if (j.contains("recipe") && j["recipe"].is_object()) {
    for (const auto& [key, value] : j["recipe"].items())
      flat[key == "kind" ? "recipe" : key] = value;
  }
  if (flat.contains("bf16_grad_reduce") && flat["bf16_grad_reduce"].is_boolean()) {
    flat["grad_reduce"] = flat["bf16_grad_reduce"].get<bool>() ? "bf16" : "fp32";
    flat.erase("bf16_grad_reduce");
  }
  if (flat.contains("fp8_fallback") && flat["fp8_fallback"].is_boolean())
    flat["fp8_fallback"] = flat["fp8_fallback"].get<bool>() ? "auto" : "off";
  return flat;
}

}  // namespace

nlohmann::json settings_json(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const Setting& s : train_settings()) {
    const std::string v = s.get(c);
    switch (s.type) {
      case SettingType::Int:
        j[s.key()] = *parse_int(v);
        break;
      case SettingType::Float:
        j[s.key()] = parse_double(v);
        break;
      case SettingType::Bool:
        j[s.key()] = v == "true";
        break;
      case SettingType::Choice:
      case SettingType::Text:
        j[s.key()] = v;
        break;
    }
  }
  return j;
}

std::set<std::string> apply_settings_json(TrainConfig& c, const nlohmann::json& in,
                                          const std::string& origin,
                                          const std::set<std::string>& ignored) {
  if (!in.is_object()) throw Error(fmt::format("{}: expected a JSON object of settings", origin));
  const bool nested = in.contains("model") && in["model"].is_object();
  const nlohmann::json j = nested ? flatten_nested(in) : in;
  std::set<std::string> applied;
  for (const auto& [key, value] : j.items()) {
    if (ignored.contains(key)) continue;
    const Setting* s = find_setting(key);
    if (!s) {
      const std::string near = closest_setting(key);
      throw Error(fmt::format(
          "{}: unknown setting '{}'{}", origin, key,
          near.empty() ? "" : fmt::format(" (did you mean '{}'?)", find_setting(near)->key())));
    }
    if (!value.is_string() && !value.is_number() && !value.is_boolean())
      throw Error(fmt::format("{}: '{}' must be a number, a string or true/false", origin, key));
    const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    try {
      apply_setting(c, *s, text, key);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", origin, e.what()));
    }
    applied.insert(std::string(s->name));
  }
  return applied;
}

}  // namespace fp8lm
