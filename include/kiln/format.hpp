// kiln/format.hpp — fmt formatters for kiln's vocabulary.
//
//   fmt::print("{}\n", kiln::shape<28, 28>{});    // shape<28, 28>
//   fmt::print("{}\n", kiln::summary<mlp>);        // the model's table
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>

#include <fmt/format.h>

#include <kiln/model.hpp>
#include <kiln/shape.hpp>

namespace kiln {
/// A value that formats as the summary table of model M.
template <class M>
struct summary_of {};
template <class M>
inline constexpr summary_of<M> summary{};
}  // namespace kiln

template <std::size_t... D>
struct fmt::formatter<kiln::shape<D...>> : fmt::formatter<std::string> {
  auto format(kiln::shape<D...> s, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(kiln::to_string(s), ctx);
  }
};

template <class M>
struct fmt::formatter<kiln::summary_of<M>> : fmt::formatter<std::string> {
  auto format(kiln::summary_of<M>, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(M::summary(), ctx);
  }
};
