#include "io/hf_interchange.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/bf16.h"
#include "core/input_file.h"
#include "core/json.h"
#include "fp8/recipe.h"
#include "fp8lm/error.h"
#include "io/atomic_file.h"
#include "io/hf_special_tokens.h"
#include "io/hf_weights.h"
#include "io/new_dir.h"
#include "io/safetensors.h"
#include "kernels/types.h"
#include "nn/norm.h"

namespace fp8lm {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

static_assert(static_cast<float>(kHfNormEps) == kNormEps);

// Rows [row0, row0 + rows) of our parameter `ours` ([out, in], or a vector) are the Hugging Face
// tensor `hf`, stored transposed ([in, out]) where GPT-2's Conv1D layers keep them so.
struct Mapping {
  std::string ours, hf;
  int64_t row0 = 0, rows = 0;
  bool transpose = false;
};

// Every parameter's rows, each exactly once.
std::vector<Mapping> mappings(const GPTConfig& m, HfArchitecture a) {
  const int64_t d = m.d_model, kv = m.kv_width(), F = m.ffn, V = m.vocab;
  std::vector<Mapping> v;
  if (a == HfArchitecture::Gpt2) {
    v.push_back({"wte", "transformer.wte.weight", 0, V});
    v.push_back({"wpe", "transformer.wpe.weight", 0, m.seq_len});
    for (int64_t l = 0; l < m.n_layers; ++l) {
      const std::string o = fmt::format("layers.{}.", l), h = fmt::format("transformer.h.{}.", l);
      const auto add = [&](const char* ours, const char* hf, int64_t rows, bool t = false) {
        v.push_back({o + ours, h + hf, 0, rows, t});
      };
      add("ln1.weight", "ln_1.weight", d);
      add("ln1.bias", "ln_1.bias", d);
      add("qkv.weight", "attn.c_attn.weight", 3 * d, true);
      add("qkv.bias", "attn.c_attn.bias", 3 * d);
      add("proj.weight", "attn.c_proj.weight", d, true);
      add("proj.bias", "attn.c_proj.bias", d);
      add("ln2.weight", "ln_2.weight", d);
      add("ln2.bias", "ln_2.bias", d);
      add("fc1.weight", "mlp.c_fc.weight", F, true);
      add("fc1.bias", "mlp.c_fc.bias", F);
      add("fc2.weight", "mlp.c_proj.weight", d, true);
      add("fc2.bias", "mlp.c_proj.bias", d);
    }
    v.push_back({"lnf.weight", "transformer.ln_f.weight", 0, d});
    v.push_back({"lnf.bias", "transformer.ln_f.bias", 0, d});
    return v;
  }
  v.push_back({"wte", "model.embed_tokens.weight", 0, V});
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const std::string o = fmt::format("layers.{}.", l), h = fmt::format("model.layers.{}.", l);
    // Our fused projections hold Llama's separate ones as row blocks: qkv = [q; k; v] and
    // SwiGLU's fc1 = [gate; up] (kernels: the gate's half goes through SiLU).
    v.push_back({o + "ln1.weight", h + "input_layernorm.weight", 0, d});
    v.push_back({o + "qkv.weight", h + "self_attn.q_proj.weight", 0, d});
    v.push_back({o + "qkv.weight", h + "self_attn.k_proj.weight", d, kv});
    v.push_back({o + "qkv.weight", h + "self_attn.v_proj.weight", d + kv, kv});
    v.push_back({o + "proj.weight", h + "self_attn.o_proj.weight", 0, d});
    v.push_back({o + "ln2.weight", h + "post_attention_layernorm.weight", 0, d});
    v.push_back({o + "fc1.weight", h + "mlp.gate_proj.weight", 0, F});
    v.push_back({o + "fc1.weight", h + "mlp.up_proj.weight", F, F});
    v.push_back({o + "fc2.weight", h + "mlp.down_proj.weight", 0, d});
  }
  v.push_back({"lnf.weight", "model.norm.weight", 0, d});
  if (!m.tied_head) v.push_back({"lm_head", "lm_head.weight", 0, V});
  return v;
}

// The Hugging Face tensor's shape for a mapping of a parameter shaped `ours`.
std::vector<int64_t> hf_shape(const Mapping& map, const std::vector<int64_t>& ours) {
  if (ours.size() == 1) return {map.rows};
  return map.transpose ? std::vector<int64_t>{ours[1], map.rows}
                       : std::vector<int64_t>{map.rows, ours[1]};
}

