#pragma once
// A setting's value from its text (a flag's, a --config key's, config.json's) and back, with
// errors naming where the value came from ("--steps 'x' is not an integer").
#include <cstdint>
#include <string>
#include <string_view>

namespace fp8lm {

int64_t setting_int(std::string_view label, std::string_view v);
// An int field: out of int's range is an error, not a wrapped value.
int setting_int32(std::string_view label, std::string_view v);
// A finite float or double; a value below the type's smallest is an error, not 0.
template <class T>
T setting_real(std::string_view label, std::string_view v);
bool setting_bool(std::string_view label, std::string_view v);  // "true" or "false"

// A float as its shortest decimal (0.002, not 0.0020000000949949026): what the user wrote, and
// it reads back to the same float.
std::string real_text(float v);
std::string real_text(double v);
std::string bool_text(bool v);

}  // namespace fp8lm
