/* kiln_random: the native kernels of kiln.random and of eager math with XLA's bits
   (kiln/random/_native.py, kiln/lax/_xla_eager.py): Threefry-2x32, XLA's float
   formulas, the C library's tan/pow, fma, XLA's rsqrt. The quoted includes are
   expanded in place by kiln.compiler.csrc.source (so the build's cache key holds
   their text); the file also compiles as is with -I on this directory. */
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KILN_HAVE_RSQRTPS 1
#endif

#include "threefry.h"

#include "xla_math.h"
#include "xla_asin_acos32.h"
#include "xla_complex.h"
#define UNARY(name, T, fn) \
  void name(const T *x, T *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = fn(x[i]); }
/* XLA's CPU code calls the C library for these (JAX's tan, pow and float64 log are
   glibc's, bit for bit); NumPy's SIMD versions differ in the last bit. */

/* ---- Eager math with JAX's bits (kiln/lax/_xla_eager.py). XLA's CPU kernels run with
   denormals flushed: subnormal inputs read as zero (DAZ) and subnormal results become zero
   (FTZ), which changes what the C library's sinf/powf/erf/... return for such operands.
   These loops set the same MXCSR bits while they run and restore the caller's. */
#if defined(__x86_64__) || defined(__i386__)
#define KILN_FTZ_ON unsigned kiln_csr_ = _mm_getcsr(); _mm_setcsr(kiln_csr_ | 0x8040u);
#define KILN_FTZ_OFF _mm_setcsr(kiln_csr_);
#else
#define KILN_FTZ_ON
#define KILN_FTZ_OFF
#endif
static inline float xlogistic32(float x) { return ftz32(1.0f / (1.0f + xexp32(-x))); }
static inline double xlogistic64(double x) { return ftz64(1.0 / (1.0 + xexp64(-x))); }
/* Small arrays: the caller passes the ndarray objects' addresses (CPython's id()) and the
   data pointer is read from the object (NumPy's PyArrayObject: the pointer follows the
   object header), which costs far less than ctypes' pointer extraction. kiln checks
   the offset once against ndarray.ctypes.data before it uses these entry points. */
static int64_t kiln_data_off = 16;
void kiln_set_data_offset(int64_t off) { kiln_data_off = off; }
void *kiln_array_data(const void *o) { return *(void *const *)((const char *)o + kiln_data_off); }
#define EAGER1(name, T, fn) void name(const T *x, T *y, int64_t n) { \
  KILN_FTZ_ON for (int64_t i = 0; i < n; i++) y[i] = fn(x[i]); KILN_FTZ_OFF } \
  void name##_obj(const void *xo, const void *yo, int64_t n) { \
    name((const T *)kiln_array_data(xo), (T *)kiln_array_data(yo), n); }
/* atan as XLA's CPU loop computes it for an n-element array (measured, JAX 0.10.2 on
   x86-64 with AVX2/AVX-512): one element is the C library's atan2(x, 1); 2 to 49
   elements are all XLA's approximation (the loop is not vectorized); from 50 on, the
   vectorized body calls the C library's atan and the last n % 4 elements (the scalar
   remainder) use the approximation. (Arrays over 256 KiB are split across threads, each
   part with its own remainder; that split depends on the machine and is not reproduced.) */
#define EAGER_ATAN(name, T, lib, one, approx) void name(const T *x, T *y, int64_t n) { \
  KILN_FTZ_ON \
  if (n == 1) { \
    y[0] = one(x[0]); \
  } else { \
    int64_t body = n < 50 ? 0 : n - n % 4; \
    for (int64_t i = 0; i < body; i++) y[i] = lib(x[i]); \
    for (int64_t i = body; i < n; i++) y[i] = approx(x[i]); \
  } \
  KILN_FTZ_OFF } \
  void name##_obj(const void *xo, const void *yo, int64_t n) { \
    name((const T *)kiln_array_data(xo), (T *)kiln_array_data(yo), n); }
