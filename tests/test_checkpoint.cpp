// Checkpoints: resume continues bit for bit; the safetensors reader refuses every kind of
// damaged or foreign file with a one-line Error naming the file; model files round-trip.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "io/safetensors.h"
#include "io/warning.h"
#include "run_util.h"
#include "safetensors_edit.h"

namespace fp8lm {
namespace {

namespace fs = std::filesystem;
using namespace test;  // the file-editing helpers

TrainConfig tiny(Precision p) {
  TrainConfig c;
  c.model = {.vocab = 24, .seq_len = 12, .d_model = 32, .n_layers = 2, .n_heads = 4, .ffn = 64};
  c.precision = p;
  c.steps = 16;
  c.batch_size = 4;
  c.threads = 2;
  c.warmup = 4;
  c.evaluate = false;
  c.recipe.delayed.amax_history_len = 4;
  return c;
}

struct Variant {
  const char* name;
  Precision p;
  Format format;
  bool fp8_weights;
  ScalingKind kind = ScalingKind::Delayed;
};

TEST(Resume, StopAndResumeEqualsUninterruptedBitForBit) {
  const Variant variants[] = {
      {"fp32", Precision::Fp32, Format::Hybrid, false},
      {"fp8", Precision::Fp8, Format::Hybrid, false},
      {"fp8_e4m3_weights", Precision::Fp8, Format::E4M3, true},
      // Issue 14: NVFP4's stochastic rounding draws by step.
      {"mxfp8", Precision::Fp8, Format::E4M3, false, ScalingKind::Mxfp8},
      {"nvfp4", Precision::Fp8, Format::E4M3, false, ScalingKind::Nvfp4},
      // Block-scaled FP8 weights: codes and block scales in the model.
      {"block_weights", Precision::Fp8, Format::E4M3, true, ScalingKind::Block},
      {"mxfp8_weights", Precision::Fp8, Format::E4M3, true, ScalingKind::Mxfp8},
      {"nvfp4_weights", Precision::Fp8, Format::E4M3, true, ScalingKind::Nvfp4}};
  for (const Variant& v : variants) {
    TrainConfig c = tiny(v.p);
    c.recipe.delayed.format = v.format;
    c.recipe.kind = v.kind;
    if (v.kind == ScalingKind::Nvfp4) c.model.seq_len = 16;  // the Hadamard transform's groups
    c.fp8_weights = v.fp8_weights;
    Trainer straight(c);
    TrainResult r_straight;
    const RunSchedule every4{.val_every = 4};
    ASSERT_EQ(test::train_in_dir(straight, test::fresh_dir(std::string(v.name) + "_a"), every4,
                                 &r_straight),
              RunEnd::Finished);

    const std::string dir = test::fresh_dir(std::string(v.name) + "_b");
    {
      Trainer first(c);
      // Stops after a step with a validation pass: evaluating changes nothing.
      ASSERT_EQ(test::train_in_dir(first, dir, {.stop_after = 8, .val_every = 4}), RunEnd::Stopped)
          << v.name;
      EXPECT_EQ(first.steps_done(), 8);
    }
    std::unique_ptr<Trainer> resumed = resume_trainer(latest_checkpoint(dir));
    EXPECT_EQ(resumed->steps_done(), 8);
    TrainResult r_resumed;
    ASSERT_EQ(test::train_in_dir(*resumed, dir, every4, &r_resumed), RunEnd::Finished);
    EXPECT_EQ(r_resumed.losses, r_straight.losses) << v.name;
    const ParameterList a = straight.model().parameters(), b = resumed->model().parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(a[i]->values(), b[i]->values()) << v.name << " " << a[i]->name;
    const auto ma = straight.model().fp8_state(), mb = resumed->model().fp8_state();
    for (size_t i = 0; i < ma.size(); ++i) {
      for (Slot s : {Slot::Input, Slot::Weight, Slot::GradOutput}) {
        EXPECT_EQ(ma[i][s].scale, mb[i][s].scale) << v.name;
        EXPECT_EQ(ma[i][s].amax_history, mb[i][s].amax_history) << v.name;
      }
    }
  }
}

TEST(Checkpoint, KeepsTheLastKAndNamesTheLatest) {
  TrainConfig c = tiny(Precision::Fp32);
  c.steps = 10;
  Trainer t(c);
  const std::string dir = test::fresh_dir("keep");
  test::train_in_dir(t, dir, {.checkpoint_every = 2}, nullptr, /*keep_checkpoints=*/2);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    if (e.is_directory()) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-000008", "step-000010"}));
  EXPECT_EQ(latest_checkpoint(dir), dir + "/checkpoints/step-000010");
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dir + "/config.json"));
}

