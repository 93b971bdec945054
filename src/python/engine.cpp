// fp8lm.Training, fp8lm.Model and fp8lm.Tokenizer: a run a step at a time, a model file's
// generation, logits and loss, and the BPE tokenizer. Long calls let go of the GIL; a Ctrl-C
// that arrives during a step is raised when the step has finished, so the run stays whole.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp8lm/error.h"
#include "fp8lm/training.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "kernels/device.h"
#include "nn/fp8_slots.h"
#include "python/bindings.h"
#include "text/bpe_tokenizer.h"
#include "train/evaluation.h"
#include "train/settings.h"
#include "train/trainer.h"

namespace fp8lm::python {
namespace {

// Raises what a signal handler left pending (KeyboardInterrupt for Ctrl-C).
void raise_pending_signals() {
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
}

// A new run's settings as `fp8lm train --config` and its flags give them.
TrainConfig new_run_config(const std::string& settings_json, const std::string& device) {
  const nlohmann::json j = parse_settings(settings_json, "fp8lm.Training");
  TrainConfig c;
  apply_settings_json(c, j, "fp8lm.Training");
  if (!j.contains("vocab")) default_vocab_for_data(c);
  c.device = parse_device(device);
  check_new_run(c);
  return c;
}

nb::dict slot_states(const std::vector<Fp8SlotState>& slots) {
  nb::dict by_gemm;
  for (const Fp8SlotState& s : slots) {
    if (!by_gemm.contains(s.gemm.c_str())) by_gemm[s.gemm.c_str()] = nb::dict();
    nb::dict gemm = nb::borrow<nb::dict>(by_gemm[s.gemm.c_str()]);
    gemm[s.slot.c_str()] = slot_state_dict(s);
  }
  return by_gemm;
}

nb::dict settings_dict(const TrainConfig& c) {
  return nb::cast<nb::dict>(nb::module_::import_("json").attr("loads")(settings_json(c).dump()));
}

class PyTraining {
 public:
  PyTraining(const std::string& settings_json, const std::string& device)
      : t_(new_run_config(settings_json, device)) {}
  explicit PyTraining(Training&& t) : t_(std::move(t)) {}

  StepStats step() {
    if (t_.done())
      throw Error("the run has done its " + std::to_string(t_.config().steps) + " steps");
    StepStats s;
    {
      nb::gil_scoped_release unlocked;
      s = t_.step();
    }
    raise_pending_signals();
    return s;
  }
  TrainResult finish() {
    TrainResult r;
    {
      nb::gil_scoped_release unlocked;
      r = t_.finish();
    }
    raise_pending_signals();
    return r;
  }
  Training& get() { return t_; }

 private:
  Training t_;
};

std::vector<int32_t> flat_ids(const IntIn& ids, int64_t& rows, int64_t& cols, const char* what) {
  if (ids.ndim() != 2 || ids.shape(0) == 0 || ids.shape(1) == 0)
    throw Error(std::string(what) + ": expected a [batch, length] array of token ids");
  rows = static_cast<int64_t>(ids.shape(0));
  cols = static_cast<int64_t>(ids.shape(1));
  return std::vector<int32_t>(ids.data(), ids.data() + ids.size());
}

void check_ids(const std::vector<int32_t>& ids, int64_t vocab, const char* what) {
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab)
      throw Error(std::string(what) + ": token id " + std::to_string(id) +
                  " is outside the model's vocabulary (0 to " + std::to_string(vocab - 1) + ")");
  }
}

// A model file (or a run directory's), for generation, logits and loss.
class PyModel {
 public:
  PyModel(const std::string& path, const std::string& device)
      : path_(resolved(path)), loaded_(load_model(path_)), device_(parse_device(device)) {}

  const TrainConfig& config() const { return loaded_.config; }

  std::vector<std::vector<int32_t>> generate(const IntIn& prompts, int64_t max_new_tokens,
                                             const Sampling& sampling,
                                             const std::vector<int32_t>& stop_tokens) {
    int64_t B = 0, P = 0;
    const std::vector<int32_t> ids = flat_ids(prompts, B, P, "generate");
    check_ids(ids, config().model.vocab, "generate");
    if (max_new_tokens < 0) throw Error("generate: max_new_tokens must be 0 or more");
    if (P + max_new_tokens > config().model.seq_len)
      throw Error("generate: a " + std::to_string(P) + "-token prompt and " +
                  std::to_string(max_new_tokens) + " new tokens exceed the model's seq_len " +
                  std::to_string(config().model.seq_len));
    sampling.validate();
    GenerateOptions o;
    o.sampling = sampling;
    o.stop_tokens = stop_tokens;
    nb::gil_scoped_release unlocked;
    InferenceModel m(*loaded_.model, config(), device_);
    return m.generate_sequences(ids.data(), B, P, max_new_tokens, o);
  }