/* float32 asinh and acosh: XLA's loop runs its scalar code (another contraction:
   xasinhs32, xacoshs32) for short arrays (up to 15 elements for asinh, 18 for acosh),
   then for the last n % 4 (below 24 elements for asinh, 32 for acosh) or n % 8
   (measured; XLA's thread split of large arrays is not reproduced). */
#define EAGER_SCALAR_TAIL(name, vec, scalar, all_max, mid) \
void name(const float *x, float *y, int64_t n) { \
  KILN_FTZ_ON \
  int64_t body = n <= all_max ? 0 : n - n % (n < mid ? 4 : 8); \
  for (int64_t i = 0; i < body; i++) y[i] = vec(x[i]); \
  for (int64_t i = body; i < n; i++) y[i] = scalar(x[i]); \
  KILN_FTZ_OFF } \
void name##_obj(const void *xo, const void *yo, int64_t n) { \
  name((const float *)kiln_array_data(xo), (float *)kiln_array_data(yo), n); }

/* integer_pow as JAX lowers it (binary exponentiation: acc * x for each set bit of |k|,
   x * x between; 1 / acc for k < 0), under XLA's flushing. */
#define EAGER_IPOW(name, T) void name(const T *x, T *y, int64_t n, int64_t k) { \
  KILN_FTZ_ON \
  int64_t m = k < 0 ? -k : k; \
  if (k == 2) { for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i]; n = 0; } \
  else if (k == 3) { for (int64_t i = 0; i < n; i++) y[i] = x[i] * (x[i] * x[i]); n = 0; } \
  for (int64_t i = 0; i < n; i++) { \
    T b = x[i], acc = 0; int first = 1; \
    for (int64_t e = m; e > 0; ) { \
      if (e & 1) { acc = first ? b : acc * b; first = 0; } \
      e >>= 1; \
      if (e > 0) b = b * b; \
    } \
    y[i] = k < 0 ? (T)1 / acc : acc; \
  } \
  KILN_FTZ_OFF } \
  void name##_obj(const void *xo, const void *yo, int64_t n, int64_t k) { \
    name((const T *)kiln_array_data(xo), (T *)kiln_array_data(yo), n, k); }

/* y = fn(a, b) under XLA's flushing; an operand with stride 0 is a scalar. pow and atan2
   are the C library's, which XLA's CPU code calls. */
#define EAGER2(name, T, fn) \
  void name(const T *a, int64_t sa, const T *b, int64_t sb, T *y, int64_t n) { \
    KILN_FTZ_ON for (int64_t i = 0; i < n; i++) y[i] = fn(a[i * sa], b[i * sb]); \
    KILN_FTZ_OFF } \
  void name##_obj(const void *ao, int64_t sa, const void *bo, int64_t sb, const void *yo, \
                  int64_t n) { \
    name((const T *)kiln_array_data(ao), sa, (const T *)kiln_array_data(bo), sb, \
         (T *)kiln_array_data(yo), n); }


/* The regularized incomplete beta function as JAX computes it (jax.lax's
   regularized_incomplete_beta_impl: Lentz's continued fraction, after the symmetry swap
   where x >= (a + 1) / (a + b + 2)). JAX's while loop has no per-element mask: every
   element keeps iterating until all have converged (or 200 / 600 steps), so an element's
   bits depend on the array; this kernel runs the elements in lockstep the same way.
   XLA contracts the step's pn * D + 1 and the factor's two products (fma(log x, a,
   log1p(-x) b), fma(log1p(-x), b, -lbeta)); the rest is rounded op by op. The convergence
   test |c d - 1| is contracted too, as in XLA's vector loop; its scalar code for short
   arrays (below ~40 elements) contracts some elements' tests and not others, which this
   kernel does not follow (some short arrays differ); float64 arrays whose loop stops
   before its 600 steps still differ in a few percent of elements (not found why). */
