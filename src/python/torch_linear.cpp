// What fp8lm.torch runs: one fp8lm Linear (nn/linear.h) per torch module, with its own FP8
// scaling state, and the autocast and GEMM-precision scopes around the user's forward. The
// torch side (python/fp8lm/torch.py) hands in weights and inputs without copies and wraps
// forward and backward in an autograd Function; the GEMMs, casts and scaling updates are the
// engine's own, so a converted torch model quantizes exactly as fp8lm's models do.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp8lm/error.h"
#include "nn/autocast.h"
#include "nn/fp8_slots.h"
#include "nn/linear.h"
#include "nn/saved_activation.h"
#include "python/bindings.h"

namespace fp8lm::python {
namespace {

// fp8lm.torch.fp8_autocast's scope: TE's fp8_autocast. Entered and left by Python's `with`
// (last in, first out); the forward slots of every module it ran update when it closes.
class AutocastScope {
 public:
  AutocastScope(bool enabled, const std::string& recipe_settings, uint64_t seed)
      : recipe_(recipe_from_settings(recipe_settings, "fp8_autocast")),
        enabled_(enabled),
        seed_(seed) {}
  void enter() {
    if (scope_) throw Error("fp8_autocast: this scope is already open");
    scope_ = std::make_unique<Autocast>(enabled_, recipe_, AmaxReducer{}, seed_);
  }
  void exit() {
    nb::gil_scoped_release unlocked;
    scope_.reset();
  }

 private:
  Fp8Recipe recipe_;
  bool enabled_;
  uint64_t seed_;
  std::unique_ptr<Autocast> scope_;
};

// The precision of GEMMs outside FP8 (fp8lm.torch.gemm_precision): "fp32" or "bf16".
class GemmPrecisionScope {
 public:
  explicit GemmPrecisionScope(const std::string& precision)
      : precision_(precision == "bf16" ? Precision::Bf16
                   : precision == "fp32"
                       ? Precision::Fp32
                       : throw Error("gemm_precision '" + precision + "': expected fp32 or bf16")) {
  }
  void enter() { scope_ = std::make_unique<GemmPrecision>(precision_); }
  void exit() { scope_.reset(); }

 private:
  Precision precision_;
  std::unique_ptr<GemmPrecision> scope_;
};

void copy_into(Parameter& p, const FloatIn& values, const char* what) {
  if (static_cast<int64_t>(values.size()) != p.numel())
    throw Error(std::string(what) + ": " + std::to_string(values.size()) + " values for " + p.name +
                " of " + std::to_string(p.numel()));
  std::memcpy(p.value.data(), values.data(), values.size() * sizeof(float));
  ++p.version;
}

class TorchLinear {
 public:
  TorchLinear(const std::string& name, int64_t in, int64_t out, bool bias)
      : linear_(name, in, out, bias) {
    if (in < 1 || out < 1) throw Error(name + ": in_features and out_features must be 1 or more");
  }

  // y = x · Wᵀ + b for x [rows, in]; returns y and the forward's number, which its backward
  // must name (the module keeps one forward's saved tensors).
  std::pair<Numpy<float>, uint64_t> forward(const FloatIn& x, const FloatIn& weight,
                                            std::optional<FloatIn> bias, bool training) {
    const int64_t in = linear_.in_features(), out = linear_.out_features();
    if (x.size() % static_cast<size_t>(in) != 0 || x.size() == 0)
      throw Error(linear_.name() + ": an input of " + std::to_string(x.size()) +
                  " values is not rows of in_features " + std::to_string(in));
    copy_into(linear_.weight(), weight, "weight");
    if (linear_.bias() && bias) copy_into(*linear_.bias(), *bias, "bias");
    rows_ = static_cast<int64_t>(x.size()) / in;
    const AutocastState& scope = autocast_state();
    precision_ = linear_.gemm_precision();
    fp8_ = scope.enabled && precision_ == Precision::Fp8;
    recipe_ = scope.recipe;
    // An FP32 forward keeps a pointer to its input for the weight gradient, which the caller's
    // tensor may not outlive: a copy of its own. The BF16 and FP8 forwards save their casts.
    const float* input = x.data();
    if (precision_ == Precision::Fp32) {
      x_.assign(x.data(), x.data() + x.size());
      input = x_.data();
    }
    std::vector<float> y(static_cast<size_t>(rows_ * out));
    {
      nb::gil_scoped_release unlocked;
      TrainingForward saving(training);
      linear_.forward(input, y.data(), rows_);
    }
    return {to_numpy(std::move(y), {static_cast<size_t>(rows_), static_cast<size_t>(out)}),
            ++forwards_};
  }

  // dL/dx, dL/dW and dL/db of forward `id` for dy [rows, out]; the backward slots update after
  // it under delayed scaling, as TE updates them after backward.
  std::tuple<Numpy<float>, Numpy<float>, std::optional<Numpy<float>>> backward(const FloatIn& dy,
                                                                               uint64_t id) {
    if (id != forwards_)
      throw Error(linear_.name() +
                  ": backward of an earlier FP8 forward. fp8lm.torch.Linear keeps its last FP8 "
                  "forward for backward: call backward before the module's next forward (no "
                  "reuse of a module or activation recomputation within one FP8 step)");
    const int64_t in = linear_.in_features(), out = linear_.out_features();
    if (static_cast<int64_t>(dy.size()) != rows_ * out)
      throw Error(linear_.name() + ": the output gradient does not match the forward's output");
    Parameter& w = linear_.weight();
    w.grad.zero();
    if (linear_.bias()) linear_.bias()->grad.zero();
    std::vector<float> dx(static_cast<size_t>(rows_ * in));
    {
      nb::gil_scoped_release unlocked;
      linear_.backward(dy.data(), dx.data(), rows_, /*accumulate_dx=*/false);
      if (fp8_ && recipe_.kind == ScalingKind::Delayed)
        linear_.scaling().update(Direction::Backward, recipe_.delayed);
    }
    std::optional<Numpy<float>> db;
    if (linear_.bias()) db = to_numpy(linear_.bias()->grad.to_host(), {static_cast<size_t>(out)});
    return {to_numpy(std::move(dx), {static_cast<size_t>(rows_), static_cast<size_t>(in)}),
            to_numpy(w.grad.to_host(), {static_cast<size_t>(out), static_cast<size_t>(in)}), db};
  }

