// fp8lm._fp8lm: the engine under the Python package (python/fp8lm wraps it in Python's terms).
// fp8lm::Error becomes fp8lm.Error with the same one-line message the command line prints.
#include <nanobind/stl/string.h>

#include <set>

#include "core/json.h"
#include "fp8lm/error.h"
#include "python/bindings.h"
#include "train/settings.h"

namespace fp8lm::python {

nlohmann::json parse_settings(const std::string& json_text, const std::string& origin) {
  nlohmann::json j = parse_json(json_text, origin);
  if (!j.is_object()) throw Error(origin + ": settings must be a dict");
  return j;
}

Fp8Recipe recipe_from_settings(const std::string& json_text, const std::string& origin) {
  const nlohmann::json j = parse_settings(json_text, origin);
  // The fields of TE's recipe objects; the other settings describe a run, not a recipe.
  static const std::set<std::string> kRecipeKeys = {"recipe",
                                                    "fp8_format",
                                                    "margin",
                                                    "amax_history_len",
                                                    "amax_compute_algo",
                                                    "power_2_scale",
                                                    "amax_epsilon",
                                                    "disable_rht",
                                                    "disable_stochastic_rounding",
                                                    "disable_2d_quantization"};
  for (const auto& [key, value] : j.items()) {
    if (!kRecipeKeys.contains(key)) throw Error(origin + ": '" + key + "' is not a recipe setting");
  }
  TrainConfig c;
  apply_settings_json(c, j, origin);
  c.recipe.delayed.validate();
  return c.recipe;
}

nb::dict slot_state_dict(const Fp8SlotState& s) {
  nb::dict slot;
  slot["scale"] = s.scale;
  slot["scale_inv"] = s.scale_inv;
  slot["amax_history"] = to_numpy(std::vector<float>(s.amax_history), {s.amax_history.size()});
  slot["saturated_fraction"] = s.saturated_fraction;
  slot["flushed_fraction"] = s.flushed_fraction;
  return slot;
}

}  // namespace fp8lm::python

NB_MODULE(_fp8lm, m) {
  namespace nb = nanobind;
  m.doc() = "fp8lm's engine (the fp8lm package wraps it; import fp8lm instead)";
  m.attr("__version__") = FP8LM_VERSION;
  nb::exception<fp8lm::Error>(m, "Error", PyExc_ValueError);
  // A torch module's fp8lm Linear lives as long as torch keeps the module (its autograd graph
  // included), which may be past the interpreter's last collection: not a leak to report.
  nb::set_leak_warnings(false);
  fp8lm::python::bind_numerics(m);
  fp8lm::python::bind_engine(m);
  fp8lm::python::bind_torch_linear(m);
}
