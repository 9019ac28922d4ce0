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
static inline float kcmax32(float a, float b) { return sel32((a >= b) | (a != a), a, b); }
static inline float kcmin32(float a, float b) { return sel32((a <= b) | (a != a), a, b); }
static inline double kcmax64(double a, double b) { return sel64((a >= b) | (a != a), a, b); }
static inline double kcmin64(double a, double b) { return sel64((a <= b) | (a != a), a, b); }

/* xla_math.h's xexp64 (which multiplies by 2^n instead of calling ldexp where the
   result is normal). */
static inline double kc_fexp64(double x0) { return xexp64(x0); }
/* xla_math.h's xexpm164 with the tanh form computed only where it is taken. */
static inline double kc_fexpm164(double x) {
  double h = ftz64(x * 0.5);
  double e = kc_fexp64(x);
  double r = fabs(x) > 0.5 ? e - 1.0 : xtanh64(h) * (e + 1.0);
  return h == 0.0 ? x : r;
}

/* kc_fexp64 without branches, for |x| <= 700 and not NaN (n within +-1010: the product
   is exact, nothing clamps): the same bits, vectorizable. The kernels using it redo the
   other elements with kc_fexp64. */
static inline double kc_vexp64(double x0) {
  x0 = ftz64(x0);
  double fx = floor(fma(1.4426950408889634073599, x0, 0.5));
  double r = fma(-fx, 0.693145751953125, x0);
  r = fma(-fx, 1.42860682030941723212e-6, r);
  double r2 = r * r;
  double px = fma(fma(1.26177193074810590878e-4, r2, 3.02994407707441961300e-2), r2,
                  9.99999999999999999910e-1) * r;
  double qx = fma(fma(fma(3.00198505138664455042e-6, r2, 2.52448340349684104192e-3), r2,
                      2.27265548208155028766e-1), r2, 2.00000000000000000009e0);
  r = fma(2.0, px / (qx - px), 1.0);
  uint64_t b = (uint64_t)((int64_t)fx + 1023) << 52;
  double p2; memcpy(&p2, &b, 8);
  double out = r * p2;
  out = sel64(out >= x0, out, sel64(out > x0, out, x0));
  return ftz64(out);
}
static inline double kc_vexpm164(double x) {
  double h = ftz64(x * 0.5);
  double e = kc_vexp64(x);
  double r = sel64(fabs(x) > 0.5, e - 1.0, xtanh64(h) * (e + 1.0));
  return sel64(h == 0.0, x, r);
}

#define KC_W 32
#include "xla_complex_t.h"
#undef KC_W
#define KC_W 64
#include "xla_complex_t.h"
#undef KC_W

/* float32 exp and log in two passes over blocks of KC_BLOCK elements: the C library's
   calls (sincosf, atan2f) first, one element at a time, then the rest of the formula,
   which the compiler vectorizes (one loop with the calls in it stays scalar: 3x slower). */
#define KC_BLOCK 1024
static inline void kc_cexp_pass32(const float *z, float *w, int64_t n) {
  for (int64_t b = 0; b < n; b += KC_BLOCK) {
    int64_t e = b + KC_BLOCK < n ? b + KC_BLOCK : n;
    for (int64_t i = b; i < e; i++) {
      float y = z[2 * i + 1];
      w[2 * i] = kc_cos32(y);
      w[2 * i + 1] = kc_sin32(y);
    }
    for (int64_t i = b; i < e; i++) {
      float re, im;
      kc_exp_cs32(ftz32(z[2 * i]), ftz32(z[2 * i + 1]), w[2 * i], w[2 * i + 1], &re, &im);
      w[2 * i] = re;
      w[2 * i + 1] = im;
    }
  }
}
static inline void kc_clog_pass32(const float *z, float *w, int64_t n) {
  for (int64_t b = 0; b < n; b += KC_BLOCK) {
    int64_t e = b + KC_BLOCK < n ? b + KC_BLOCK : n;
    float re[KC_BLOCK];
    for (int64_t i = b; i < e; i++) re[i - b] = kc_clog_re32(z[2 * i], z[2 * i + 1]);
    for (int64_t i = b; i < e; i++) {
      w[2 * i] = re[i - b];
      w[2 * i + 1] = atan2f(z[2 * i + 1], z[2 * i]);
    }
  }
}
/* complex128 exp and tanh in three passes over blocks: the C library's sin/cos, the
   formula vectorized with kc_vexp64 (every element), then the elements outside its range
   (|x| > 700 for exp, |2x| > 700 for tanh, NaN) again with the scalar formula. */