// Our values (or FP8 codes) of map's rows in the Hugging Face layout, and back.
template <class T>
std::vector<T> to_hf(const std::vector<T>& p, const std::vector<int64_t>& shape,
                     const Mapping& map) {
  const int64_t cols = shape.size() == 2 ? shape[1] : 1;
  std::vector<T> out(static_cast<size_t>(map.rows * cols));
  for (int64_t r = 0; r < map.rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[map.transpose ? c * map.rows + r : r * cols + c] = p[(map.row0 + r) * cols + c];
  return out;
}
void from_hf(std::vector<float>& p, const std::vector<int64_t>& shape, const Mapping& map,
             const std::vector<float>& hf) {
  const int64_t cols = shape.size() == 2 ? shape[1] : 1;
  for (int64_t r = 0; r < map.rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p[(map.row0 + r) * cols + c] = hf[map.transpose ? c * map.rows + r : r * cols + c];
}

Json config_json(const GPTConfig& m, HfArchitecture a, DType dtype) {
  const std::string torch_dtype = dtype == DType::BF16 ? "bfloat16" : "float32";
  if (a == HfArchitecture::Gpt2) {
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", m.vocab},
            {"n_positions", m.seq_len},
            {"n_ctx", m.seq_len},
            {"n_embd", m.d_model},
            {"n_layer", m.n_layers},
            {"n_head", m.n_heads},
            {"n_inner", m.ffn},
            // Our GELU is the tanh form (kernels/activation_constants.h), GPT-2's "gelu_new".
            {"activation_function", activation_hf_name(m.activation)},
            {"layer_norm_epsilon", kHfNormEps},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", true},
            {"torch_dtype", torch_dtype}};
  }
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", m.vocab},
          {"hidden_size", m.d_model},
          {"intermediate_size", m.ffn},
          {"num_hidden_layers", m.n_layers},
          {"num_attention_heads", m.n_heads},
          {"num_key_value_heads", m.kv_heads()},
          {"max_position_embeddings", m.seq_len},
          {"rms_norm_eps", kHfNormEps},
          {"rope_theta", m.rope_theta},
          {"rope_scaling", nullptr},
          // LlamaMLP: down(act(gate(x)) * up(x)), our gated MLP with act its gate.
          {"hidden_act", activation_hf_name(m.activation)},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"pretraining_tp", 1},
          {"tie_word_embeddings", m.tied_head},
          {"torch_dtype", torch_dtype}};
}

// The FP8 codes of the GEMM weights, each mapping's rows in the Hugging Face layout.
SafetensorsWriter fp8_codes_file(GPT& model, const std::vector<Mapping>& maps,
                                 const HfExportOptions& o) {
  if (o.fp8_codes->block_scaled()) {
    throw Error(
        fmt::format("--fp8-codes: the {} recipe's block-scaled codes stay in fp8lm's "
                    "model file; per-tensor recipes (delayed, current) only",
                    scaling_kind_name(o.fp8_codes->kind)));
  }
  std::map<std::string, Linear*> linears;
  for (Linear* l : model.linears()) linears[l->weight().name] = l;
  std::map<std::string, std::pair<std::vector<uint8_t>, float>> codes;  // per weight
  for (const auto& [name, l] : linears) {
    if (o.source && o.source->contains(name) && o.source->at(name).dtype == DType::E4M3) {
      const auto& t = o.source->at(name);
      codes[name] = {{t.bytes.begin(), t.bytes.end()},
                     o.source->at(name + "_scale_inv").to_f32()[0]};
      continue;
    }
    l->requantize_weight(*o.fp8_codes);
    const Linear::Fp8Weight w = l->fp8_weight();
    codes[name] = {w.codes, w.scale_inv};
  }
  SafetensorsWriter st;
  for (const Mapping& map : maps) {
    const auto it = linears.find(map.ours);
    if (it == linears.end()) continue;  // embeddings, norms, biases, the head: not FP8 GEMMs
    const auto& [c, scale_inv] = codes.at(map.ours);
    const std::vector<int64_t>& shape = it->second->weight().shape;
    std::vector<uint8_t> v = to_hf(c, shape, map);
    st.add(map.hf, DType::E4M3, hf_shape(map, shape),
           [v](const SafetensorsWriter::Sink& sink) { sink(v); });
    st.add_f32(map.hf + ".scale_inv", {1}, {scale_inv});
  }
  st.metadata()["format"] = "fp8lm-hf-fp8-codes";
  return st;
}

}  // namespace

HfArchitecture hf_architecture(const GPTConfig& m) {
  const bool gated = activation_gated(m.activation);
  const bool gpt2 = m.normalization == Normalization::LayerNorm && !gated &&
                    m.learned_positions() && m.bias && m.tied_head && m.kv_heads() == m.n_heads;
  if (gpt2) return HfArchitecture::Gpt2;
  const bool llama =
      m.normalization == Normalization::RMSNorm && gated && !m.learned_positions() && !m.bias;
  if (llama) return HfArchitecture::Llama;
  std::vector<std::string_view> plain, glu;
  for (std::string_view name : activation_names())
    (activation_gated(parse_activation(name)) ? glu : plain).push_back(name);
  throw Error(fmt::format(
      "the model's blocks match neither GPT2LMHeadModel (layernorm, {}, learned positions, "
      "biases, tied head, n_kv_heads = n_heads) nor LlamaForCausalLM (rmsnorm, {}, "
      "--rope-theta, no biases)",
      fmt::join(plain, " or "), fmt::join(glu, " or ")));
}

