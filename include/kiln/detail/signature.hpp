// kiln/detail/signature.hpp — a model's signature (kiln::model::signature):
// its identity as text, spelt alike by every compiler. No type's name goes
// into it, since compilers spell those differently (an anonymous namespace is
// `{anonymous}` to g++ and `(anonymous namespace)` to Clang, and so on):
// layers are named by their hand-written name(), values by their index.
//
// COMPILE COST
//   Linear in the number of layers and values. Each piece is one pack
//   expansion over the flat list of layers or values, in one function:
//   nothing is instantiated once per layer inside a member of the model
//   (whose every symbol would carry the model's whole type in its name),
//   and who uses a value is found by one lookup per use of a tag (O(log N),
//   at compile time), not by walking the layers for each value.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/detail/binding.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/shape.hpp>

namespace kiln::detail {

template <class Spec>
inline constexpr bool is_submodel = false;
template <class M>
inline constexpr bool is_submodel<submodel<M>> = true;

/// A layer spec's name as the signature writes it: its name(), except that a
/// model used as a layer (whose name() is its type's, as the compiler spells
/// it) is "model", and a layer that names the layers it holds gives its
/// signature_name() (residual, position_wise: name_with<true, ...>).
template <class Spec>
std::string signature_name() {
  if constexpr (is_submodel<Spec>) {
    return "model";
  } else if constexpr (requires { Spec::signature_name(); }) {
    return Spec::signature_name();
  } else {
    return Spec::name();
  }
}

/// "kind<A, B, ...>" from the names of the layers Specs... (models used as
/// layers included): their name()s, or with Signature their signature names.
template <bool Signature, class... Specs>
std::string name_with(std::string kind) {
  kind += '<';
  [[maybe_unused]] const int order[] = {
      0, (kind += (Signature ? signature_name<as_layer_t<Specs>>() : as_layer_t<Specs>::name()) + ", ", 0)...};
  if (sizeof...(Specs) > 0) kind.resize(kind.size() - 2);
  return kind + '>';
}

/// A shape as text, through a plain function (a pointer to it goes in a table).
template <class S>
std::string shape_text() {
  return to_string(S{});
}

/// One line per bound layer of a flat list (flatten_nested_t: the layers
/// inside others right after them): position, kind, input and output shape.
/// (Tables, then one loop: no body of one call per layer to optimise.)
template <class... B>
std::string layer_lines(type_list<B...>) {
  using text = std::string (*)();
  static constexpr std::size_t position[] = {B::position..., 0};
  static constexpr text kind[] = {&signature_name<typename B::spec>..., nullptr};
  static constexpr text in[] = {&shape_text<typename B::input_shape>..., nullptr};
  static constexpr text out[] = {&shape_text<typename B::output_shape>..., nullptr};
  std::string s;
  for (std::size_t k = 0; k < sizeof...(B); ++k)
    s += fmt::format("layer {} {} {} -> {}\n", position[k], kind[k](), in[k](), out[k]());
  return s;
}

/// The layer at Position lists the value (parameter or state) named Tag.
template <std::size_t Position, class Tag>
struct value_use {
  static constexpr std::size_t position = Position;
  using tag = Tag;
};

/// The uses of the values in List (a bound layer B's parameters or state);
/// none for a layer that contains layers (its contents list their own).
template <class B, class List, bool = contains_layers<B>>
struct uses_in {
  using type = type_list<>;
};
template <class B, class... P>
struct uses_in<B, type_list<P...>, false> {
  using type = type_list<value_use<B::position, typename P::tag>...>;
};

/// Every use of a parameter, and of a state value, by the layers of a flat list, in order.
template <class Flat>
struct value_uses;
template <class... B>
struct value_uses<type_list<B...>> {
  using parameters = join_t<typename uses_in<B, typename B::parameters>::type...>;
  using state = join_t<typename uses_in<B, state_of_t<B>>::type...>;
};

/// For each value of Layout (by index), the positions of the layers that use
/// it, in order: from the uses U..., each tag looked up once at compile time,
/// all in one constant evaluation (not one Layout::index_of<Tag> each: that
/// instantiates, per tag, a function named after the whole layout).
template <class Layout, class... U>
std::vector<std::vector<std::size_t>> users_by_index(type_list<U...>) {
  static constexpr std::array<std::size_t, sizeof...(U)> index = [] {
    using tags = typename Layout::tags;
    const std::uint64_t hashes[] = {type_hash<typename U::tag>()..., 0};
    const void* const keys[] = {type_key<typename U::tag>()..., nullptr};
    std::array<std::size_t, sizeof...(U)> found{};
    for (std::size_t k = 0; k < sizeof...(U); ++k) found[k] = find_tag(tags::sorted.data(), tags::count, hashes[k], keys[k]);
    return found;
  }();
  static constexpr std::size_t position[] = {U::position..., 0};
  std::vector<std::vector<std::size_t>> users(Layout::tensor_count);
  for (std::size_t k = 0; k < sizeof...(U); ++k) {
    auto& u = users[index[k]];
    if (u.empty() || u.back() != position[k]) u.push_back(position[k]);
  }
  return users;
}

/// One line per value of Layout: "param 3 shape<128, 256> at 1024 used by 2, 9".
template <class Layout, class... P>
std::string value_lines(const char* kind, type_list<P...>, const std::vector<std::vector<std::size_t>>& users) {
  using text = std::string (*)();
  static constexpr text shape[] = {&shape_text<typename P::shape_type>..., nullptr};
  std::string s;
  for (std::size_t i = 0; i < sizeof...(P); ++i)
    s += fmt::format("{} {} {} at {} used by {}\n", kind, i, shape[i](), Layout::offsets[i], fmt::join(users[i], ", "));
  return s;
}

}  // namespace kiln::detail
