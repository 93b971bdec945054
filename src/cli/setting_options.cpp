#include "cli/setting_options.h"

#include <fmt/format.h>

#include <cstdio>

#include "fp8lm/error.h"

namespace fp8lm::cli {

void add_setting_options(CLI::App* cmd, const std::shared_ptr<SettingOptions>& options,
                         const std::function<bool(const Setting&)>& keep,
                         const std::function<std::string(const Setting&)>& group) {
  for (const Setting& s : train_settings()) {
    if (!keep(s)) continue;
    const std::string name(s.name);
    CLI::Option* o = cmd->add_option(s.flag(), options->values[name], std::string(s.help));
    o->group(group(s));
    if (s.type != SettingType::Bool) {
      o->type_name(s.type_name());
      if (!s.fallback().empty()) o->default_str(s.fallback());
      continue;
    }
    // A switch; "--NAME false" still parses (the old spelling), hidden from help.
    o->expected(0, 1)->type_name("");
    o->description(fmt::format("{} (default: {}; --no-{} turns it off)", s.help,
                               s.fallback() == "true" ? "on" : "off", name));
    cmd->add_flag_callback(fmt::format("--no-{}", name),
                           [options, name] { options->negated.insert(name); })
        ->group("");
  }
}

std::vector<std::pair<const Setting*, std::string>> given_settings(const SettingOptions& options,
                                                                   CLI::App* cmd) {
  std::vector<std::pair<const Setting*, std::string>> given;
  for (const Setting& s : train_settings()) {
    const std::string name(s.name);
    if (!options.values.contains(name)) continue;  // not one of this command's
    const bool set = cmd->get_option(s.flag())->count() > 0;
    if (s.type != SettingType::Bool) {
      if (set) given.emplace_back(&s, options.values.at(name));
      continue;
    }
    const bool negated = options.negated.contains(name);
    if (set && negated)
      throw Error(fmt::format("{} and --no-{} contradict each other", s.flag(), name));
    if (negated) given.emplace_back(&s, "false");
    if (!set) continue;
    const std::string& v = options.values.at(name);
    if (v == "true" || v == "false") {
      fmt::print(stderr, "note: {} {} is an old spelling; write {}\n", s.flag(), v,
                 v == "false" ? fmt::format("--no-{}", name) : s.flag());
    }
    given.emplace_back(&s, v.empty() ? "true" : v);
  }
  return given;
}

}  // namespace fp8lm::cli
