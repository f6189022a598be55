// A loss whose targets a dataset cannot give without a silent conversion
// (here int class labels: the trainer would fill them from the float
// dataset::targets) is refused where fit is compiled, naming the loss and
// the type.
// expect: kiln::trainer: a dataset gives class labels as std::uint32_t \(dataset::labels\) and real targets as float \(dataset::targets\); declare the loss's target_type as std::uint32_t, float or double
// expect: a_dataset_gives_uint32_class_labels_or_float_targets<hinge, int>
// expect-errors: 1
#include <kiln/kiln.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

struct hinge {  // a loss of your own: one class label per sample
  using kiln_loss = void;
  static std::string name() { return "hinge"; }
  template <kiln::Shape Out>
  struct bind {
#ifdef KILN_SHOULD_FAIL
    using target_type = int;
#else
    using target_type = std::uint32_t;
#endif
    static constexpr std::size_t targets_per_sample = 1;
    static constexpr bool has_accuracy = false;
    template <class T>
    static kiln::loss_value evaluate(const T* y, const target_type* t, std::size_t batch, std::size_t valid, T* dy) {
      double sum = 0;
      for (std::size_t s = 0; s < batch; ++s)
        for (std::size_t c = 0; c < Out::size; ++c) {
          const T sign = static_cast<std::size_t>(t[s]) == c ? T(1) : T(-1);
          const T margin = T(1) - sign * y[s * Out::size + c];
          if (s < valid && margin > T(0)) sum += static_cast<double>(margin);
          if (dy) dy[s * Out::size + c] = s < valid && margin > T(0) ? -sign / static_cast<T>(valid) : T(0);
        }
      return {valid ? sum / static_cast<double>(valid) : 0.0, valid, 0, valid};
    }
  };
};

int main() {
  auto program = kiln::compile<kiln::model<kiln::input<4>, kiln::dense<3>>, kiln::batch<8>, hinge>();
  kiln::trainer t{program, kiln::sgd{.lr = 0.1f}};
  const kiln::dataset data;
  return static_cast<int>(t.fit(data, kiln::epochs{1}).epochs.size());
}
