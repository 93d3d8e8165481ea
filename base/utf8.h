#pragma once
// UTF-8 checks for text that ends up in ddpbench's JSON. JSON carries Unicode text, and the JSON
// library throws on bytes that are not UTF-8, so such bytes are found where they enter: a flag's
// value is refused naming the flag; what the machine says of itself (host name, environment) is
// recorded with each bad byte written as the four characters \xHH.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ddpbench {

// The offset of the first byte that does not begin or continue a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF included), or none.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

// `text` with every byte of an ill-formed sequence written as \xHH; valid text unchanged.
std::string escape_invalid_utf8(std::string_view text);

}  // namespace ddpbench
