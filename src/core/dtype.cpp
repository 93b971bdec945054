#include "core/dtype.h"

namespace fp8lm {

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::E4M3:
      return "F8_E4M3";
    case DType::E5M2:
      return "F8_E5M2";
    case DType::I64:
      return "I64";
    case DType::U8:
      return "U8";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::I64:
      return 8;
    default:
      return 1;
  }
}

}  // namespace fp8lm