// Issue 30 (D6): past step 999,999 the names grow a digit; they are ordered by step, not as
// text, so pruning keeps the newest and resume finds them.
TEST(Checkpoint, CheckpointsAreOrderedByStepNotAsText) {
  const std::string dir = test::fresh_dir("ckpt_order");
  for (const char* name : {"step-999998", "step-999999", "step-1000000", "step-1000001",
                           "step-1000003", "step-1000002", "step-x", "step-", "steps-5"})
    std::filesystem::create_directories(dir + "/checkpoints/" + name);
  EXPECT_EQ(checkpoint_names(dir),
            (std::vector<std::string>{"step-1000003", "step-1000002", "step-1000001",
                                      "step-1000000", "step-999999", "step-999998"}));
  EXPECT_EQ(checkpoint_step("step-1000003"), 1000003);
  EXPECT_EQ(checkpoint_step("step-000120"), 120);
  EXPECT_EQ(checkpoint_step("step-12a"), std::nullopt);
  EXPECT_EQ(checkpoint_step("step-" + std::string(19, '9')), std::nullopt);  // beyond int64
}

TEST(Checkpoint, ModelFileRoundTripsWeightsAndFp8State) {
  TrainConfig c = tiny(Precision::Fp8);
  Trainer t(c);
  for (int i = 0; i < 3; ++i) t.train_step();
  const std::string path = test::fresh_dir("roundtrip") + ".safetensors";
  trainer_model_file(t).write(path);
  const LoadedModel m = load_model(path);
  const ParameterList a = t.model().parameters(), b = m.model->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]->values(), b[i]->values()) << a[i]->name;
  const Fp8Meta want = t.model().layer(1).mlp().fc1().fp8_meta();
  const Fp8Meta got = m.model->layer(1).mlp().fc1().fp8_meta();
  EXPECT_EQ(got[Slot::GradOutput].scale, want[Slot::GradOutput].scale);
  EXPECT_EQ(got[Slot::Input].amax_history, want[Slot::Input].amax_history);
  EXPECT_EQ(m.config.model.d_model, 32);
  EXPECT_EQ(m.file.metadata().at("step"), "3");
}

