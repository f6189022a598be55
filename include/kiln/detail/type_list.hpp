// kiln/detail/type_list.hpp — the compile-time lists kiln's models are made of.
//
// A model of N layers must compile in time linear in N on GCC and Clang, so
// the structures built from its layers are plain parameter packs, expanded
// once, never value-level tuples walked element by element in constant
// evaluation (Hana's transform/flatten/at over hundreds of layers cost
// seconds each), and never fold expressions over them (Clang stops a fold
// at 256 operands). What is here:
//
//   type_list<T...>          a list of types
//   list_at_t<I, List>       the I-th type, without recursion
//   join_t<Lists...>       one list from several, eight at a time
//   for_each_index<N>(f)     f(index_constant<0>) … f(index_constant<N−1>)
//                            in order, as one braced list (no fold)
//   type_hash<T>()           a 64-bit hash of T's name; with type_key<T>
//                            (an address, unique per type) it gives a
//                            tag → index lookup in O(log N) (tag_index).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include <kiln/detail/type_name.hpp>

namespace kiln::detail {

template <class... T>
struct type_list {
  static constexpr std::size_t size = sizeof...(T);
};

// ---- indexing ---------------------------------------------------------------
#if defined(__has_builtin)
#if __has_builtin(__type_pack_element)
#define KILN_HAS_TYPE_PACK_ELEMENT 1
#endif
#endif

template <std::size_t I, class T>
struct indexed {
  using type = T;
};
template <class Seq, class... T>
struct indexer;
template <std::size_t... I, class... T>
struct indexer<std::index_sequence<I...>, T...> : indexed<I, T>... {};
template <std::size_t I, class T>
indexed<I, T> select_indexed(const indexed<I, T>*);

/// A list's index table: one class per list, whose bases are its elements
/// by index (made once; each lookup then names the table, one type, and
/// never spells the whole list out again, which would cost the compiler
/// time linear in the list per lookup).
template <class List>
struct list_table;
template <class... T>
struct list_table<type_list<T...>> {
  using type = indexer<std::index_sequence_for<T...>, T...>;
};
/// The I-th element of an index table (the one base that matches).
template <std::size_t I, class Table>
using table_at_t = typename decltype(select_indexed<I>(static_cast<const Table*>(nullptr)))::type;

/// The I-th of a list: through the list's index table (the list is named
/// as one type, never spelled out again), or the compiler's builtin where it
/// has one (Clang).
template <std::size_t I, class List>
struct list_at {
  using type = table_at_t<I, typename list_table<List>::type>;
};
#ifdef KILN_HAS_TYPE_PACK_ELEMENT
template <std::size_t I, class... T>
struct list_at<I, type_list<T...>> {
  using type = __type_pack_element<I, T...>;
};
#endif
template <std::size_t I, class List>
using list_at_t = typename list_at<I, List>::type;

// ---- concatenation ------------------------------------------------------------
template <class... Lists>
struct join {
  using type = type_list<>;
};
template <class... A>
struct join<type_list<A...>> {
  using type = type_list<A...>;
};
template <class... A, class... B>
struct join<type_list<A...>, type_list<B...>> {
  using type = type_list<A..., B...>;
};
template <class... A, class... B, class... C, class... Rest>
struct join<type_list<A...>, type_list<B...>, type_list<C...>, Rest...>
    : join<type_list<A..., B..., C...>, Rest...> {};
template <class... A, class... B, class... C, class... D, class... E, class... F, class... G, class... H,
          class... Rest>
struct join<type_list<A...>, type_list<B...>, type_list<C...>, type_list<D...>, type_list<E...>, type_list<F...>,
              type_list<G...>, type_list<H...>, Rest...>
    : join<type_list<A..., B..., C..., D..., E..., F..., G..., H...>, Rest...> {};
template <class... Lists>
using join_t = typename join<Lists...>::type;

/// The types of List at the indices `Holder::indices` (a constexpr array).
template <class List, class Holder, class Seq = std::make_index_sequence<Holder::indices.size()>>
struct pick_by;
#ifdef KILN_HAS_TYPE_PACK_ELEMENT
template <class... T, class Holder, std::size_t... J>
struct pick_by<type_list<T...>, Holder, std::index_sequence<J...>> {
  using type = type_list<__type_pack_element<Holder::indices[J], T...>...>;
};
#else
template <class List, class Holder, std::size_t... J>
struct pick_by<List, Holder, std::index_sequence<J...>> {
  using type = type_list<list_at_t<Holder::indices[J], List>...>;
};
#endif

// ---- iteration ----------------------------------------------------------------
template <std::size_t I>
using index_constant = std::integral_constant<std::size_t, I>;

/// Calls f(index_constant<I>{}) for I = 0 … N−1, in order.
template <std::size_t N, class F>
constexpr void for_each_index(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    [[maybe_unused]] const int order[] = {0, (f(index_constant<I>{}), 0)...};
  }(std::make_index_sequence<N>{});
}

