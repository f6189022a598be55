// kiln/data/source_ref.hpp — a reference to any sample source, its type
// erased: what fit_options holds as the validation set.
//
// WHAT IT IS
//   `source_ref` refers to a `dataset`, a `dataset_view`, a
//   `streamed_dataset`, an `augmented<S>` or a source of your own
//   (kiln/data/sample_source.hpp), so that one non-template option can name
//   any of them: `fit(train, epochs{5}, {.validation = &test})`. It is a
//   sample_source itself, forwarding each call to the source it refers to.
//
// INVARIANTS
//   It refers, it does not own: the source must outlive the fit that reads
//   it. A `dataset` is held as its view (spans over its vectors), so the
//   dataset must not change size while referred to. An empty reference
//   (the default, or a null pointer) is false.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include <kiln/data/dataset.hpp>
#include <kiln/data/dataset_view.hpp>
#include <kiln/data/sample_source.hpp>

namespace kiln {

class source_ref {
 public:
  source_ref() = default;
  source_ref(std::nullptr_t) noexcept {}  // NOLINT: a null pointer is no source, as before
  /// A dataset, through its view (the dataset stays where it is).
  source_ref(const dataset* d) {  // NOLINT: `.validation = &test`
    if (d) {
      view_.emplace(d->view());
      calls_ = &calls_for<dataset_view>;
    }
  }
  /// Any other sample source.
  template <sample_source S>
  source_ref(const S* s) noexcept : source_(s), calls_(s ? &calls_for<S> : nullptr) {}  // NOLINT

  explicit operator bool() const noexcept { return calls_ != nullptr; }

  source_info info() const { return calls_->info(object()); }
  void validate() const { calls_->validate(object()); }
  void read_features(std::size_t i, const sample_pass& pass, std::span<float> row) const {
    calls_->features(object(), i, pass, row);
  }
  void read_labels(std::size_t i, std::span<std::uint32_t> out) const { calls_->labels(object(), i, out); }
  void read_targets(std::size_t i, std::span<float> out) const { calls_->targets(object(), i, out); }

 private:
  struct calls {
    source_info (*info)(const void*);
    void (*validate)(const void*);
    void (*features)(const void*, std::size_t, const sample_pass&, std::span<float>);
    void (*labels)(const void*, std::size_t, std::span<std::uint32_t>);
    void (*targets)(const void*, std::size_t, std::span<float>);
  };
  template <class S>
  static constexpr calls calls_for{
      [](const void* s) { return static_cast<const S*>(s)->info(); },
      [](const void* s) {
        if constexpr (requires(const S& x) { x.validate(); }) static_cast<const S*>(s)->validate();
      },
      [](const void* s, std::size_t i, const sample_pass& pass, std::span<float> row) {
        static_cast<const S*>(s)->read_features(i, pass, row);
      },
      [](const void* s, std::size_t i, std::span<std::uint32_t> out) { static_cast<const S*>(s)->read_labels(i, out); },
      [](const void* s, std::size_t i, std::span<float> out) { static_cast<const S*>(s)->read_targets(i, out); }};

  /// The source: the view held here (a dataset's), or the one referred to.
  const void* object() const noexcept { return view_ ? static_cast<const void*>(&*view_) : source_; }

  std::optional<dataset_view> view_;  ///< a dataset's view (copied with the reference: spans and a shape)
  const void* source_ = nullptr;
  const calls* calls_ = nullptr;
};
static_assert(sample_source<source_ref>);

}  // namespace kiln
