// fp8lm.quantize and fp8lm.formats: a tensor cast as a recipe casts it, through the engine's
// own quantizers (fp8/), and every code of each element format.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/e2m1.h"
#include "core/e8m0.h"
#include "core/fp8_dtype.h"
#include "fp8/block_cast.h"
#include "fp8/quantize.h"
#include "fp8/recipe.h"
#include "fp8/scaling.h"
#include "fp8lm/error.h"
#include "python/bindings.h"

namespace fp8lm::python {
namespace {

// A tensor's codes: uninitialized until the cast writes them (a vector would first zero them,
// which for a 16M-value tensor is most of what a cast costs on top of the cast itself).
class Codes {
 public:
  void resize(size_t n) {
    data_.reset(new uint8_t[n]);
    size_ = n;
  }
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  uint8_t& operator[](size_t i) { return data_[i]; }
  uint8_t operator[](size_t i) const { return data_[i]; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
};

// A quantized tensor: its codes, the scales the recipe keeps for it and what it stands for.
struct QuantizedTensor {
  std::string recipe;  // "delayed", "current", "block", "mxfp8", "nvfp4"
  DType format = DType::E4M3;
  std::vector<size_t> shape;
  Codes codes;
  float amax = 0;
  // Per-tensor recipes: codes = cast(x * scale); x ≈ decode(code) * scale_inv.
  float scale = 1, scale_inv = 1;
  int64_t saturated = 0, flushed = 0;
  // Block-scaled recipes: the cast (its grid, scheme, RHT) and one scale per block in its
  // grid order, as bytes (E8M0 codes, FP32 scale_inv, or E4M3 codes), and NVFP4's 1/S.
  std::optional<BlockCast> block;
  std::vector<uint8_t> block_scales;
  float tensor_scale_inv = 1;