/// Calls f(T*) (a null pointer of each type) for every T of List, in order.
template <class... T, class F>
constexpr void for_each_type(type_list<T...>, F&& f) {
  [[maybe_unused]] const int order[] = {0, (f(static_cast<T*>(nullptr)), 0)...};
}

// ---- identity ---------------------------------------------------------------------
template <class T>
inline constexpr char type_key_object = 0;
/// An address that is one type's alone (comparable in constant expressions).
template <class T>
constexpr const void* type_key() {
  return &type_key_object<T>;
}

/// FNV-1a of T's name: equal for one type, almost surely different for two.
template <class T>
constexpr std::uint64_t type_hash() {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : type_name<T>()) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

/// One key of a tag_index: its hash, its index among the keys, its address.
struct tag_entry {
  std::uint64_t hash;
  std::size_t index;
  const void* key;
};

/// The index of the key (h, key) in `sorted` (by hash, then index), or
/// `count` when it is not there. A plain function, not a member template of
/// a class named after every key: each lookup instantiates nothing large.
constexpr std::size_t find_tag(const tag_entry* sorted, std::size_t count, std::uint64_t h, const void* key) {
  std::size_t lo = 0, hi = count;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (sorted[mid].hash < h) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  for (; lo < count && sorted[lo].hash == h; ++lo)
    if (sorted[lo].key == key) return sorted[lo].index;
  return count;
}

/// Finds types among Keys... by hash, then by address: `find<T>` is the
/// index of the first key that is T (N when none is); `first[i]` the index
/// of the first key equal to key i. O(N log N) to build, O(log N) a lookup.
template <class... Keys>
struct tag_index {
  static constexpr std::size_t count = sizeof...(Keys);
  using entry = tag_entry;
  static constexpr std::array<entry, count> sorted = [] {
    std::array<entry, count> e{entry{type_hash<Keys>(), 0, type_key<Keys>()}...};
    for (std::size_t i = 0; i < count; ++i) e[i].index = i;
    std::sort(e.begin(), e.end(), [](const entry& a, const entry& b) {
      return a.hash != b.hash ? a.hash < b.hash : a.index < b.index;
    });
    return e;
  }();
  /// Two different types with one hash (never seen; reported, not guessed).
  static constexpr bool collision = [] {
    for (std::size_t i = 1; i < count; ++i)
      if (sorted[i].hash == sorted[i - 1].hash && sorted[i].key != sorted[i - 1].key) return true;
    return false;
  }();
  static constexpr std::array<std::size_t, count> first = [] {
    std::array<std::size_t, count> f{};
    for (std::size_t i = 0; i < count; ++i)
      f[sorted[i].index] = i > 0 && sorted[i].key == sorted[i - 1].key ? f[sorted[i - 1].index] : sorted[i].index;
    return f;
  }();

  template <class T>
  static constexpr std::size_t find = find_tag(sorted.data(), count, type_hash<T>(), type_key<T>());
};

}  // namespace kiln::detail