#define KILN_BETAINC(NAME, T, S, EPS, TINY, ITERS, FMAF, FABSF)                             \
  static T NAME##_num(int64_t i, T a, T b, T x) {                                         \
    if (i == 1) return (T)1;                                                              \
    int64_t mi = (i - 1) >= 0 ? (i - 1) / 2 : -((2 - i) / 2);                             \
    T m = (T)mi;                                                                          \
    T t = FMAF((T)2, m, a);                                                               \
    if (i % 2 == 0) {                                                                     \
      if (mi == 0) return ((-(a + b)) * x) / (a + (T)1);                                  \
      return (((-(a + m)) * ((a + b) + m)) * x) / (t * (t + (T)1));                       \
    }                                                                                     \
    return ((m * (b - m)) * x) / ((t - (T)1) * t);                                        \
  }                                                                                       \
  void NAME(const T *A, const T *B, const T *X, T *Y, int64_t n) {                        \
    KILN_FTZ_ON                                                                           \
    const T small = (T)(EPS / 2), thr = (T)(EPS / 2);                                     \
    T *w = (T *)malloc((size_t)(n > 0 ? n : 1) * 7 * sizeof(T));                          \
    if (!w) { for (int64_t j = 0; j < n; j++) Y[j] = (T)NAN; KILN_FTZ_OFF return; }       \
    T *aa = w, *bb = w + n, *xx = w + 2 * n, *C = w + 3 * n, *D = w + 4 * n, *H = w + 5 * n;\
    T *cr = w + 6 * n;                                                                    \
    for (int64_t j = 0; j < n; j++) {                                                     \
      T a = A[j], b = B[j], x = X[j];                                                     \
      int c = x < (a + (T)1) / ((a + b) + (T)2);                                          \
      cr[j] = (T)c;                                                                       \
      aa[j] = c ? a : b; bb[j] = c ? b : a; xx[j] = c ? x : (T)1 - x;                     \
      C[j] = small; D[j] = (T)0; H[j] = small;                                            \
    }                                                                                     \
    int unconv = 1;                                                                       \
    for (int64_t it = 1; it < ITERS && unconv; it++) {                                    \
      unconv = 0;                                                                         \
      for (int64_t j = 0; j < n; j++) {                                                   \
        T pn = NAME##_num(it, aa[j], bb[j], xx[j]);                                       \
        T c = (T)1 + pn / C[j];                                                           \
        c = FABSF(c) < small ? small : c;                                                 \
        T d = FMAF(pn, D[j], (T)1);                                                       \
        d = FABSF(d) < small ? small : d;                                                 \
        d = (T)1 / d;                                                                     \
        T delta = c * d;                                                                  \
        H[j] = H[j] * delta; C[j] = c; D[j] = d;                                          \
        if (FABSF(FMAF(c, d, (T)-1)) >= thr) unconv = 1;                                 \
      }                                                                                   \
    }                                                                                     \
    for (int64_t j = 0; j < n; j++) {                                                     \
      T a = aa[j], b = bb[j], x = xx[j];                                                  \
      T lsm = xlgamma##S(b) - xlgamma##S(a + b);                                          \
      T lab = xlgamma##S(a) + lsm;                                                        \
      T l1 = xlog1p##S(-x);                                                               \
      T f = a < (T)(2 * TINY) ? xexp##S(FMAF(l1, b, -lsm))                                \
                              : xexp##S(FMAF(xlog##S(x), a, l1 * b) - lab) / a;           \
      T r = H[j] * f;                                                                     \
      r = cr[j] != (T)0 ? r : (T)1 - r;                                                   \
      T a0 = A[j], b0 = B[j], x0 = X[j];                                                  \
      int az = a0 == (T)0 || b0 == (T)INFINITY, bz = b0 == (T)0 || a0 == (T)INFINITY;     \
      int xz = x0 == (T)0, xo = x0 == (T)1;                                               \
      int isn = a0 != a0 || b0 != b0 || x0 != x0;                                         \
      int rz = (bz && !xo) || (az && xz), ro = (az && !xz) || (bz && xo);                 \
      int rn = a0 < (T)0 || b0 < (T)0 || x0 < (T)0 || x0 > (T)1 || (az && bz) || isn;     \
      r = rz ? (T)0 : r; r = ro ? (T)1 : r;                                               \
      Y[j] = rn ? (T)NAN : r;                                                             \
    }                                                                                     \
    free(w);                                                                              \
    KILN_FTZ_OFF                                                                          \
  }