// Issue 14 (3): under --fp8-weights with a block-scaled recipe, each GEMM weight is stored as
// the module holds it, its codes with their block scales (in the recipe's grid for the weight)
// and its tensor scale_inv, and loads as those decoded.
TEST(Checkpoint, BlockScaledFp8WeightsKeepTheirBlockScales) {
  for (const ScalingKind kind : {ScalingKind::Block, ScalingKind::Mxfp8, ScalingKind::Nvfp4}) {
    SCOPED_TRACE(std::string(scaling_kind_name(kind)));
    TrainConfig c = tiny(Precision::Fp8);
    c.model.seq_len = 16;
    c.recipe.kind = kind;
    c.fp8_weights = true;
    Trainer t(c);
    for (int i = 0; i < 2; ++i) t.train_step();
    const std::string path = test::fresh_dir("block_weights") + ".safetensors";
    trainer_model_file(t).write(path);
    const Safetensors file = Safetensors::read(path);
    const LoadedModel m = load_model(path);
    Linear& fc1 = t.model().layer(1).mlp().fc1();
    const BlockCast cast = fc1.fp8_weight_block_cast();
    const std::string name = fc1.weight().name;
    // 2D blocks for Float8BlockScaling and NVFP4, 1x32 for MXFP8.
    EXPECT_EQ(cast.grid.block_rows, kind == ScalingKind::Mxfp8 ? 1 : cast.grid.block_cols);
    const TensorData& scales = file.at(name + "_block_scales");
    EXPECT_EQ(scales.shape, (std::vector<int64_t>{cast.grid.grid_rows(), cast.grid.grid_cols()}));
    const TensorData& codes = file.at(name);
    const Linear::Fp8Weight w = fc1.fp8_weight();
    const std::vector<uint8_t>& want_codes = w.codes;
    EXPECT_TRUE(
        std::equal(codes.bytes.begin(), codes.bytes.end(), want_codes.begin(), want_codes.end()));
    const std::vector<uint8_t>& want_scales = w.block_scales;
    EXPECT_TRUE(std::equal(scales.bytes.begin(), scales.bytes.end(), want_scales.begin(),
                           want_scales.end()));
    const std::vector<float> decoded =
        block_decode(cast, want_codes.data(), want_scales.data(), w.tensor_scale_inv);
    EXPECT_EQ(m.model->layer(1).mlp().fc1().weight().values(), decoded);
    // The codes are a real cast of the master: decoded, they stay near it.
    const std::vector<float> master = fc1.weight().values();
    double err = 0, norm = 0;
    for (size_t i = 0; i < master.size(); ++i) {
      err += (decoded[i] - master[i]) * (decoded[i] - master[i]);
      norm += master[i] * master[i];
    }
    // FP8 (3 mantissa bits) within a few percent; FP4 (1 bit) within a third.
    EXPECT_LT(std::sqrt(err / norm), kind == ScalingKind::Nvfp4 ? 0.3 : 0.05);
  }
}

// Reads a file, lets `damage` change its bytes, and expects load_model to refuse it.
void expect_refused(const std::string& good,
                    const std::function<void(std::vector<uint8_t>&)>& damage,
                    const std::string& needle) {
  std::ifstream in(good, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  damage(bytes);
  const std::string bad = good + ".bad";
  std::ofstream(bad, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  try {
    load_model(bad);
    ADD_FAILURE() << "accepted a damaged file (" << needle << ")";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind(bad, 0), 0u) << "names the file: " << msg;
  }
}

// A training state whose metadata holds a non-number where a number belongs is refused with
// one line naming the file and the key (std::stoll's "internal" error before).
TEST(Checkpoint, NonNumbersInMetadataAreRefusedByKey) {
  const std::string dir = test::fresh_dir("bad_meta");
  Trainer t(tiny(Precision::Fp32));
  t.train_step();
  save_trainer(t, dir);
  const std::string state = dir + "/train_state.safetensors";
  for (const char* key : {"step", "seconds", "adamw_steps"}) {
    const std::string kept = Safetensors::read(state).metadata().at(key);
    for (const char* bad : {"abc", "12x", ""}) {
      SCOPED_TRACE(testing::Message() << key << " = '" << bad << "'");
      set_metadata(state, key, bad);
      try {
        resume_trainer(dir);
        ADD_FAILURE() << "loaded";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::string("metadata '") + key + "' is not a number"),
                  std::string::npos)
            << e.what();
      }
    }
    set_metadata(state, key, kept);
  }
  EXPECT_NO_THROW(resume_trainer(dir));
}