  Linear& linear() { return linear_; }
  // The last forward's number, and the precision its GEMMs ran in: "fp8", "bf16" or "fp32".
  uint64_t last_forward() const { return forwards_; }
  std::string last_precision() const {
    return fp8_ ? "fp8" : precision_ == Precision::Bf16 ? "bf16" : "fp32";
  }

 private:
  Linear linear_;
  std::vector<float> x_;
  int64_t rows_ = 0;
  uint64_t forwards_ = 0;
  bool fp8_ = false;
  Precision precision_ = Precision::Fp32;
  Fp8Recipe recipe_;
};

nb::dict fp8_meta_of(Linear& l) {
  nb::dict slots;
  for (const Fp8SlotState& s : fp8_slot_states(std::vector<Linear*>{&l}))
    slots[s.slot.c_str()] = slot_state_dict(s);
  return slots;
}

// fp8lm's own Linear driven as the engine's models drive it, for `steps` steps on the same x,
// W, b and dy: an autocast scope around each forward (its forward slots update as it closes),
// backward, then the backward slots' update. What fp8lm.torch.Linear, driven through torch's
// autograd and fp8_autocast, must equal bit for bit (tests/python/test_torch.py).
nb::list linear_reference_steps(const FloatIn& x, const FloatIn& w, std::optional<FloatIn> b,
                                const FloatIn& dy, bool fp8, const std::string& recipe_settings,
                                int steps, uint64_t first_seed) {
  const Fp8Recipe recipe = recipe_from_settings(recipe_settings, "reference");
  const auto out = static_cast<int64_t>(w.shape(0)), in = static_cast<int64_t>(w.shape(1));
  const int64_t rows = static_cast<int64_t>(x.size()) / in;
  Linear l("reference", in, out, b.has_value());
  copy_into(l.weight(), w, "weight");
  if (b) copy_into(*l.bias(), *b, "bias");
  nb::list results;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> y(static_cast<size_t>(rows * out)), dx(static_cast<size_t>(rows * in));
    l.weight().grad.zero();
    if (b) l.bias()->grad.zero();
    {
      const Autocast scope(fp8, recipe, {}, first_seed + static_cast<uint64_t>(s));
      const TrainingForward saving(true);
      l.forward(x.data(), y.data(), rows);
    }
    l.backward(dy.data(), dx.data(), rows, /*accumulate_dx=*/false);
    if (fp8 && recipe.kind == ScalingKind::Delayed)
      l.scaling().update(Direction::Backward, recipe.delayed);
    nb::dict step;
    step["y"] = to_numpy(std::move(y), {static_cast<size_t>(rows), static_cast<size_t>(out)});
    step["dx"] = to_numpy(std::move(dx), {static_cast<size_t>(rows), static_cast<size_t>(in)});
    step["dw"] =
        to_numpy(l.weight().grad.to_host(), {static_cast<size_t>(out), static_cast<size_t>(in)});
    if (b) step["db"] = to_numpy(l.bias()->grad.to_host(), {static_cast<size_t>(out)});
    step["fp8_meta"] = fp8_meta_of(l);
    results.append(step);
  }
  return results;
}

}  // namespace

void bind_torch_linear(nb::module_& m) {
  nb::class_<AutocastScope>(m, "_AutocastScope")
      .def(nb::init<bool, const std::string&, uint64_t>(), nb::arg("enabled"),
           nb::arg("recipe_settings"), nb::arg("seed"))
      .def("enter", &AutocastScope::enter)
      .def("exit", &AutocastScope::exit);
  nb::class_<GemmPrecisionScope>(m, "_GemmPrecisionScope")
      .def(nb::init<const std::string&>(), nb::arg("precision"))
      .def("enter", &GemmPrecisionScope::enter)
      .def("exit", &GemmPrecisionScope::exit);
  nb::class_<TorchLinear>(m, "_Linear")
      .def(nb::init<const std::string&, int64_t, int64_t, bool>(), nb::arg("name"),
           nb::arg("in_features"), nb::arg("out_features"), nb::arg("bias"))
      .def("forward", &TorchLinear::forward, nb::arg("x"), nb::arg("weight"),
           nb::arg("bias").none(), nb::arg("training"))
      .def("backward", &TorchLinear::backward, nb::arg("dy"), nb::arg("forward_id"))
      .def("fp8_meta", [](TorchLinear& l) { return fp8_meta_of(l.linear()); })
      .def("last_forward", &TorchLinear::last_forward)
      .def("last_precision", &TorchLinear::last_precision);
  m.def("_linear_reference_steps", &linear_reference_steps, nb::arg("x"), nb::arg("weight"),
        nb::arg("bias").none(), nb::arg("dy"), nb::arg("fp8"), nb::arg("recipe_settings"),
        nb::arg("steps"), nb::arg("first_seed"));
}

}  // namespace fp8lm::python
