#pragma once
// Every training setting, defined once: its name (the flag --name and the JSON key name with
// underscores), type, default, allowed values, help, how it is read and written, and its own
// validation. The command line's flags and help, `--config`, a run's config.json, a model
// file's config metadata, TrainConfig::validate and docs/reference/cli.md all come from this
// table.
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fp8lm/train_config.h"

namespace fp8lm {

enum class SettingType { Int, Float, Bool, Choice, Text };

struct Setting {
  std::string_view name;   // as a flag, without "--": "d-model"
  std::string_view group;  // where help lists it: "model", "fp8", "training", "data", ...
  SettingType type;
  std::string_view help;
  std::vector<std::string_view> choices;  // SettingType::Choice: the allowed values
  // The value in c as text ("512", "0.002", "true", "fp8").
  std::string (*get)(const TrainConfig& c);
  // Parses text into c; Error naming the flag for text of the wrong type or a value outside
  // the allowed ones.
  void (*set)(TrainConfig& c, std::string_view text);
  // Checks the value in c on its own (ranges); Error naming the flag. Null: any value parses.
  void (*check)(const TrainConfig& c) = nullptr;
  // Only FP8 training reads it: set to anything but its default without --precision fp8, it
  // is refused (check_fp8_only_settings).
  bool fp8_only = false;

  std::string key() const;        // the JSON key: "d_model"
  std::string flag() const;       // "--d-model"
  std::string fallback() const;   // the default value as text (TrainConfig{}'s)
  std::string type_name() const;  // INT, FLOAT, BOOL, TEXT, or the choices: {fp8,bf16}
};

std::span<const Setting> train_settings();
// By flag name or JSON key ("d-model", "d_model"); null when there is none.
const Setting* find_setting(std::string_view name_or_key);
// The setting whose name is nearest to a mistyped one ("precison" -> "precision"); empty when
// none is close.
std::string closest_setting(std::string_view name);

// Parses text into c as the flag --name does; Error naming the flag, or `label` (a config
// file's key) when one is given.
void apply_setting(TrainConfig& c, const Setting& s, std::string_view text,
                   std::string_view label = {});
// Each setting's own check (ranges), in the table's order; TrainConfig::validate adds the
// checks across settings.
void check_each_setting(const TrainConfig& c);

// The config as one flat JSON object of every setting ({"d_model": 256, "precision": "fp8",
// ...}): what a run's config.json and a model file's metadata hold, and what --config reads.
nlohmann::json settings_json(const TrainConfig& c);
// Applies a flat JSON object of settings onto c; keys other than settings are refused with the
// closest valid name, except those in `ignored`. Returns the keys it applied (as flag names).
// Older files' nested form ({"model": {...}, "recipe": {...}}) is read as well. `origin` names
// the file in errors.
std::set<std::string> apply_settings_json(TrainConfig& c, const nlohmann::json& j,
                                          const std::string& origin,
                                          const std::set<std::string>& ignored = {});
// Settings only FP8 training reads, changed from their defaults in a run that is not FP8:
// Error naming the first ("--recipe mxfp8 is an FP8 setting: add --precision fp8").
void check_fp8_only_settings(const TrainConfig& c);
// A new run with --data and no --vocab: byte-level text has 256 token ids, a token dataset its
// tokenizer's (`fp8lm train` and fp8lm.Training).
void default_vocab_for_data(TrainConfig& c);
// A new run's last checks, where `fp8lm train` and fp8lm.Training make one: FP8-only settings
// outside FP8 (check_fp8_only_settings), TrainConfig::validate, and --threads more than the
// CPUs this process may use (they would only queue behind each other: --threads 10000 trains
// at a few tokens a second). A resumed run keeps its own threads, whatever machine it resumes
// on. Error naming the setting.
void check_new_run(const TrainConfig& c);

}  // namespace fp8lm