// Issue 12 (4): every tensor's checksum is in the metadata; one flipped bit anywhere in either
// file of a checkpoint is refused with a line naming the file and the tensor, and a file
// written by another tool (no checksums) still loads.
TEST(Checkpoint, AFlippedBitIsRefusedByItsChecksum) {
  const std::string dir = test::fresh_dir("flipped");
  Trainer t(tiny(Precision::Fp8));
  t.train_step();
  save_trainer(t, dir);
  const struct {
    const char* file;
    const char* tensor;
  } cases[] = {{"model.safetensors", "layers.1.fc2.weight"},
               {"model.safetensors", "layers.0.qkv.fp8.fwd.scale"},
               {"train_state.safetensors", "adamw.v.wte"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.tensor);
    const std::string path = dir + "/" + c.file;
    const std::vector<uint8_t> good = read_bytes(path);
    std::vector<uint8_t> bad = good;
    bad[data_offset(bad, c.tensor) + 1] ^= 0x10;
    write_bytes(path, bad);
    try {
      resume_trainer(dir);
      ADD_FAILURE() << "loaded a flipped bit";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg, fmt::format("{}: tensor '{}' does not match its checksum: the file is "
                                 "damaged",
                                 path, c.tensor));
    }
    without_checksums(bad);  // the same bytes from a tool that writes no checksums: read as is
    write_bytes(path, bad);
    EXPECT_NO_THROW(Safetensors::read(path));
    write_bytes(path, good);
  }
  EXPECT_NO_THROW(resume_trainer(dir));
}

// Issue 12 (4): both files of a checkpoint carry its step; a model from one checkpoint beside
// the training state of another is not a checkpoint.
TEST(Checkpoint, FilesFromTwoStepsAreRefused) {
  const std::string a = test::fresh_dir("step_a"), b = test::fresh_dir("step_b");
  Trainer t(tiny(Precision::Fp32));
  t.train_step();
  save_trainer(t, a);
  t.train_step();
  save_trainer(t, b);
  fs::copy_file(b + "/model.safetensors", a + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  try {
    resume_trainer(a);
    ADD_FAILURE() << "loaded files of two steps";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              a + ": model.safetensors is from step 2, train_state.safetensors from step 1: not "
                  "one checkpoint");
  }
}

TEST(Checkpoint, DamagedOrForeignFilesAreRefused) {
  TrainConfig c = tiny(Precision::Fp32);
  Trainer t(c);
  const std::string good = test::fresh_dir("damage") + ".safetensors";
  trainer_model_file(t).write(good);
  expect_refused(
      good, [](auto& b) { b.resize(5); }, "too short");
  expect_refused(
      good, [](auto& b) { b.resize(b.size() / 2); }, "out of range");
  expect_refused(
      good, [](auto& b) { std::memset(b.data(), 0xff, 8); }, "header length");
  expect_refused(
      good, [](auto& b) { b[8] = '['; }, "not valid JSON");
  expect_refused(
      good, [](auto& b) { replace_in_header(b, "\"F32\"", "\"F7\""); }, "unknown dtype F7");
  expect_refused(
      good,
      [](auto& b) {
        // lnf.bias and lnf.weight have the same size: point the bias at the weight's bytes.
        nlohmann::json h = nlohmann::json::parse(header_of(b));
        h["lnf.bias"]["data_offsets"] = h["lnf.weight"]["data_offsets"];
        set_header(b, h.dump());
      },
      "ranges overlap");
  expect_refused(
      good,
      [](auto& b) {
        nlohmann::json h = nlohmann::json::parse(header_of(b));
        h["lnf.bias"]["data_offsets"][1] = h["lnf.bias"]["data_offsets"][1].get<uint64_t>() - 4;
        set_header(b, h.dump());
      },
      "do not hold shape");
  expect_refused(
      good,
      [](auto& b) {
        without_checksums(b);
        replace_in_header(b, "\"wpe\":{\"data_offsets\"", "\"wpe_renamed\":{\"data_offsets\"");
      },
      "no tensor 'wpe'");
  // Metadata edited and resealed, as a writer's bug would leave it: still checked.
  expect_refused(
      good,
      [](auto& b) {
        replace_in_header(b, "\\\"d_model\\\": 32", "\\\"d_model\\\": 64");
        reseal(b);
      },
      "shape");
  expect_refused(
      good,
      [](auto& b) {
        replace_in_header(b, "\"format\":\"fp8lm\"", "\"format\":\"other\"");
        reseal(b);
      },
      "not an fp8lm model file");
  // Issue 30 (D22): bytes after the last tensor.
  expect_refused(
      good, [](auto& b) { b.push_back(0); }, "1 bytes after the last tensor's data");
}

