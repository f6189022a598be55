// fit(data, 10): the number of passes is a kiln::epochs{10}.
// expect: kiln::trainer::fit\(data, n\): give the number of passes as kiln::epochs\{n\}
// expect: fit_takes_the_number_of_passes_as_kiln_epochs<int>
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
  auto program = kiln::compile<net, kiln::batch<2>>();
  kiln::trainer t{program, kiln::sgd{.lr = 0.1f}};
  kiln::dataset data{"four", {4}, std::vector<float>(16, 0.5f), {0, 1, 0, 1}, {}, 0};
#ifdef KILN_SHOULD_FAIL
  t.fit(data, 10, {.progress = kiln::progress_mode::none});
#else
  t.fit(data, kiln::epochs{1}, {.progress = kiln::progress_mode::none});
#endif
}
