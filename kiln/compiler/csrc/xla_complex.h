/* ---- Complex elementwise ops with XLA's CPU bits (JAX's): div, mul, integer_pow, abs,
   sign, exp, log, sqrt, expm1, tanh, tan, sin, cos, sinh, cosh, logistic, log1p, asin,
   acos, atan, asinh, acosh, atanh of complex64/complex128, for kiln/lax/_xla_eager.py.

   The formulas are the ones XLA's CPU backend runs for JAX's complex ops (its elemental
   emitter: Smith's division with its NaN recovery, abs, expm1, tanh/tan; StableHLO's
   complex math expander simplified by XLA: exp, log, sqrt; JAX's and CHLO's expansions:
   sin/cos, sinh/cosh, log1p, the inverse functions), operation for operation in XLA's
   order. The library is built with -ffp-contract=off, so every product is rounded on its
   own except where XLA's code contracts one into a fused multiply-add: those are the
   explicit fmaf/fma calls. The kernels run with MXCSR's DAZ+FTZ set (KILN_FTZ_ON, as
   XLA's CPU code), so arithmetic reads subnormals as zero and flushes subnormal results;
   the operands are also flushed explicitly where they are read (KFTZ), and the C
   library's functions (sin, cos, atan2) get the operands' raw bits where XLA passes them.
   The real functions are xla_math.h's, their results flushed (KRF_*).

   Written once in xla_complex_t.h for both widths (included twice below). Each op is a
   static inline function of the parts; the kernels over interleaved (re, im) arrays are
   the CEAGER* lines of kiln_random.c. Checked bit for bit against JAX 0.10.2 by
   tests/lax/test_complex_edges.py. Needs xla_math.h first. */

/* NaN-propagating max/min of two values (np.maximum/np.minimum: the first NaN wins). */
static inline float kcmax32(float a, float b) { return sel32(a >= b || a != a, a, b); }
static inline float kcmin32(float a, float b) { return sel32(a <= b || a != a, a, b); }
static inline double kcmax64(double a, double b) { return sel64(a >= b || a != a, a, b); }
static inline double kcmin64(double a, double b) { return sel64(a <= b || a != a, a, b); }

#define KC_W 32
#include "xla_complex_t.h"
#undef KC_W
#define KC_W 64
#include "xla_complex_t.h"
#undef KC_W

/* Kernels over n interleaved complex values (z -> w), under XLA's flushing; *_obj take
   the ndarrays' addresses as the real kernels' do. */
#define CEAGER1(name, T, fn) void name(const T *z, T *w, int64_t n) { \
  KILN_FTZ_ON for (int64_t i = 0; i < n; i++) fn(z[2 * i], z[2 * i + 1], &w[2 * i], \
                                                   &w[2 * i + 1]); KILN_FTZ_OFF } \
  void name##_obj(const void *zo, const void *wo, int64_t n) { \
    name((const T *)kiln_array_data(zo), (T *)kiln_array_data(wo), n); }
/* abs: complex in, real out. */
#define CEAGER_ABS(name, T, fn) void name(const T *z, T *w, int64_t n) { \
  KILN_FTZ_ON for (int64_t i = 0; i < n; i++) w[i] = fn(z[2 * i], z[2 * i + 1]); \
  KILN_FTZ_OFF } \
  void name##_obj(const void *zo, const void *wo, int64_t n) { \
    name((const T *)kiln_array_data(zo), (T *)kiln_array_data(wo), n); }
/* a op b; an operand with stride 0 is one value broadcast. fix (div) redoes the elements
   whose parts both came out NaN (Smith's special values) after the vectorized loop. */
#define CEAGER2(name, T, fn, fix) \
  void name(const T *a, int64_t sa, const T *b, int64_t sb, T *w, int64_t n) { \
    KILN_FTZ_ON \
    for (int64_t i = 0; i < n; i++) fn(a[2 * i * sa], a[2 * i * sa + 1], b[2 * i * sb], \
                                       b[2 * i * sb + 1], &w[2 * i], &w[2 * i + 1]); \
    fix(a, sa, b, sb, w, n); \
    KILN_FTZ_OFF } \
  void name##_obj(const void *ao, int64_t sa, const void *bo, int64_t sb, const void *wo, \
                  int64_t n) { \
    name((const T *)kiln_array_data(ao), sa, (const T *)kiln_array_data(bo), sb, \
         (T *)kiln_array_data(wo), n); }
/* integer_pow(z, k), k != 0, as JAX lowers it (kc_ipow_*). */
#define CEAGER_IPOW(name, T, fn) void name(const T *z, T *w, int64_t n, int64_t k) { \
  KILN_FTZ_ON fn(z, w, n, k); KILN_FTZ_OFF } \
  void name##_obj(const void *zo, const void *wo, int64_t n, int64_t k) { \
    name((const T *)kiln_array_data(zo), (T *)kiln_array_data(wo), n, k); }