// Issue 30 (D10): what the metadata says (the config a model is built from, a checkpoint's
// progress) is covered by the checksum with the tensors; an edit by hand is refused, and so is
// a file of this version whose checksum list was deleted.
TEST(Checkpoint, EditedMetadataIsRefusedByTheChecksum) {
  const std::string dir = test::fresh_dir("edited_meta");
  Trainer t(tiny(Precision::Fp32));
  t.train_step();
  save_trainer(t, dir);
  const std::string model = dir + "/model.safetensors", state = dir + "/train_state.safetensors";
  const std::vector<uint8_t> good_model = read_bytes(model), good_state = read_bytes(state);
  const std::string changed =
      ": its header (the metadata or the tensor table) does not match "
      "its checksum: the file was changed after fp8lm wrote it";
  const std::vector<std::pair<std::string, nlohmann::json>> edits = {
      {"lr", 0.3}, {"steps", 160}, {"rope_theta", 500.0}, {"normalization", "rmsnorm"}};
  for (const auto& [key, value] : edits) {
    SCOPED_TRACE(key);
    std::vector<uint8_t> bytes = good_model;
    nlohmann::json h = nlohmann::json::parse(header_of(bytes));
    nlohmann::json config = nlohmann::json::parse(h["__metadata__"]["config"].get<std::string>());
    ASSERT_TRUE(config.contains(key));
    config[key] = value;
    h["__metadata__"]["config"] = config.dump(2);
    set_header(bytes, h.dump());
    write_bytes(model, bytes);
    try {
      resume_trainer(dir);
      ADD_FAILURE() << "resumed an edited config";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), model + changed);
    }
    EXPECT_THROW(load_model(model), Error);
  }
  write_bytes(model, good_model);
  for (const char* key : {"step", "adamw_steps", "seconds", "skipped_steps"}) {
    SCOPED_TRACE(key);
    set_metadata(state, key, "7", Seal::Break);
    try {
      resume_trainer(dir);
      ADD_FAILURE() << "resumed an edited " << key;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), state + changed);
    }
    write_bytes(state, good_state);
  }
  // The checksum list deleted and a bit flipped in wte: not read as a file without checksums.
  std::vector<uint8_t> bytes = good_model;
  bytes[data_offset(bytes, "wte") + 2] ^= 0x04;
  write_bytes(model, bytes);
  set_metadata(model, "xxh3_64", std::nullopt, Seal::Break);
  try {
    load_model(model);
    ADD_FAILURE() << "loaded a flipped bit without its checksum list";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), model +
                                         ": its checksum list (metadata 'xxh3_64') is missing: "
                                         "the file was changed after fp8lm wrote it");
  }
  write_bytes(model, good_model);
  EXPECT_NO_THROW(resume_trainer(dir));
}