/* ---- Built in pieces. The text above is shared (macros, static inline functions and the
   data offset). The part after the mark is kiln.random's library; each eager kernel below
   it (one macro line per op and dtype) is built as a library of its own, with the shared
   text, the first time that op is needed on that dtype (kiln/random/_native.py): as one
   library this file took 5 s of gcc on an Intel Xeon, which every first eager tanh or
   random draw waited for. The file also compiles as one (the mark is a comment). */
/* @kiln-part */
/* Threefry-2x32 (20 rounds) of n contiguous counter pairs. Keys are scalars when
   kstride == 0, else contiguous per element. */
void kiln_threefry2x32(const uint32_t *k0, const uint32_t *k1, int64_t kstride,
                       const uint32_t *x0, const uint32_t *x1,
                       uint32_t *y0, uint32_t *y1, int64_t n) {
  if (kstride == 0) {
    const uint32_t a = k0[0], b = k1[0];
    for (int64_t i = 0; i < n; i++) tf(a, b, x0[i], x1[i], y0 + i, y1 + i);
  } else {
    for (int64_t i = 0; i < n; i++) tf(k0[i], k1[i], x0[i], x1[i], y0 + i, y1 + i);
  }
}
/* y = pow(a, b); an operand with stride 0 is a scalar. */
void kiln_pow_f32(const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = powf(a[i * sa], b[i * sb]);
}
void kiln_pow_f64(const double *a, int64_t sa, const double *b, int64_t sb, double *y,
                  int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = pow(a[i * sa], b[i * sb]);
}

/* y = fma(a, b, c); an operand with stride 0 is a scalar. */
void kiln_fma_f32(const float *a, int64_t sa, const float *b, int64_t sb, const float *c,
                  int64_t sc, float *y, int64_t n) {
  if (sa && !sb && !sc) {
    const float bb = b[0], cc = c[0];
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(a[i], bb, cc);
  } else {
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(a[i * sa], b[i * sb], c[i * sc]);
  }
}
void kiln_fma_f64(const double *a, int64_t sa, const double *b, int64_t sb, const double *c,
                  int64_t sc, double *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = fma(a[i * sa], b[i * sb], c[i * sc]);
}

int kiln_have_rsqrtps(void) {
#ifdef KILN_HAVE_RSQRTPS
  return 1;
#else
  return 0;
#endif
}

/* XLA's CPU rsqrt: the processor's estimate (rsqrtss for a float32 scalar, AVX-512's
   rsqrt14 for float64) refined by Newton steps (float32: KILN_RSQRT_STEPS32, one on AMD
   processors and two elsewhere, as XLA; float64: two)
       h = (x * r) * r - 1;  r = (r * -0.5) * h + r
   with both multiply-adds fused (XLA's LLVM contracts them). Below the smallest
   normal number (zero, negatives, subnormals) and at +inf the raw estimate is returned. */
void kiln_rsqrt_f32(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
#ifdef KILN_HAVE_RSQRTPS
    float e = _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x[i])));
    float r = e;
    for (int k = 0; k < KILN_RSQRT_STEPS32; k++)
      r = fmaf(r * -0.5f, fmaf(x[i] * r, r, -1.0f), r);
    y[i] = (x[i] < 1.17549435e-38f || x[i] == INFINITY) ? e : r;
#else
    y[i] = 1.0f / sqrtf(x[i]);
#endif
  }
}

int kiln_have_rsqrt14(void) {
#ifdef KILN_HAVE_RSQRTPS
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
#else
  return 0;
#endif
}