static inline void kc_cexp_pass64(const double *z, double *w, int64_t n) {
  for (int64_t b = 0; b < n; b += KC_BLOCK) {
    int64_t e = b + KC_BLOCK < n ? b + KC_BLOCK : n;
    for (int64_t i = b; i < e; i++) {
      double y = z[2 * i + 1];
      w[2 * i] = kc_cos64(y);
      w[2 * i + 1] = kc_sin64(y);
    }
    for (int64_t i = b; i < e; i++) {
      double x = ftz64(z[2 * i]), y = ftz64(z[2 * i + 1]);
      double ex = ftz64(kc_vexp64(x));
      double re = ex * w[2 * i], im = sel64(y == 0, 0.0, ex * w[2 * i + 1]);
      w[2 * i] = re;
      w[2 * i + 1] = im;
    }
    for (int64_t i = b; i < e; i++)
      if (!(fabs(ftz64(z[2 * i])) <= 700.0)) kc_cexp64(z[2 * i], z[2 * i + 1], &w[2 * i],
                                                       &w[2 * i + 1]);
  }
}
static inline void kc_ctanh_pass64(const double *z, double *w, int64_t n) {
  for (int64_t b = 0; b < n; b += KC_BLOCK) {
    int64_t e = b + KC_BLOCK < n ? b + KC_BLOCK : n;
    for (int64_t i = b; i < e; i++) {
      double y = z[2 * i + 1];
      w[2 * i] = kc_cos64(y);
      w[2 * i + 1] = kc_sin64(y);
    }
    for (int64_t i = b; i < e; i++) {
      double a = ftz64(z[2 * i]), bb = ftz64(z[2 * i + 1]), re, im;
      double two_a = a + a;
      double e1 = ftz64(kc_vexpm164(two_a)), e2 = ftz64(kc_vexpm164(-1.0 * two_a));
      kc_tanh_tail64(a, bb, z[2 * i], e1, e2, w[2 * i], w[2 * i + 1], &re, &im);
      w[2 * i] = re;
      w[2 * i + 1] = im;
    }
    for (int64_t i = b; i < e; i++)
      if (!(fabs(ftz64(z[2 * i])) <= 350.0)) kc_ctanh64(z[2 * i], z[2 * i + 1], &w[2 * i],
                                                        &w[2 * i + 1]);
  }
}

/* An op computed by a whole-array function f(z, w, n) (the passes above). */
#define CEAGER_PASS(name, T, fn) void name(const T *z, T *w, int64_t n) { \
  KILN_FTZ_ON fn(z, w, n); KILN_FTZ_OFF } \
  void name##_obj(const void *zo, const void *wo, int64_t n) { \
    name((const T *)kiln_array_data(zo), (T *)kiln_array_data(wo), n); }

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
    if (sa == 1 && sb == 1) { /* (the strides constant in each loop: it vectorizes) */ \
      for (int64_t i = 0; i < n; i++) fn(a[2 * i], a[2 * i + 1], b[2 * i], b[2 * i + 1], \
                                         &w[2 * i], &w[2 * i + 1]); \
    } else if (sa == 0 && sb == 1) { \
      const T ar = a[0], ai = a[1]; \
      for (int64_t i = 0; i < n; i++) fn(ar, ai, b[2 * i], b[2 * i + 1], &w[2 * i], \
                                         &w[2 * i + 1]); \
    } else if (sa == 1 && sb == 0) { \
      const T br = b[0], bi = b[1]; \
      for (int64_t i = 0; i < n; i++) fn(a[2 * i], a[2 * i + 1], br, bi, &w[2 * i], \
                                         &w[2 * i + 1]); \
    } else { \
      for (int64_t i = 0; i < n; i++) fn(a[2 * i * sa], a[2 * i * sa + 1], b[2 * i * sb], \
                                         b[2 * i * sb + 1], &w[2 * i], &w[2 * i + 1]); \
    } \
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