// Issue 30 (D10): a checkpoint's progress is checked before it is resumed: a step beyond the
// run's steps, a negative one ("internal: basic_string::_M_create" before), counts that do not
// add up. The files are resealed: what is checked is the values, not the checksum.
TEST(Checkpoint, ProgressOutOfRangeIsRefused) {
  const std::string dir = test::fresh_dir("progress");
  Trainer t(tiny(Precision::Fp32));  // 16 steps
  for (int i = 0; i < 3; ++i) t.train_step();
  save_trainer(t, dir);
  const std::string model = dir + "/model.safetensors", state = dir + "/train_state.safetensors";
  const std::vector<uint8_t> good_model = read_bytes(model), good_state = read_bytes(state);
  const struct {
    std::map<std::string, std::string> edits;
    std::string why;
  } cases[] = {
      {{{"step", "20"}}, "step 20 is beyond the run's 16 steps"},
      {{{"step", "-3"}}, "step -3 is negative"},
      {{{"adamw_steps", "2"}}, "adamw_steps 2 is not its step 3 less its 0 skipped steps"},
      {{{"adamw_steps", "-1"}}, "adamw_steps -1 is not its step 3 less its 0 skipped steps"},
      {{{"seconds", "-1"}}, "seconds -1 is not a time of 0 or more"},
      {{{"seconds", "inf"}}, "seconds inf is not a time of 0 or more"},
      {{{"skipped_steps", "4"}}, "skipped_steps 4 is not between 0 and its step 3"},
      {{{"skipped_steps", "1"}, {"adamw_steps", "2"}, {"consecutive_skips", "2"}},
       "consecutive_skips 2 is not between 0 and its skipped_steps 1"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.why);
    for (const auto& [key, value] : c.edits) {
      set_metadata(state, key, value);
      if (key == "step") set_metadata(model, key, value);  // both files name the step
    }
    try {
      resume_trainer(dir);
      ADD_FAILURE() << "resumed";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), state + ": " + c.why);
    }
    write_bytes(model, good_model);
    write_bytes(state, good_state);
  }
  // A model file alone (eval, generate): its step is checked too.
  set_metadata(model, "step", "-3");
  try {
    load_model(model);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), model + ": step -3 is negative");
  }
  write_bytes(model, good_model);
  EXPECT_EQ(resume_trainer(dir)->steps_done(), 3);
}

// Issue 30 (D10): files of older versions (tensor checksums only, or none) still load, with a
// line saying what could not be verified.
TEST(Checkpoint, OlderFilesLoadWithAWarning) {
  std::vector<std::string> warnings;
  set_warning_sink([&](const std::string& w) { warnings.push_back(w); });
  const std::string path = test::fresh_dir("older") + ".safetensors";
  Trainer t(tiny(Precision::Fp32));
  trainer_model_file(t).write(path);
  const std::vector<uint8_t> good = read_bytes(path);
  std::vector<uint8_t> bytes = good;
  as_format_version_1(bytes);
  write_bytes(path, bytes);
  EXPECT_NO_THROW(load_model(path));
  bytes = good;
  without_checksums(bytes);
  write_bytes(path, bytes);
  EXPECT_NO_THROW(load_model(path));
  write_bytes(path, good);
  EXPECT_NO_THROW(load_model(path));
  set_warning_sink({});
  EXPECT_EQ(warnings,
            (std::vector<std::string>{
                path + ": written by an older fp8lm: its metadata (config, step) has no checksum "
                       "and is not verified",
                path + ": has no checksums (an older fp8lm or another tool wrote it): damage to "
                       "it cannot be detected"}));
}

TEST(Checkpoint, WritesAreAtomicAndLeaveNoTempFiles) {
  TrainConfig c = tiny(Precision::Fp32);
  Trainer t(c);
  const std::string dir = test::fresh_dir("atomic");
  save_trainer(t, dir);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  EXPECT_THROW(latest_checkpoint(test::fresh_dir("none")), Error);
}

}  // namespace
}  // namespace fp8lm

namespace fp8lm {
namespace {

TEST(Validation, EvaluatingBetweenStepsDoesNotChangeTraining) {
  for (Precision p : {Precision::Fp32, Precision::Fp8}) {
    TrainConfig c = tiny(p);
    c.steps = 8;
    Trainer plain(c), checked(c);
    while (!plain.done()) plain.train_step();
    while (!checked.done()) {
      checked.train_step();
      EXPECT_TRUE(std::isfinite(checked.validation_loss()));
    }
    EXPECT_EQ(plain.losses(), checked.losses()) << precision_name(p);
    const auto a = plain.model().fp8_state(), b = checked.model().fp8_state();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i][Slot::Weight].amax_history, b[i][Slot::Weight].amax_history)
          << precision_name(p);
    }
  }
}

}  // namespace
}  // namespace fp8lm
