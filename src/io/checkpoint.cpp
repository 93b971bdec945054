#include "io/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "core/finite.h"
#include "core/json.h"
#include "fp8/recipe.h"
#include "fp8lm/error.h"
#include "io/warning.h"
#include "nn/precision_map.h"
#include "train/adamw.h"
#include "train/settings.h"

namespace fp8lm {

namespace {

using Json = nlohmann::json;

std::string fp8_prefix(const Linear& l, Direction d) {
  return l.name() + (d == Direction::Forward ? ".fp8.fwd." : ".fp8.bwd.");
}

// Per GEMM and direction: scale [slots], scale_inv [slots], amax_history [len, slots] (TE's
// layout), and the last cast's saturated and flushed fractions [slots].
void add_fp8_state(SafetensorsWriter& st, Linear& l) {
  Fp8Meta meta = l.fp8_meta();
  for (Direction d : {Direction::Forward, Direction::Backward}) {
    const auto slots = meta.slots(d);
    const auto n = static_cast<int64_t>(slots.size());
    const auto len = static_cast<int64_t>(slots[0].amax_history.size());
    std::vector<float> scale, scale_inv, sat, flush, history(static_cast<size_t>(len * n));
    for (int64_t s = 0; s < n; ++s) {
      const ScalingState& st_slot = slots[static_cast<size_t>(s)];
      scale.push_back(st_slot.scale);
      scale_inv.push_back(st_slot.scale_inv);
      sat.push_back(static_cast<float>(st_slot.last_cast.saturated_fraction()));
      flush.push_back(static_cast<float>(st_slot.last_cast.flushed_fraction()));
      for (int64_t h = 0; h < len; ++h)
        history[static_cast<size_t>(h * n + s)] = st_slot.amax_history[static_cast<size_t>(h)];
    }
    const std::string p = fp8_prefix(l, d);
    st.add_f32(p + "scale", {n}, scale);
    st.add_f32(p + "scale_inv", {n}, scale_inv);
    st.add_f32(p + "amax_history", {len, n}, history);
    st.add_f32(p + "saturated_fraction", {n}, sat);
    st.add_f32(p + "flushed_fraction", {n}, flush);
  }
}

void load_fp8_state(const Safetensors& st, Linear& l) {
  Fp8Meta meta = l.fp8_meta();
  for (Direction d : {Direction::Forward, Direction::Backward}) {
    const std::string p = fp8_prefix(l, d);
    if (!st.contains(p + "scale")) break;  // an fp32/bf16 model has no FP8 state
    auto slots = meta.slots(d);
    const auto n = static_cast<int64_t>(slots.size());
    const TensorData& h = st.at(p + "amax_history");
    if (h.shape.size() != 2 || h.shape[1] != n || h.shape[0] < 1 ||
        st.at(p + "scale").numel() != n || st.at(p + "scale_inv").numel() != n) {
      throw Error(fmt::format("{}: {} has the wrong shape", st.origin(), p + "*"));
    }
    const auto scale = st.at(p + "scale").to_f32(), scale_inv = st.at(p + "scale_inv").to_f32();
    const auto history = h.to_f32();
    const auto sat = st.contains(p + "saturated_fraction")
                         ? st.at(p + "saturated_fraction").to_f32()
                         : std::vector<float>(n, 0);
    const auto flush = st.contains(p + "flushed_fraction") ? st.at(p + "flushed_fraction").to_f32()
                                                           : std::vector<float>(n, 0);
    for (int64_t s = 0; s < n; ++s) {
      ScalingState& slot = slots[static_cast<size_t>(s)];
      slot.scale = scale[static_cast<size_t>(s)];
      slot.scale_inv = scale_inv[static_cast<size_t>(s)];
      slot.amax_history.resize(static_cast<size_t>(h.shape[0]));
      for (int64_t k = 0; k < h.shape[0]; ++k)
        slot.amax_history[static_cast<size_t>(k)] = history[static_cast<size_t>(k * n + s)];
      // Fractions of the last cast, kept for inspection (as if a cast of 10^6 values).
      slot.last_cast = {1000000, static_cast<int64_t>(sat[static_cast<size_t>(s)] * 1e6f),
                        static_cast<int64_t>(flush[static_cast<size_t>(s)] * 1e6f)};
    }
  }
  l.set_fp8_meta(meta);
}

}  // namespace

void check_step_in_run(const std::string& origin, int64_t step, int64_t steps) {
  if (step < 0) throw Error(fmt::format("{}: step {} is negative", origin, step));
  if (step > steps)
    throw Error(fmt::format("{}: step {} is beyond the run's {} steps", origin, step, steps));
}

std::string train_config_to_json(const TrainConfig& c) {
  return settings_json(c).dump(2);
}

TrainConfig train_config_from_json(const std::string& text, const std::string& origin) {
  const Json j = parse_json(text, origin);
  if (!j.is_object())
    throw Error(fmt::format("{}: the stored config is not a JSON object", origin));
  TrainConfig c;
  // "run": how the run directory checkpoints (config.json only; RunDirectory reads it).
  apply_settings_json(c, j, origin, {"run"});
  return c;
}

nlohmann::json fp8_fallbacks_json(const std::vector<Fp8Fallback>& fallbacks) {
  Json j = Json::array();
  for (const Fp8Fallback& f : fallbacks)
    j.push_back({{"gemm", f.gemm}, {"slot", f.slot}, {"reason", f.reason}, {"step", f.step}});
  return j;
}

std::vector<Fp8Fallback> fp8_fallbacks_from_json(const std::string& text,
                                                 const std::string& origin) {
  const Json j = parse_json(text, origin + ": fp8_fallbacks");
  std::vector<Fp8Fallback> out;
  const auto bad = [&] { return Error(fmt::format("{}: 'fp8_fallbacks' is damaged", origin)); };
  if (!j.is_array()) throw bad();
  for (const Json& f : j) {
    if (!f.is_object() || !f.contains("gemm") || !f["gemm"].is_string() || !f.contains("slot") ||
        !f["slot"].is_string() || !f.contains("reason") || !f["reason"].is_string() ||
        !f.contains("step") || !f["step"].is_number_integer())
      throw bad();
    out.push_back({f["gemm"].get<std::string>(), f["slot"].get<std::string>(),
                   f["reason"].get<std::string>(), f["step"].get<int64_t>()});
  }
  return out;
}

void warn_unverified(const std::string& path, const std::map<std::string, std::string>& meta) {
  switch (metadata_integrity(meta)) {
    case Integrity::Sealed:
      return;
    case Integrity::TensorsOnly:
      warn(
          fmt::format("{}: written by an older fp8lm: its metadata (config, step) has no "
                      "checksum and is not verified",
                      path));
      return;
    case Integrity::None:
      warn(
          fmt::format("{}: has no checksums (an older fp8lm or another tool wrote it): damage "
                      "to it cannot be detected",
                      path));
      return;
  }
}

template <class T>
T metadata_number(const Safetensors& file, const std::string& key) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end())
    throw Error(fmt::format("{}: no '{}' in its metadata", file.origin(), key));
  const std::string& text = it->second;
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    throw Error(fmt::format("{}: metadata '{}' is not a number: '{}'", file.origin(), key, text));
  return v;
}
template int64_t metadata_number<int64_t>(const Safetensors&, const std::string&);
template double metadata_number<double>(const Safetensors&, const std::string&);