#ifdef KILN_HAVE_RSQRTPS
__attribute__((target("avx512f,avx512vl,fma")))
void kiln_rsqrt_f64(const double *x, double *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    /* XLA runs with denormals-are-zero: a subnormal input is a signed zero. */
    double xi = fabs(x[i]) < 2.2250738585072014e-308 ? copysign(0.0, x[i]) : x[i];
    double e = _mm_cvtsd_f64(_mm_rsqrt14_pd(_mm_set1_pd(xi)));
    double r = e;
    for (int k = 0; k < 2; k++) r = fma(r * -0.5, fma(x[i] * r, r, -1.0), r);
    y[i] = (x[i] < 2.2250738585072014e-308 || x[i] == INFINITY) ? e : r;
  }
}
#else
void kiln_rsqrt_f64(const double *x, double *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = 1.0 / sqrt(x[i]);
}
#endif
UNARY(kiln_log_f32, float, xlog32)
UNARY(kiln_log1p_f32, float, xlog1p32)
UNARY(kiln_exp_f32, float, xexp32)
UNARY(kiln_erf_inv_f32, float, xerfinv32)
UNARY(kiln_erf_f32, float, xerf32)
UNARY(kiln_log1p_f64, double, xlog1p64)
UNARY(kiln_exp_f64, double, xexp64)
UNARY(kiln_erf_inv_f64, double, xerfinv64)
UNARY(kiln_log_f64, double, xlog64)
UNARY(kiln_tan_f32, float, tanf)
UNARY(kiln_tan_f64, double, tan)
EAGER1(kiln_eager_exp_f32, float, xexp32)
EAGER1(kiln_eager_exp_f64, double, xexp64)
EAGER1(kiln_eager_expm1_f32, float, xexpm132)
EAGER1(kiln_eager_expm1_f64, double, xexpm164)
EAGER1(kiln_eager_log_f32, float, xlog32)
EAGER1(kiln_eager_log_f64, double, xlog64)
EAGER1(kiln_eager_log1p_f32, float, xlog1p32)
EAGER1(kiln_eager_log1p_f64, double, xlog1p64)
EAGER1(kiln_eager_sin_f32, float, sinf)
EAGER1(kiln_eager_sin_f64, double, sin)
EAGER1(kiln_eager_cos_f32, float, cosf)
EAGER1(kiln_eager_cos_f64, double, cos)
EAGER1(kiln_eager_tan_f32, float, tanf)
EAGER1(kiln_eager_tan_f64, double, tan)
EAGER1(kiln_eager_tanh_f32, float, xtanh32)
EAGER1(kiln_eager_tanh_f64, double, xtanh64)
EAGER1(kiln_eager_logistic_f32, float, xlogistic32)
EAGER1(kiln_eager_logistic_f64, double, xlogistic64)
EAGER1(kiln_eager_erf_f32, float, xerf32)
EAGER1(kiln_eager_erf_f64, double, xerf64)
EAGER_IPOW(kiln_eager_ipow_f32, float)
EAGER_IPOW(kiln_eager_ipow_f64, double)
EAGER2(kiln_eager_pow_f32, float, powf)
EAGER2(kiln_eager_pow_f64, double, pow)
EAGER2(kiln_eager_atan2_f32, float, atan2f)
EAGER2(kiln_eager_atan2_f64, double, atan2)
/* float rem: the C library's fmod, which XLA's CPU code calls (flushed as it runs). */
EAGER2(kiln_eager_rem_f32, float, fmodf)
EAGER2(kiln_eager_rem_f64, double, fmod)
/* XLA's CPU code calls the C library's cbrt (checked bit for bit against JAX); NumPy's
   np.cbrt is SVML's on AVX-512 machines and differs in the last bit. */
