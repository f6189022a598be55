// kiln/detail/type_name.hpp — the name of a type, for summaries and messages.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <string_view>

namespace kiln::detail {

/// "tok_embed" for `struct tok_embed;`, as GCC and Clang spell it.
template <class T>
constexpr std::string_view type_name() {
  std::string_view p = __PRETTY_FUNCTION__;
  const auto start = p.find("T = ");
  if (start == std::string_view::npos) return "?";
  p.remove_prefix(start + 4);
  const auto end = p.find_first_of(";]");
  return p.substr(0, end);
}

}  // namespace kiln::detail