SafetensorsWriter model_file(GPT& model, const CheckpointInfo& info) {
  SafetensorsWriter st;
  const std::vector<Linear*> linears = model.linears();
  for (Parameter* p : model.parameters()) {
    // Checked as it is written: a model with a non-finite weight never reaches its file.
    const auto checked = [p](const SafetensorsWriter::Sink& sink) {
      p->value.read_bytes([&](std::span<const uint8_t> bytes) {  // the FP32 master
        if (!all_finite_f32_bytes(bytes))
          throw Error(fmt::format("not writing a model whose weight {} is not finite", p->name));
        sink(bytes);
      });
    };
    const auto it = std::find_if(linears.begin(), linears.end(),
                                 [&](Linear* l) { return l->fp8_weights() && &l->weight() == p; });
    if (it != linears.end() && info.config.recipe.block_scaled()) {
      // A block-scaled FP8 weight: its codes (E4M3, or NVFP4's E2M1 one per byte in the low
      // four bits, as U8), its block scales in their grid (FP32 scale_invs, E8M0 as U8, or
      // E4M3) and its tensor scale_inv (NVFP4's 1/S, else 1). block_decode reads them back.
      Linear* l = *it;
      const BlockCast c = l->fp8_weight_block_cast();
      const bool fp4 = c.scheme == BlockScheme::Nvfp4;
      st.add(p->name, fp4 ? DType::U8 : DType::E4M3, p->shape,
             [l, checked](const SafetensorsWriter::Sink& sink) {
               checked([](std::span<const uint8_t>) {});
               sink(l->fp8_weight().codes);
             });
      const DType scale_type = c.scheme == BlockScheme::Fp8Block ? DType::F32
                               : fp4                             ? DType::E4M3
                                                                 : DType::U8;
      st.add(p->name + "_block_scales", scale_type, {c.grid.grid_rows(), c.grid.grid_cols()},
             [l](const SafetensorsWriter::Sink& sink) { sink(l->fp8_weight().block_scales); });
      st.add_f32(p->name + "_scale_inv", {1}, {l->fp8_weight().tensor_scale_inv});
    } else if (it != linears.end()) {
      // The module holds this weight only as FP8: stored as such, with its scale_inv.
      Linear* l = *it;
      st.add(p->name, DType::E4M3, p->shape, [l, checked](const SafetensorsWriter::Sink& sink) {
        checked([](std::span<const uint8_t>) {});
        sink(l->fp8_weight().codes);
      });
      st.add_f32(p->name + "_scale_inv", {1}, {l->fp8_weight().scale_inv});
    } else {
      st.add(p->name, DType::F32, p->shape, checked);
    }
  }
  if (info.fp8_state) {
    for (Linear* l : model.linears()) add_fp8_state(st, *l);
  }
  auto& meta = st.metadata();
  meta["format"] = "fp8lm";
  meta["config"] = train_config_to_json(info.config);
  meta["precision"] = info.precision;
  meta["step"] = std::to_string(info.step);
  if (info.skipped_steps > 0) meta["skipped_steps"] = std::to_string(info.skipped_steps);
  if (info.world_size > 1) meta["world_size"] = std::to_string(info.world_size);
  if (!info.fp8_fallbacks.empty())
    meta["fp8_fallbacks"] = fp8_fallbacks_json(info.fp8_fallbacks).dump();
  if (const Json blocks = block_scales_json(model); !blocks.is_null())
    meta["block_scales"] = blocks.dump();
  if (!info.run_id.empty()) meta["run_id"] = info.run_id;
  if (!info.data.empty()) meta["data"] = info.data;
  return st;
}

