// Two translation units include all of kiln and instantiate the same program:
// linking them proves the headers define nothing twice (the ODR test).
#include <kiln/kiln.hpp>

#include "odr_model.hpp"

double odr_loss_a() { return kiln::odr_test::run(); }