EAGER1(kiln_eager_cbrt_f32, float, cbrtf)
EAGER1(kiln_eager_cbrt_f64, double, cbrt)
EAGER1(kiln_eager_rsqrt_f32, float, xrsqrt32)
EAGER1(kiln_eager_rsqrt_f64, double, xrsqrt64)
/* asin ... atanh: XLA's expansions of the CHLO ops (xla_math.h). */
EAGER1(kiln_eager_asin_f32, float, xasin32)
EAGER1(kiln_eager_asin_f64, double, xasin64)
EAGER1(kiln_eager_acos_f32, float, xacos32)
EAGER1(kiln_eager_acos_f64, double, xacos64)
EAGER_ATAN(kiln_eager_atan_f32, float, atanf, xatan132, xatanp32)
EAGER_ATAN(kiln_eager_atan_f64, double, atan, xatan164, xatanp64)
EAGER1(kiln_eager_sinh_f32, float, xsinh32)
EAGER1(kiln_eager_sinh_f64, double, xsinh64)
EAGER1(kiln_eager_cosh_f32, float, xcosh32)
EAGER1(kiln_eager_cosh_f64, double, xcosh64)
EAGER_SCALAR_TAIL(kiln_eager_asinh_f32, xasinh32, xasinhs32, 15, 24)
EAGER_SCALAR_TAIL(kiln_eager_acosh_f32, xacosh32, xacoshs32, 18, 32)
EAGER1(kiln_eager_asinh_f64, double, xasinh64)
EAGER1(kiln_eager_acosh_f64, double, xacosh64)
EAGER1(kiln_eager_atanh_f32, float, xatanh32)
EAGER1(kiln_eager_atanh_f64, double, xatanh64)
EAGER1(kiln_eager_erfc_f32, float, xerfc32)
EAGER1(kiln_eager_erfc_f64, double, xerfc64)
EAGER1(kiln_eager_erf_inv_f32, float, xerfinv32)
EAGER1(kiln_eager_erf_inv_f64, double, xerfinv64)
EAGER1(kiln_eager_lgamma_f32, float, xlgamma32)
EAGER1(kiln_eager_lgamma_f64, double, xlgamma64)
EAGER1(kiln_eager_digamma_f32, float, xdigamma32)
EAGER1(kiln_eager_digamma_f64, double, xdigamma64)
EAGER1(kiln_eager_bessel_i0e_f32, float, xi0e32)
EAGER1(kiln_eager_bessel_i0e_f64, double, xi0e64)
EAGER1(kiln_eager_bessel_i1e_f32, float, xi1e32)
EAGER1(kiln_eager_bessel_i1e_f64, double, xi1e64)
/* XLA's expansions of the CHLO ops zeta(x, q) and polygamma(n, x) (xla_math.h). */
EAGER2(kiln_eager_zeta_f32, float, xzeta32)
EAGER2(kiln_eager_zeta_f64, double, xzeta64)
EAGER2(kiln_eager_polygamma_f32, float, xpolygamma32)
EAGER2(kiln_eager_polygamma_f64, double, xpolygamma64)
/* ... with one order n for the whole array (xla_math.h: XLA's scalar-order rewrites). */
EAGER2(kiln_eager_polygammas_f32, float, xpolygammas32)
EAGER2(kiln_eager_polygammas_f64, double, xpolygammas64)
/* JAX's igamma/igammac (xla_math.h). */
EAGER2(kiln_eager_igamma_f32, float, xigamma32)
EAGER2(kiln_eager_igamma_f64, double, xigamma64)
EAGER2(kiln_eager_igammac_f32, float, xigammac32)
EAGER2(kiln_eager_igammac_f64, double, xigammac64)
EAGER2(kiln_eager_igamma_grad_a_f32, float, xigammagrada32)
EAGER2(kiln_eager_igamma_grad_a_f64, double, xigammagrada64)
EAGER2(kiln_eager_random_gamma_grad_f32, float, xrandgammagrad32)
EAGER2(kiln_eager_random_gamma_grad_f64, double, xrandgammagrad64)
KILN_BETAINC(kiln_eager_betainc_f32, float, 32, 1.1920928955078125e-07, 1.17549435082228751e-38,
             200, fmaf, fabsf)
KILN_BETAINC(kiln_eager_betainc_f64, double, 64, 2.220446049250313e-16,
             2.2250738585072014e-308, 600, fma, fabs)