Json block_scales_json(GPT& model) {
  Json j;
  for (Linear* l : model.linears()) {
    for (const auto& [role, st] : l->block_stats()) {
      Json exponents = Json::object();
      for (const auto& [e, n] : st.exponents) exponents[std::to_string(e)] = n;
      j[l->name()][role] = {{"blocks", st.blocks},
                            {"zero", st.zero_blocks},
                            {"saturated", st.saturated_blocks},
                            {"flushed", st.flushed_blocks},
                            {"exponents", exponents},
                            {"tensor_scale", st.tensor_scale}};
    }
  }
  return j;
}

namespace {

// A block-scaled FP8 weight (model_file) decoded, after checking its tensors against the cast
// the file's recipe makes of this weight.
std::vector<float> block_scaled_weight(const Safetensors& file, GPT& model, const Parameter& p) {
  const auto& meta = file.metadata();
  const Fp8Recipe recipe =
      train_config_from_json(meta.count("config") ? meta.at("config") : "{}", file.origin()).recipe;
  const auto linears = model.linears();
  const auto it =
      std::find_if(linears.begin(), linears.end(), [&](Linear* l) { return &l->weight() == &p; });
  if (!recipe.block_scaled() || it == linears.end()) {
    throw Error(fmt::format("{}: tensor '{}_block_scales' belongs to no block-scaled GEMM weight",
                            file.origin(), p.name));
  }
  const BlockCast c = recipe_block_cast(recipe, BlockRole::Weight, false, p.shape[0], p.shape[1]);
  const TensorData& codes = file.at(p.name);
  const TensorData& scales = file.at(p.name + "_block_scales");
  const TensorData& tensor_scale = file.at(p.name + "_scale_inv");
  const DType code_type = c.scheme == BlockScheme::Nvfp4 ? DType::U8 : DType::E4M3;
  const DType scale_type = c.scheme == BlockScheme::Fp8Block ? DType::F32
                           : c.scheme == BlockScheme::Nvfp4  ? DType::E4M3
                                                             : DType::U8;
  const std::vector<int64_t> grid{c.grid.grid_rows(), c.grid.grid_cols()};
  if (codes.dtype != code_type || scales.dtype != scale_type || scales.shape != grid ||
      tensor_scale.dtype != DType::F32 || tensor_scale.numel() != 1) {
    throw Error(fmt::format(
        "{}: tensor '{}' is not a {} weight: expected {} codes, {} block scales [{}] and an F32 "
        "_scale_inv",
        file.origin(), p.name, scaling_kind_name(recipe.kind), dtype_name(code_type),
        dtype_name(scale_type), fmt::join(grid, ",")));
  }
  std::vector<uint8_t> scale_bytes(scales.bytes.begin(), scales.bytes.end());  // aligned copy
  return block_decode(c, codes.bytes.data(), scale_bytes.data(), tensor_scale.to_f32().at(0));
}

}  // namespace

