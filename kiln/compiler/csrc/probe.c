/* The probe kiln/compiler/build.py compiles to learn which flags the compiler takes. */
#include <math.h>
double kiln_probe(const double *x, int n) {
  double s = 0.0;
#pragma omp parallel for reduction(+:s)
  for (int i = 0; i < n; i++) s += sqrt(x[i]);
  return s;
}