  std::vector<float> values() const {
    if (block) return block_decode(*block, codes.data(), block_scales.data(), tensor_scale_inv);
    std::vector<float> y(codes.size());
    if (format == DType::E2M1) {
      for (size_t i = 0; i < y.size(); ++i) y[i] = kE2M1Values[codes[i] & 0xf] * scale_inv;
    } else {
      dequantize(y.data(), codes.data(), static_cast<int64_t>(y.size()), scale_inv, format);
    }
    return y;
  }
};

// A format by name: the element formats (e4m3, e5m2, e2m1), and MX's scale format e8m0 where
// a whole table or its codes are asked for.
DType format_named(const std::string& name, bool e8m0_too = false) {
  const std::optional<DType> d = parse_dtype(name);
  if (!d || !(is_fp8(*d) || *d == DType::E2M1 || (e8m0_too && *d == DType::E8M0)))
    throw Error("format '" + name + "': expected " +
                (e8m0_too ? "e4m3, e5m2, e2m1 or e8m0" : "e4m3, e5m2 or e2m1"));
  return *d;
}

// Rows and columns of a tensor as TE flattens it for a GEMM: every dimension but the last
// into rows (a vector is one row).
std::pair<int64_t, int64_t> rows_cols(const std::vector<size_t>& shape) {
  int64_t rows = 1, cols = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    (d + 1 == shape.size() ? cols : rows) *= static_cast<int64_t>(shape[d]);
  return {rows, cols};
}

// Per-tensor cast at a given scale (a delayed-scaling slot's), or at the scale the tensor's
// own amax gives (current scaling, margin as the recipe's) when scale is None.
QuantizedTensor quantize_per_tensor(const FloatIn& x, const std::string& format_name,
                                    std::optional<float> scale, int margin, bool saturate) {
  QuantizedTensor q;
  q.recipe = scale ? "delayed" : "current";
  q.format = format_named(format_name);
  q.shape = shape_of(x);
  const auto n = static_cast<int64_t>(x.size());
  q.codes.resize(x.size());
  if (scale && !(std::isnormal(*scale) && *scale > 0 && std::isfinite(1.0f / *scale)))
    throw Error("scale " + std::to_string(*scale) + ": the scale must be a positive normal float");
  nb::gil_scoped_release unlocked;
  ScalingState slot(q.format, 1);
  CastStats st;
  if (q.format == DType::E2M1) {
    // NVFP4's element format on its own: x * scale rounded to nearest even, saturating at 6.
    slot.set_scale(scale.value_or(1.0f));
    for (int64_t i = 0; i < n; ++i) {
      bool sat = false, flushed = false;
      q.codes[static_cast<size_t>(i)] = e2m1_encode(x.data()[i] * slot.scale, &sat, &flushed);
      st.saturated += sat;
      st.flushed += flushed;
    }
    st.amax = absmax(x.data(), n);
  } else if (scale) {
    slot.set_scale(*scale);
    st = quantize(q.codes.data(), x.data(), n, slot.scale, q.format, saturate);
  } else {
    st = cast_current_scaling(slot, CurrentScaling{margin, Format::E4M3}, q.codes.data(), x.data(),
                              n);
  }
  q.scale = slot.scale;
  q.scale_inv = slot.scale_inv;
  q.amax = st.amax;
  q.saturated = st.saturated;
  q.flushed = st.flushed;
  return q;
}

// A block-scaled recipe's cast of x for a GEMM role, as the engine's Linear makes it.
QuantizedTensor quantize_blocks(const FloatIn& x, const std::string& recipe_settings,
                                const std::string& role, bool columnwise, uint32_t seed) {
  const Fp8Recipe r = recipe_from_settings(recipe_settings, "quantize");
  if (!r.block_scaled()) throw Error("quantize_blocks: not a block-scaled recipe");
  const BlockRole block_role = role == "input"         ? BlockRole::Input
                               : role == "weight"      ? BlockRole::Weight
                               : role == "grad_output" ? BlockRole::GradOutput
                                                       : throw Error("role '" + role +
                                                                     "': expected input, weight "
                                                                     "or grad_output");
  QuantizedTensor q;
  q.recipe = std::string(scaling_kind_name(r.kind));
  q.shape = shape_of(x);
  const auto [rows, cols] = rows_cols(q.shape);
  BlockCast c = recipe_block_cast(r, block_role, columnwise, rows, cols);
  c.sr_key = seed;
  if (c.rht && rows % 16 != 0)
    throw Error("quantize: NVFP4's Hadamard transform (the column-wise copy of " + role +
                ") needs rows in multiples of 16; this tensor has " + std::to_string(rows) +
                " (disable_rht=True skips it)");
  q.format = c.scheme == BlockScheme::Nvfp4 ? DType::E2M1 : c.format;
  q.codes.resize(x.size());
  q.block_scales.resize(block_scale_bytes(c));
  std::vector<bf16_t> operand(x.size());
  std::vector<float> work(c.rht ? x.size() : 0);
  BlockCastOut out;
  out.codes = q.codes.data();
  out.scales = q.block_scales.data();
  out.operand = operand.data();
  out.tensor_scale_inv = &q.tensor_scale_inv;
  out.amax = &q.amax;
  {
    nb::gil_scoped_release unlocked;
    block_cast(c, out, x.data(), work.data());
  }
  q.block = c;
  return q;
}

// Every code of a format and its value: 256 (E4M3, E5M2, E8M0) or 16 (E2M1).
Numpy<float> format_values(const std::string& name) {
  const DType d = format_named(name, /*e8m0_too=*/true);
  const int codes = d == DType::E2M1 ? 16 : 256;
  std::vector<float> v(static_cast<size_t>(codes));
  for (int c = 0; c < codes; ++c) {
    const auto code = static_cast<uint8_t>(c);
    v[static_cast<size_t>(c)] = is_fp8(d)          ? fp8_decode(code, d)
                                : d == DType::E2M1 ? kE2M1Values[code]
                                                   : e8m0_decode(code);
  }
  return to_numpy(std::move(v), {static_cast<size_t>(codes)});
}

// Codes of x in an element format at scale 1, as the engine encodes: E4M3/E5M2 round to
// nearest even (saturating or not), E2M1 nearest even saturating at 6, E8M0 rounding up
// (the MX scale rule).
Numpy<uint8_t> encode(const FloatIn& x, const std::string& name, bool saturate) {
  const DType d = format_named(name, /*e8m0_too=*/true);
  std::vector<uint8_t> codes(x.size());
  const auto n = static_cast<int64_t>(x.size());
  if (is_fp8(d)) {
    quantize(codes.data(), x.data(), n, 1.0f, d, saturate);
  } else {
    for (int64_t i = 0; i < n; ++i)
      codes[static_cast<size_t>(i)] =
          d == DType::E2M1 ? e2m1_encode(x.data()[i]) : e8m0_encode_round_up(x.data()[i]);
  }
  return to_numpy(std::move(codes), shape_of(x));
}

}  // namespace

void bind_numerics(nb::module_& m) {
  nb::class_<QuantizedTensor>(m, "QuantizedTensor",
                              "A tensor quantized as a recipe quantizes it (fp8lm.quantize)")
      .def_ro("recipe", &QuantizedTensor::recipe, "delayed, current, block, mxfp8 or nvfp4")
      .def_prop_ro(
          "format",
          [](const QuantizedTensor& q) { return std::string(dtype_short_name(q.format)); },
          "the element format: e4m3, e5m2 or e2m1")
      .def_prop_ro(
          "shape", [](const QuantizedTensor& q) { return nb::tuple(nb::cast(q.shape)); },
          "the tensor's shape")
      .def_prop_ro(
          "codes",
          [](const QuantizedTensor& q) {
            // A read-only view, kept alive by the QuantizedTensor (no copy).
            return Numpy<const uint8_t>(q.codes.data(), q.shape.size(), q.shape.data());
          },
          "the codes, one byte each, in the tensor's shape (E2M1: in the low 4 bits)")
      .def_ro("amax", &QuantizedTensor::amax,
              "max |x| (NaN left out); NVFP4's column-wise copy: of the Hadamard transform")
      .def_ro("scale", &QuantizedTensor::scale, "per-tensor recipes: codes = cast(x * scale)")
      .def_prop_ro(
          "scale_inv",
          [](const QuantizedTensor& q) -> nb::object {
            if (!q.block) return nb::cast(q.scale_inv);
            const BlockGrid& g = q.block->grid;
            const std::vector<size_t> shape{static_cast<size_t>(g.grid_rows()),
                                            static_cast<size_t>(g.grid_cols())};
            if (q.block->scheme == BlockScheme::Fp8Block) {
              std::vector<float> s(shape[0] * shape[1]);
              std::memcpy(s.data(), q.block_scales.data(), s.size() * sizeof(float));
              return nb::cast(to_numpy(std::move(s), shape));
            }
            return nb::cast(to_numpy(std::vector<uint8_t>(q.block_scales), shape));
          },
          nb::rv_policy::move,
          "what a code is multiplied by: per tensor, a float; per block, a [block rows, block "
          "columns] array as the recipe keeps it (Float8BlockScaling: float32; MXFP8: E8M0 "
          "codes; NVFP4: E4M3 codes, times tensor_scale_inv)")
      .def_ro("tensor_scale_inv", &QuantizedTensor::tensor_scale_inv,
              "NVFP4: 1/S, the tensor scale every block's decoded scale is multiplied by; else 1")
      .def_prop_ro(
          "block_shape",
          [](const QuantizedTensor& q) -> nb::object {
            if (!q.block) return nb::none();
            return nb::make_tuple(q.block->grid.block_rows, q.block->grid.block_cols);
          },
          "per-block recipes: the (rows, columns) of one block; per tensor: None")
      .def_prop_ro(
          "rht", [](const QuantizedTensor& q) { return q.block && q.block->rht; },
          "NVFP4: the codes are of the 16-point Hadamard transform down each column")
      .def_ro("saturated", &QuantizedTensor::saturated,
              "per-tensor casts: values clamped to the format's max (or that were ±Inf)")
      .def_ro("flushed", &QuantizedTensor::flushed,
              "per-tensor casts: non-zero values that became ±0")
      .def(
          "dequantize", [](const QuantizedTensor& q) { return to_numpy(q.values(), q.shape); },
          "the values the codes stand for, float32 in the tensor's shape");

  m.def("_quantize_per_tensor", &quantize_per_tensor, nb::arg("x"), nb::arg("format"),
        nb::arg("scale").none(), nb::arg("margin"), nb::arg("saturate"));
  m.def("_quantize_blocks", &quantize_blocks, nb::arg("x"), nb::arg("recipe_settings"),
        nb::arg("role"), nb::arg("columnwise"), nb::arg("seed"));
  m.def("_format_values", &format_values, nb::arg("format"));
  m.def("_encode", &encode, nb::arg("x"), nb::arg("format"), nb::arg("saturate") = true);
}

}  // namespace fp8lm::python
