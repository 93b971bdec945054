#pragma once
// What the extension's files share: each binds one concept into the module, and arrays go
// out to numpy the same way.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fp8lm/fp8_state.h"
#include "fp8lm/recipe.h"

namespace fp8lm::python {

namespace nb = nanobind;

// float32 input in host memory, C-contiguous: numpy arrays and CPU torch tensors come in
// without a copy (DLPack or the buffer protocol); others are converted first.
using FloatIn = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using IntIn = nb::ndarray<const int32_t, nb::c_contig, nb::device::cpu>;

template <class T>
using Numpy = nb::ndarray<nb::numpy, T>;

// A numpy array that owns v (moved into it) with this shape.
template <class T>
Numpy<T> to_numpy(std::vector<T>&& v, const std::vector<size_t>& shape) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return Numpy<T>(owned->data(), shape.size(), shape.data(), owner);
}

template <class Array>
std::vector<size_t> shape_of(const Array& a) {
  std::vector<size_t> shape(a.ndim());
  for (size_t d = 0; d < a.ndim(); ++d) shape[d] = a.shape(d);
  return shape;
}

// Settings as `fp8lm train --config` reads them, from the JSON text the Python side makes of a
// dict (keys with underscores: {"recipe": "mxfp8", "margin": 0}); Error naming a bad key or
// value, `origin` saying whose.
nlohmann::json parse_settings(const std::string& json_text, const std::string& origin);
// The FP8 recipe such settings describe (the recipe keys; any others refused).
Fp8Recipe recipe_from_settings(const std::string& json_text, const std::string& origin);

// One FP8 slot as a dict: scale, scale_inv, amax_history (numpy), saturated_fraction,
// flushed_fraction (what TE's fp8_meta holds, and what its last cast lost).
nb::dict slot_state_dict(const Fp8SlotState& s);

void bind_numerics(nb::module_& m);
void bind_engine(nb::module_& m);
void bind_torch_linear(nb::module_& m);

}  // namespace fp8lm::python