/* Complex ops with XLA's bits (xla_complex.h): z -> w over interleaved (re, im) parts. */
CEAGER_PASS(kiln_eager_cexp_f32, float, kc_cexp_pass32)
CEAGER_PASS(kiln_eager_cexp_f64, double, kc_cexp_pass64)
CEAGER_PASS(kiln_eager_clog_f32, float, kc_clog_pass32)
CEAGER1(kiln_eager_clog_f64, double, kc_clog64)
CEAGER1(kiln_eager_csqrt_f32, float, kc_csqrt32)
CEAGER1(kiln_eager_csqrt_f64, double, kc_csqrt64)
CEAGER1(kiln_eager_cexpm1_f32, float, kc_expm1c32)
CEAGER1(kiln_eager_cexpm1_f64, double, kc_expm1c64)
CEAGER1(kiln_eager_clog1p_f32, float, kc_clog1p32)
CEAGER1(kiln_eager_clog1p_f64, double, kc_clog1p64)
CEAGER1(kiln_eager_ctanh_f32, float, kc_ctanh32)
CEAGER_PASS(kiln_eager_ctanh_f64, double, kc_ctanh_pass64)
CEAGER1(kiln_eager_ctan_f32, float, kc_ctan32)
CEAGER1(kiln_eager_ctan_f64, double, kc_ctan64)
CEAGER1(kiln_eager_csin_f32, float, kc_csin32)
CEAGER1(kiln_eager_csin_f64, double, kc_csin64)
CEAGER1(kiln_eager_ccos_f32, float, kc_ccos32)
CEAGER1(kiln_eager_ccos_f64, double, kc_ccos64)
CEAGER1(kiln_eager_csinh_f32, float, kc_csinh32)
CEAGER1(kiln_eager_csinh_f64, double, kc_csinh64)
CEAGER1(kiln_eager_ccosh_f32, float, kc_ccosh32)
CEAGER1(kiln_eager_ccosh_f64, double, kc_ccosh64)
CEAGER1(kiln_eager_clogistic_f32, float, kc_logistic32)
CEAGER1(kiln_eager_clogistic_f64, double, kc_logistic64)
CEAGER1(kiln_eager_csign_f32, float, kc_sign32)
CEAGER1(kiln_eager_csign_f64, double, kc_sign64)
CEAGER1(kiln_eager_casin_f32, float, kc_casin32)
CEAGER1(kiln_eager_casin_f64, double, kc_casin64)
CEAGER1(kiln_eager_cacos_f32, float, kc_cacos32)
CEAGER1(kiln_eager_cacos_f64, double, kc_cacos64)
CEAGER1(kiln_eager_catan_f32, float, kc_catan32)
CEAGER1(kiln_eager_catan_f64, double, kc_catan64)
CEAGER1(kiln_eager_casinh_f32, float, kc_casinh32)
CEAGER1(kiln_eager_casinh_f64, double, kc_casinh64)
CEAGER1(kiln_eager_cacosh_f32, float, kc_cacosh32)
CEAGER1(kiln_eager_cacosh_f64, double, kc_cacosh64)
CEAGER1(kiln_eager_catanh_f32, float, kc_catanh32)
CEAGER1(kiln_eager_catanh_f64, double, kc_catanh64)
CEAGER_ABS(kiln_eager_cabs_f32, float, kc_abs32)
CEAGER2(kiln_eager_cmul_f32, float, kc_mul32, kc_no_fix32)
CEAGER2(kiln_eager_cdiv_f32, float, kc_div32, kc_div_fix32)
CEAGER_IPOW(kiln_eager_cipow_f32, float, kc_ipow32)
CEAGER_ABS(kiln_eager_cabs_f64, double, kc_abs64)
CEAGER2(kiln_eager_cmul_f64, double, kc_mul64, kc_no_fix64)
CEAGER2(kiln_eager_cdiv_f64, double, kc_div64, kc_div_fix64)
CEAGER_IPOW(kiln_eager_cipow_f64, double, kc_ipow64)