void apply_model_tensors(const Safetensors& file, GPT& model) {
  warn_unverified(file.origin(), file.metadata());
  std::vector<Parameter*> params = model.parameters();
  std::ranges::sort(params, {}, [&](const Parameter* p) { return file.position(p->name); });
  for (Parameter* p : params) {
    TensorReader in(file, p->name, TensorReader::Check::ChecksumAndFinite);
    if (in.shape() != p->shape) {
      throw Error(fmt::format("{}: tensor '{}' has shape [{}], the config needs [{}]",
                              file.origin(), p->name, fmt::join(in.shape(), ","),
                              fmt::join(p->shape, ",")));
    }
    const bool block_scaled = file.contains(p->name + "_block_scales");
    if (in.dtype() != DType::E4M3 && in.dtype() != DType::F32 &&
        !(block_scaled && in.dtype() == DType::U8)) {
      throw Error(fmt::format("{}: tensor '{}' has dtype {}, expected F32 or F8_E4M3",
                              file.origin(), p->name, dtype_name(in.dtype())));
    }
    const auto refuse = [&] {
      return Error(fmt::format("{}: tensor '{}' holds values that are not finite; not loading it",
                               file.origin(), p->name));
    };
    if (block_scaled) {
      std::vector<float> v = block_scaled_weight(file, model, *p);
      if (!all_finite(v)) throw refuse();
      p->set_values(v);
      continue;
    }
    if (in.dtype() == DType::F32) {  // read once from the file straight into the parameter
      p->value.fill_bytes([&](std::span<uint8_t> piece) { in.read(piece); });
      ++p->version;
      if (!in.finish()) throw refuse();
      continue;
    }
    std::vector<float> v = file.take_f32(p->name);
    const float sinv = file.at(p->name + "_scale_inv").to_f32().at(0);
    for (float& x : v) x *= sinv;
    if (!all_finite(v)) throw refuse();
    p->set_values(v);
  }
  for (Linear* l : model.linears()) load_fp8_state(file, *l);
  // GEMMs that fell back to BF16 stay there, in training and in inference.
  const auto it = file.metadata().find("fp8_fallbacks");
  if (it == file.metadata().end()) return;
  for (const Fp8Fallback& f : fp8_fallbacks_from_json(it->second, file.origin())) {
    bool found = false;
    for (Linear* l : model.linears()) {
      if (l->name() != f.gemm) continue;
      l->fall_back_to_bf16();
      found = true;
    }
    if (!found)
      throw Error(fmt::format("{}: fp8_fallbacks names no GEMM '{}'", file.origin(), f.gemm));
  }
}

LoadedModel load_model(const std::string& path) {
  // Each tensor checked as it is loaded: a damaged file throws away the model built here.
  LoadedModel m{TrainConfig{}, nullptr, Safetensors::read(path, Verify::OnFirstUse)};
  const auto& meta = m.file.metadata();
  if (!meta.count("format") || meta.at("format") != "fp8lm" || !meta.count("config")) {
    throw Error(fmt::format("{}: not an fp8lm model file (no fp8lm config in its metadata)", path));
  }
  m.config = train_config_from_json(meta.at("config"), path);
  m.config.model.validate();
  if (meta.count("step"))
    check_step_in_run(path, metadata_number<int64_t>(m.file, "step"), m.config.steps);
  m.model = std::make_unique<GPT>(m.config.model, m.config.seed);
  apply_precision_map(*m.model, m.config.precision_map);
  m.model->init_fp8(m.config.recipe.delayed);
  apply_model_tensors(m.file, *m.model);
  return m;
}

TrainConfig checkpoint_config(const std::string& dir) {
  const std::string path = dir + "/model.safetensors";
  const auto meta = Safetensors::read_metadata(path);
  if (!meta.count("config")) throw Error(fmt::format("{}: not an fp8lm checkpoint", path));
  warn_unverified(path, meta);
  return train_config_from_json(meta.at("config"), dir);
}

}  // namespace fp8lm