  Numpy<float> logits(const IntIn& tokens) {
    int64_t B = 0, T = 0;
    const std::vector<int32_t> ids = flat_ids(tokens, B, T, "logits");
    check_sequence(ids, T, "logits");
    const int64_t V = config().model.vocab;
    std::vector<float> out;
    {
      nb::gil_scoped_release unlocked;
      InferenceModel m(*loaded_.model, config(), device_);
      m.model().forward(ids.data(), nullptr, B, T);
      out.resize(static_cast<size_t>(B * T * V));
      m.model().backend().download(out.data(), m.model().logits(), out.size() * sizeof(float));
    }
    return to_numpy(std::move(out),
                    {static_cast<size_t>(B), static_cast<size_t>(T), static_cast<size_t>(V)});
  }

  // Mean next-token loss over [batch, length + 1] token ids (inputs and their targets), or,
  // without tokens, the stride task's held-out loss and accuracy as `fp8lm eval` gives them.
  nb::dict eval(std::optional<IntIn> tokens, int64_t batches) {
    nb::dict out;
    double loss = 0;
    std::optional<double> accuracy;
    if (tokens) {
      int64_t B = 0, T1 = 0;
      const std::vector<int32_t> ids = flat_ids(*tokens, B, T1, "eval");
      check_sequence(ids, T1 - 1, "eval");
      if (T1 < 2) throw Error("eval: each row needs 2 or more tokens (inputs, then targets)");
      Batch batch;
      batch.B = B;
      batch.T = T1 - 1;
      for (int64_t b = 0; b < B; ++b) {
        const int32_t* row = ids.data() + b * T1;
        batch.tokens.insert(batch.tokens.end(), row, row + T1 - 1);
        batch.targets.insert(batch.targets.end(), row + 1, row + T1);
      }
      nb::gil_scoped_release unlocked;
      InferenceModel m(*loaded_.model, config(), device_);
      loss = mean_loss(m.model(), {batch});
    } else {
      if (!config().data.empty())
        throw Error(path_ +
                    " was trained on text: give eval(tokens) (a [batch, length + 1] array)");
      if (batches < 1 || batches > 1000000)
        throw Error("eval: batches " + std::to_string(batches) + " must be between 1 and 1000000");
      nb::gil_scoped_release unlocked;
      InferenceModel m(*loaded_.model, config(), device_);
      loss = mean_loss(m.model(), stride_held_out_batches(config(), batches));
      accuracy = stride_accuracy(m.model(), config());
    }
    out["loss"] = loss;
    out["perplexity"] = std::exp(loss);
    if (accuracy) out["stride_accuracy"] = *accuracy;
    return out;
  }

  nb::dict fp8_state() { return slot_states(fp8_slot_states(*loaded_.model)); }

 private:
  static std::string resolved(const std::string& path) {
    std::string note;
    return resolve_model_file(path, note);
  }
  void check_sequence(const std::vector<int32_t>& ids, int64_t T, const char* what) const {
    check_ids(ids, config().model.vocab, what);
    if (T > config().model.seq_len)
      throw Error(std::string(what) + ": sequences of " + std::to_string(T) +
                  " tokens exceed the model's seq_len " + std::to_string(config().model.seq_len));
  }

  std::string path_;
  LoadedModel loaded_;
  DeviceSpec device_;
};

}  // namespace

