// A program over another program's store must have the store's model and
// scalar: a precision<double> program cannot share a float store. One error.
// expect: kiln::compile<M, Options\.\.\.>\(store\): the store must hold the parameters of the same model M
// expect: a_shared_store_holds_the_same_model_and_scalar
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
  auto train = kiln::compile<net, kiln::batch<8>>();
#ifdef KILN_SHOULD_FAIL
  auto one = kiln::compile<net, kiln::batch<1>, kiln::precision<double>>(train.store());
#else
  auto one = kiln::compile<net, kiln::batch<1>, kiln::precision<kiln::bf16>>(train.store());
#endif
  one.forward();
}