std::string_view hf_class_name(HfArchitecture a) {
  return a == HfArchitecture::Gpt2 ? "GPT2LMHeadModel" : "LlamaForCausalLM";
}

void export_hf(GPT& model, const std::string& dir, const HfExportOptions& options) {
  const GPTConfig& m = model.config();
  const HfArchitecture a = hf_architecture(m);
  if (options.dtype != DType::F32 && options.dtype != DType::BF16)
    throw Error("export: --dtype is fp32 or bf16");
  if (!options.tokenizer.empty() && !fs::is_regular_file(options.tokenizer))
    throw Error(fmt::format("{}: no such tokenizer file", options.tokenizer));
  const HfSpecialTokens special =
      options.tokenizer.empty()
          ? HfSpecialTokens{}
          : hf_special_tokens(options.tokenizer, options.end_of_text, m.vocab);
  std::map<std::string, Parameter*> params;
  for (Parameter* p : model.parameters()) params[p->name] = p;
  const std::vector<Mapping> maps = mappings(m, a);
  std::optional<SafetensorsWriter> codes;
  if (options.fp8_codes) codes = fp8_codes_file(model, maps, options);
  SafetensorsWriter st;
  // Each parameter copied to the host once, though several tensors (q, k, v) come from it.
  std::map<std::string, std::vector<float>> host;
  for (const Mapping& map : maps) {
    Parameter& p = *params.at(map.ours);
    if (!host.count(p.name)) host[p.name] = p.value.to_host();
    std::vector<float> v = to_hf(host.at(p.name), p.shape, map);
    for (float x : v)
      if (!std::isfinite(x))
        throw Error(fmt::format("not exporting a model whose weight {} is not finite", p.name));
    const std::vector<int64_t> shape = hf_shape(map, p.shape);
    if (options.dtype == DType::F32) {
      st.add_f32(map.hf, shape, std::move(v));
      continue;
    }
    st.add(map.hf, DType::BF16, shape, [v](const SafetensorsWriter::Sink& sink) {
      std::vector<bf16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = bf16_from_float(v[i]);
      sink({reinterpret_cast<const uint8_t*>(h.data()), h.size() * sizeof(bf16_t)});
    });
  }
  st.metadata()["format"] = "pt";  // what transformers' safetensors loader requires
  make_new_or_empty_dir(dir, dir);
  st.write(dir + "/model.safetensors");
  if (codes) codes->write(dir + "/fp8_weights.safetensors");
  Json config = config_json(m, a, options.dtype);
  add_hf_token_ids(config, special);
  write_text_atomic(dir + "/config.json", config.dump(2) + "\n");
  write_text_atomic(dir + "/generation_config.json",
                    hf_generation_config(special, m.seq_len).dump(2) + "\n");
  if (!options.tokenizer.empty()) {
    fs::copy_file(options.tokenizer, dir + "/tokenizer.json");
    write_text_atomic(dir + "/tokenizer_config.json",
                      hf_tokenizer_config(special, m.seq_len).dump(2) + "\n");
    write_text_atomic(dir + "/special_tokens_map.json",
                      hf_special_tokens_map(special).dump(2) + "\n");
  }
}

HfModel import_hf(const std::string& dir) {
  const HfConfig read = read_hf_config(dir);
  const HfArchitecture a = read.architecture;
  HfModel out;
  out.config.model = read.model;
  const HfWeights file = HfWeights::open(dir);
  out.model = std::make_unique<GPT>(out.config.model, 0);
  std::map<std::string, Parameter*> params;
  for (Parameter* p : out.model->parameters()) params[p->name] = p;
  std::map<std::string, std::vector<float>> values;
  for (const Mapping& map : mappings(out.config.model, a)) {
    Parameter& p = *params.at(map.ours);
    // GPT-2's own hub files name their tensors without the "transformer." prefix.
    std::string name = map.hf;
    if (!file.contains(name) && name.starts_with("transformer.") && file.contains(name.substr(12)))
      name = name.substr(12);
    if (!file.contains(name)) throw Error(fmt::format("{}: no tensor '{}'", dir, map.hf));
    const std::string& weights = file.file(name);
    const std::vector<int64_t> want = hf_shape(map, p.shape);
    if (file.shape(name) != want) {
      throw Error(fmt::format("{}: tensor '{}' has shape [{}], the config needs [{}]", weights,
                              name, fmt::join(file.shape(name), ","), fmt::join(want, ",")));
    }
    const std::vector<float> hf = file.read_f32(name);
    for (float x : hf)
      if (!std::isfinite(x))
        throw Error(fmt::format("{}: tensor '{}' holds values that are not finite", weights, name));
    auto& v = values[map.ours];
    v.resize(static_cast<size_t>(p.numel()));
    from_hf(v, p.shape, map, hf);
  }
  for (auto& [name, v] : values) params.at(name)->set_values(v);
  return out;
}

}  // namespace fp8lm