void bind_engine(nb::module_& m) {
  // Every training setting as `fp8lm train --help` lists it: (key, group, type, default, help).
  m.def("_settings", [] {
    nb::list out;
    for (const Setting& s : train_settings())
      out.append(nb::make_tuple(s.key(), std::string(s.group), s.type_name(), s.fallback(),
                                std::string(s.help)));
    return out;
  });

  nb::class_<Fp8Fallback>(m, "Fp8Fallback", "A GEMM moved from FP8 to BF16 by the fallback")
      .def_ro("gemm", &Fp8Fallback::gemm)
      .def_ro("slot", &Fp8Fallback::slot)
      .def_ro("reason", &Fp8Fallback::reason)
      .def_ro("step", &Fp8Fallback::step);

  nb::class_<StepStats>(m, "StepStats", "One training step's figures")
      .def_ro("step", &StepStats::step, "steps done, this one included")
      .def_ro("total", &StepStats::total, "the run's steps")
      .def_ro("loss", &StepStats::loss)
      .def_ro("lr", &StepStats::lr)
      .def_ro("grad_norm", &StepStats::grad_norm)
      .def_ro("seconds", &StepStats::seconds, "the run's time so far")
      .def_ro("tokens_per_s", &StepStats::tokens_per_s, "over the run so far")
      .def_ro("step_tokens_per_s", &StepStats::step_tokens_per_s, "this step alone")
      .def_ro("step_seconds", &StepStats::step_seconds)
      .def_ro("val_loss", &StepStats::val_loss,
              "the held-out loss, on the steps `fp8lm train` measures it (every 20th, the "
              "last); else None")
      .def_ro("skipped", &StepStats::skipped, "not finite: no update was made")
      .def_ro("skipped_steps", &StepStats::skipped_steps)
      .def_ro("fp8_fallbacks", &StepStats::fp8_fallbacks, "GEMMs that fell back to BF16 now");

  nb::class_<TrainResult>(m, "TrainResult", "A finished run's summary")
      .def_prop_ro("precision", [](const TrainResult& r) { return r.precision.label(); })
      .def_ro("steps", &TrainResult::steps)
      .def_ro("seconds", &TrainResult::seconds)
      .def_ro("tokens_per_s", &TrainResult::tokens_per_s)
      .def_ro("final_loss", &TrainResult::final_loss, "mean of the last 50 finite losses")
      .def_ro("skipped_steps", &TrainResult::skipped_steps)
      .def_ro("fp8_fallbacks", &TrainResult::fp8_fallbacks)
      .def_ro("stride_task", &TrainResult::stride_task)
      .def_ro("stride_accuracy", &TrainResult::stride_accuracy, "the stride task's")
      .def_ro("val_loss", &TrainResult::val_loss, "text runs'")
      .def_ro("sample", &TrainResult::sample, "text runs': a greedy sample")
      .def_ro("losses", &TrainResult::losses)
      .def_ro("failure", &TrainResult::failure, "why the run did not end well; empty if it did");

  nb::class_<PyTraining>(m, "_Training")
      .def(nb::init<const std::string&, const std::string&>(), nb::arg("settings_json"),
           nb::arg("device"))
      .def_static(
          "resume",
          [](const std::string& dir) {
            Training t = [&] {
              nb::gil_scoped_release unlocked;
              return Training::resume(dir);
            }();
            return PyTraining(std::move(t));
          },
          nb::arg("checkpoint_dir"))
      .def("step", &PyTraining::step)
      .def("done", [](PyTraining& t) { return t.get().done(); })
      .def("finish", &PyTraining::finish)
      .def(
          "save_model",
          [](PyTraining& t, const std::string& path) {
            nb::gil_scoped_release unlocked;
            t.get().save_model(path);
          },
          nb::arg("path"))
      .def(
          "save_checkpoint",
          [](PyTraining& t, const std::string& dir) {
            nb::gil_scoped_release unlocked;
            t.get().save_checkpoint(dir);
          },
          nb::arg("dir"))
      .def("settings", [](PyTraining& t) { return settings_dict(t.get().config()); })
      .def("precision", [](PyTraining& t) { return t.get().precision().label(); })
      .def("fp8_state", [](PyTraining& t) { return slot_states(t.get().fp8_state()); });

  nb::class_<Sampling>(m, "_Sampling")
      .def(nb::init<>())
      .def_rw("temperature", &Sampling::temperature)
      .def_rw("top_k", &Sampling::top_k)
      .def_rw("top_p", &Sampling::top_p)
      .def_rw("seed", &Sampling::seed);

  nb::class_<PyModel>(m, "_Model")
      .def(nb::init<const std::string&, const std::string&>(), nb::arg("path"), nb::arg("device"))
      .def("settings", [](PyModel& mo) { return settings_dict(mo.config()); })
      .def("generate", &PyModel::generate, nb::arg("prompts"), nb::arg("max_new_tokens"),
           nb::arg("sampling"), nb::arg("stop_tokens"))
      .def("logits", &PyModel::logits, nb::arg("tokens"))
      .def("eval", &PyModel::eval, nb::arg("tokens").none(), nb::arg("batches"))
      .def("fp8_state", &PyModel::fp8_state);

  nb::class_<text::BpeTokenizer>(m, "_Tokenizer")
      .def_static("load", &text::BpeTokenizer::load, nb::arg("path"))
      .def(
          "encode",
          [](const text::BpeTokenizer& t, nb::handle text) {
            // bytes as they are, str as UTF-8
            std::string s;
            if (nb::isinstance<nb::bytes>(text)) {
              const auto b = nb::borrow<nb::bytes>(text);
              s.assign(b.c_str(), b.size());
            } else {
              s = nb::cast<std::string>(text);
            }
            nb::gil_scoped_release unlocked;
            return t.encode(s);
          },
          nb::arg("text"))
      .def(
          "decode",
          [](const text::BpeTokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
            const std::string text = t.decode(ids, skip_special);
            return nb::bytes(text.data(), text.size());
          },
          nb::arg("ids"), nb::arg("skip_special_tokens"))
      .def_prop_ro("vocab_size", &text::BpeTokenizer::vocab_size)
      .def("token_to_id", &text::BpeTokenizer::token_id, nb::arg("token"));
}

}  // namespace fp8lm::python
