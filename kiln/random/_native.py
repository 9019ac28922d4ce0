"""Optional native kernels for kiln.random, built with the system C compiler.

Two small C functions, compiled once per (source, compiler, flags, CPU) and cached
on disk by ``kiln.compiler.build.build`` (its checked cache, ``$KILN_CACHE_DIR/so``), loaded
with ``ctypes``:

* ``threefry2x32``: the Threefry-2x32 hash, vectorized by the C compiler. The
  NumPy implementation in ``_threefry`` computes the same bits; this one is faster.
* ``rsqrt_f32`` / ``rsqrt_f64``: XLA's CPU reciprocal square root: the processor's
  estimate (``rsqrtss``; AVX-512's ``rsqrt14`` for float64) refined by two Newton
  steps ``r = fma(r * -0.5, fma(x * r, r, -1), r)``. Its last bit depends on the
  processor, which is why it needs the instruction itself (x86 only); elsewhere the
  correctly rounded ``1 / sqrt(x)`` is used.

Everything here is optional: with no compiler, ``KILN_DISABLE_NATIVE=1``, or a failed
build, ``lib()`` returns None (once, with a warning) and callers use NumPy.
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings

import numpy as np

# The Threefry-2x32 block function (static, so the compiler can inline and vectorize it);
# the compiler's generated code includes it too (kiln/compiler/render/render_c.py).
THREEFRY_C = r"""static inline uint32_t rotl(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

#define ROUND(a, b, r) do { a += b; b = rotl(b, r); b ^= a; } while (0)

static inline void tf(uint32_t a, uint32_t b, uint32_t v0, uint32_t v1,
                      uint32_t *o0, uint32_t *o1) {
  uint32_t c = a ^ b ^ 0x1BD11BDAu;
  v0 += a; v1 += b;
  ROUND(v0, v1, 13); ROUND(v0, v1, 15); ROUND(v0, v1, 26); ROUND(v0, v1, 6);
  v0 += b; v1 += c + 1u;
  ROUND(v0, v1, 17); ROUND(v0, v1, 29); ROUND(v0, v1, 16); ROUND(v0, v1, 24);
  v0 += c; v1 += a + 2u;
  ROUND(v0, v1, 13); ROUND(v0, v1, 15); ROUND(v0, v1, 26); ROUND(v0, v1, 6);
  v0 += a; v1 += b + 3u;
  ROUND(v0, v1, 17); ROUND(v0, v1, 29); ROUND(v0, v1, 16); ROUND(v0, v1, 24);
  v0 += b; v1 += c + 4u;
  ROUND(v0, v1, 13); ROUND(v0, v1, 15); ROUND(v0, v1, 26); ROUND(v0, v1, 6);
  v0 += c; v1 += a + 5u;
  *o0 = v0; *o1 = v1;
}

"""

# XLA's CPU float math (log, log1p, exp, erf_inv, erf): static functions, shared with
# generated code. Needs <stdint.h> and <math.h> first.
XLA_MATH_C = r"""/* ---- XLA's CPU math (see _xla_math.py for the derivations); fmaf/fma are exact. ---- */
#include <float.h>
#include <string.h>

/* Selects as bit masks rather than `c ? a : b`: with Intel tunings gcc threads the
   jumps of chained conditionals into one many-way PHI that its if-conversion refuses,
   and the loops calling these functions stay scalar (4x slower). */
static inline float sel32(int c, float a, float b) {
  uint32_t ai, bi, m = (uint32_t)0 - (uint32_t)(c != 0);
  memcpy(&ai, &a, 4); memcpy(&bi, &b, 4);
  ai = (ai & m) | (bi & ~m);
  float r; memcpy(&r, &ai, 4); return r;
}
static inline double sel64(int c, double a, double b) {
  uint64_t ai, bi, m = (uint64_t)0 - (uint64_t)(c != 0);
  memcpy(&ai, &a, 8); memcpy(&bi, &b, 8);
  ai = (ai & m) | (bi & ~m);
  double r; memcpy(&r, &ai, 8); return r;
}
#define MINF(a, b) sel32((a) < (b), (a), (b))
#define MAXF(a, b) sel32((a) > (b), (a), (b))
static inline float ftz32(float x) { return sel32(fabsf(x) < FLT_MIN, x * 0.0f, x); }
static inline double ftz64(double x) { return sel64(fabs(x) < DBL_MIN, x * 0.0, x); }

static const float LOGP[9] = {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f,
  -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f, 2.0000714765e-1f,
  -2.4999993993e-1f, 3.3333331174e-1f};

static inline float xlog32(float x) {
  x = ftz32(x);
  float xs = MAXF(x, FLT_MIN);
  uint32_t bits; memcpy(&bits, &xs, 4);
  int32_t emm0 = (int32_t)(bits >> 23) - 0x7f;
  bits = (bits & 0x807FFFFFu) | 0x3F000000u;
  float t; memcpy(&t, &bits, 4);
  float e = 1.0f + (float)emm0;
  int mask = t < 0.707106781186547524f;
  float tmp1 = sel32(mask, t, 0.0f);
  t = t - 1.0f;
  e = e - sel32(mask, 1.0f, 0.0f);
  t = t + tmp1;
  float x2 = t * t, x3 = x2 * t;
  float y = fmaf(t, LOGP[0], LOGP[1]), y1 = fmaf(t, LOGP[3], LOGP[4]);
  float y2 = fmaf(t, LOGP[6], LOGP[7]);
  y = fmaf(y, t, LOGP[2]); y1 = fmaf(y1, t, LOGP[5]); y2 = fmaf(y2, t, LOGP[8]);
  y = fmaf(y, x3, y1); y = fmaf(y, x3, y2);
  float q1e = -2.12194440e-4f * e;
  y = fmaf(y, x3, q1e);
  float q2e = 0.693359375f * e;
  float r = (fmaf(-0.5f, x2, t) + y) + q2e;
  r = sel32(x > 0.0f, r, NAN);
  r = sel32(x == INFINITY, INFINITY, r);
  return sel32(x == 0.0f, -INFINITY, r);
}

static const double L1P_NUM[7] = {4.5270000862445199635215e-5, 4.9854102823193375972212e-1,
  6.5787325942061044846969e0, 2.9911919328553073277375e1, 6.0949667980987787057556e1,
  5.7112963590585538103336e1, 2.0039553499201281259648e1};
static const double L1P_DEN[7] = {1., 1.5062909083469192043167e1, 8.3047565967967209469434e1,
  2.2176239823732856465394e2, 3.0909872225312059774938e2, 2.1642788614495947685003e2,
  6.0118660497603843919306e1};

static inline float xlog1p32(float x) {
  x = ftz32(x);
  float large = xlog32(x + 1.0f);
  float x2 = x * x;
  float num = (float)L1P_NUM[0], den = (float)L1P_DEN[0];
  _Pragma("GCC unroll 32")
  for (int i = 1; i < 7; i++) { num = fmaf(num, x, (float)L1P_NUM[i]);
                                den = fmaf(den, x, (float)L1P_DEN[i]); }
  float small = (x * x2) * (num / den);
  small = fmaf(-0.5f, x2, small);
  small = x + small;
  return ftz32(sel32(fabsf(x) < 0.41421356237309504880f, small, large));
}

static double xlog64(double x) { return log(ftz64(x)); }

static double xlog1p64(double x) {
  x = ftz64(x);
  double large = xlog64(x + 1.0);
  double x2 = x * x;
  double num = L1P_NUM[0], den = L1P_DEN[0];
  _Pragma("GCC unroll 32")
  for (int i = 1; i < 7; i++) { num = fma(num, x, L1P_NUM[i]); den = fma(den, x, L1P_DEN[i]); }
  double small = (x * x2) * (num / den);
  small = fma(-0.5, x2, small);
  small = x + small;
  return ftz64(sel64(fabs(x) < 0.41421356237309504880, small, large));
}

static const float EXPP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
  4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

/* exp of x clamped to [-104, 88.8]; NaN not handled (xexp32 below). */
static inline float xexp32_clamped(float xc) {
  float n = floorf(fmaf(xc, 1.44269504088896341f, 0.5f));
  n = MINF(MAXF(n, -126.0f), 127.0f);
  float r = fmaf(-0.693359375f, n, xc);
  r = fmaf(2.12194440e-4f, n, r);
  float z = fmaf(r, EXPP[0], EXPP[1]);
  /* written out: an inner loop, even with an unroll pragma, stops gcc vectorizing
     the loops that call this */
  z = fmaf(z, r, EXPP[2]); z = fmaf(z, r, EXPP[3]);
  z = fmaf(z, r, EXPP[4]); z = fmaf(z, r, EXPP[5]);
  z = fmaf(z, r * r, r);
  z = 1.0f + z;
  uint32_t tb = (uint32_t)(((int32_t)n + 127) << 23);
  float two; memcpy(&two, &tb, 4);
  float out = z * two;
  return sel32(out < FLT_MIN, 0.0f, out);
}
static inline float xexp32(float x) {
  /* XLA flushes a denormal x to zero first; left out, since exp of a denormal (or of
     zero) comes out 1.0f either way: checked for all 2^32 inputs. 15% fewer
     instructions in exp-bound loops (logsumexp). */
  return sel32(x != x, x, xexp32_clamped(MINF(MAXF(x, -104.0f), 88.8f)));
}
/* xexp32 of an x known to be at most 88.8 and not NaN (exp(x - max(x)): the renderer
   checks it per row): the same bits, without the upper clamp and the NaN select. */
static inline float xexp32_fin(float x) { return xexp32_clamped(MAXF(x, -104.0f)); }

static double xexp64(double x0) {
  x0 = ftz64(x0);
  if (isnan(x0)) return x0;
  int zero = x0 < -745.1;
  double xc = x0 < 709.784 ? x0 : 709.784;
  double fx = floor(fma(1.4426950408889634073599, xc, 0.5));
  double r = fma(-fx, 0.693145751953125, xc);
  r = fma(-fx, 1.42860682030941723212e-6, r);
  double r2 = r * r;
  double px = fma(fma(1.26177193074810590878e-4, r2, 3.02994407707441961300e-2), r2,
                  9.99999999999999999910e-1) * r;
  double qx = fma(fma(fma(3.00198505138664455042e-6, r2, 2.52448340349684104192e-3), r2,
                      2.27265548208155028766e-1), r2, 2.00000000000000000009e0);
  r = fma(2.0, px / (qx - px), 1.0);
  double n = fx;
  if (n > 2000.0) n = 2000.0;
  if (n < -2000.0) n = -2000.0;
  double out = ldexp(r, (int)n);
  if (!(out >= x0)) out = (out > x0) ? out : x0;  /* max(out, x0) */
  if (zero) out = 0.0;
  return ftz64(out);
}

static const float EI_LT5[9] = {2.81022636e-08f, 3.43273939e-07f, -3.5233877e-06f,
  -4.39150654e-06f, 0.00021858087f, -0.00125372503f, -0.00417768164f, 0.246640727f,
  1.50140941f};
static const float EI_GT5[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
  -0.00367342844f, 0.00573950773f, -0.0076224613f, 0.00943887047f, 1.00167406f,
  2.83297682f};

static inline float xerfinv32(float x) {
  x = ftz32(x);
  float w = -xlog1p32(-(x * x));
  int lt = w < 5.0f;
  w = sel32(lt, w - 2.5f, sqrtf(w) - 3.0f);
  float p = sel32(lt, EI_LT5[0], EI_GT5[0]);
  _Pragma("GCC unroll 32")
  for (int i = 1; i < 9; i++) p = fmaf(p, w, sel32(lt, EI_LT5[i], EI_GT5[i]));
  float r = p * x;
  r = sel32(fabsf(x) == 1.0f, x * INFINITY, r);
  return ftz32(r);
}

static const double EIA[23] = {-3.6444120640178196996e-21, -1.685059138182016589e-19,
  1.2858480715256400167e-18, 1.115787767802518096e-17, -1.333171662854620906e-16,
  2.0972767875968561637e-17, 6.6376381343583238325e-15, -4.0545662729752068639e-14,
  -8.1519341976054721522e-14, 2.6335093153082322977e-12, -1.2975133253453532498e-11,
  -5.4154120542946279317e-11, 1.051212273321532285e-09, -4.1126339803469836976e-09,
  -2.9070369957882005086e-08, 4.2347877827932403518e-07, -1.3654692000834678645e-06,
  -1.3882523362786468719e-05, 0.0001867342080340571352, -0.00074070253416626697512,
  -0.0060336708714301490533, 0.24015818242558961693, 1.6536545626831027356};
static const double EIB[19] = {2.2137376921775787049e-09, 9.0756561938885390979e-08,
  -2.7517406297064545428e-07, 1.8239629214389227755e-08, 1.5027403968909827627e-06,
  -4.013867526981545969e-06, 2.9234449089955446044e-06, 1.2475304481671778723e-05,
  -4.7318229009055733981e-05, 6.8284851459573175448e-05, 2.4031110387097893999e-05,
  -0.0003550375203628474796, 0.00095328937973738049703, -0.0016882755560235047313,
  0.0024914420961078508066, -0.0037512085075692412107, 0.005370914553590063617,
  1.0052589676941592334, 3.0838856104922207635};
static const double EIC[17] = {-2.7109920616438573243e-11, -2.5556418169965252055e-10,
  1.5076572693500548083e-09, -3.7894654401267369937e-09, 7.6157012080783393804e-09,
  -1.4960026627149240478e-08, 2.9147953450901080826e-08, -6.7711997758452339498e-08,
  2.2900482228026654717e-07, -9.9298272942317002539e-07, 4.5260625972231537039e-06,
  -1.9681778105531670567e-05, 7.5995277030017761139e-05, -0.00021503011930044477347,
  -0.00013871931833623122026, 1.0103004648645343977, 4.8499064014085844221};

static double xerfinv64(double x) {
  x = ftz64(x);
  double w = -xlog1p64(-(x * x));
  int lt625 = w < 6.25, lt16 = w < 16.0;
  double sw = sqrt(w);
  w = lt625 ? w - 3.125 : sw - (lt16 ? 3.25 : 5.0);
#define COEF(i) (lt625 ? EIA[i] : (lt16 ? EIB[i] : EIC[i]))
  double p = COEF(0);
  _Pragma("GCC unroll 32")
  for (int i = 1; i < 17; i++) p = fma(p, w, COEF(i));
#undef COEF
  _Pragma("GCC unroll 32")
  for (int i = 17; i < 19; i++) if (lt16) p = fma(p, w, lt625 ? EIA[i] : EIB[i]);
  _Pragma("GCC unroll 32")
  for (int i = 19; i < 23; i++) if (lt625) p = fma(p, w, EIA[i]);
  double r = p * x;
  if (fabs(x) == 1.0) r = x * INFINITY;
  return ftz64(r);
}

static const float ERFA[5] = {0.00022905065861350646f, 0.0034082910107109506f,
  0.050955695062380861f, 0.18520832239976145f, 1.128379143519084f};
static const float ERFB[7] = {-1.1791602954361697e-7f, 0.000023547966471313185f,
  0.0010179625278914885f, 0.014070470171167667f, 0.11098505178285362f,
  0.49746925110067538f, 1.0f};

static inline float xerf32(float x) {
  x = ftz32(x);
  float x2 = MINF(16.0f, x * x);
  float p = ERFA[0], q = ERFB[0];
  _Pragma("GCC unroll 32")
  for (int i = 1; i < 5; i++) p = fmaf(p, x2, ERFA[i]);
  _Pragma("GCC unroll 32")
  for (int i = 1; i < 7; i++) q = fmaf(q, x2, ERFB[i]);
  float r = (x * p) / q;
  float sgn = sel32(x > 0, 1.0f, sel32(x < 0, -1.0f, 0.0f));
  r = sel32(fabsf(x) > 3.832506856900711f, sgn, r);
  return ftz32(r);
}


/* tanh as XLA's CPU backend computes it: a rational function of x (odd numerator of
   degree 13 over an even denominator of degree 6 in float32; 19 over 18 in float64)
   evaluated by fused Horner steps on x clamped where the quotient reaches +-1.
   float32 returns x itself below |x| < 4e-4; float64 returns +-1 from |x| >= 20. */
static inline float xtanh32(float x) {
  const float lim = 7.99881172180175781f;
  float c = sel32(x < -lim, -lim, x);
  c = sel32(c > lim, lim, c);
  float s = c * c;
  float p = fmaf(s, -2.76076847742355e-16f, 2.00018790482477e-13f);
  p = fmaf(s, p, -8.60467152213735e-11f);
  p = fmaf(s, p, 5.12229709037114e-08f);
  p = fmaf(s, p, 1.48572235717979e-05f);
  p = fmaf(s, p, 6.37261928875436e-04f);
  p = fmaf(s, p, 4.89352455891786e-03f);
  float q = fmaf(s, 1.19825839466702e-06f, 1.18534705686654e-04f);
  q = fmaf(s, q, 2.26843463243900e-03f);
  q = fmaf(s, q, 4.89352518554385e-03f);
  float r = (c * p) / q;
  return sel32(fabsf(x) < 0.0004f, x, r);
}

static inline double xtanh64(double x) {
  const double lim = 17.714196154005176;
  x = ftz64(x);                       /* XLA's denormals-are-zero: tanh(subnormal) = +-0 */
  double c = sel64(x < -lim, -lim, x);
  c = sel64(c > lim, lim, c);
  double s = c * c;
  double p = fma(s, 2.6158007860482230e-23, 7.6534862268749319e-19);
  p = fma(s, p, 3.1309488231386680e-15);
  p = fma(s, p, 4.2303918148209176e-12);
  p = fma(s, p, 2.4618379131293676e-09);
  p = fma(s, p, 6.8644367682497074e-07);
  p = fma(s, p, 9.3839087674268880e-05);
  p = fma(s, p, 5.9809711724441161e-03);
  p = fma(s, p, 1.5184719640284322e-01);
  p = fma(s, p, 1.0);
  double q = fma(s, 6.463747022670968018e-21, 5.782506856739003571e-17);
  q = fma(s, q, 1.293019623712687916e-13);
  q = fma(s, q, 1.123643448069621992e-10);
  q = fma(s, q, 4.492975677839633985e-08);
  q = fma(s, q, 8.785185266237658698e-06);
  q = fma(s, q, 8.295161192716231542e-04);
  q = fma(s, q, 3.437448108450402717e-02);
  q = fma(s, q, 4.851805297361760360e-01);
  q = fma(s, q, 1.0);
  double r = (c * p) / q;
  return sel64(fabs(x) >= 20.0, copysign(1.0, x), r);
}

/* float64 erf is the C library's, on an input flushed as XLA's CPU code reads it. */
static inline double xerf64(double x) { return erf(ftz64(x)); }

/* expm1 as XLA's CPU backend expands it: tanh(x/2) * (exp(x) + 1) for |x| <= 0.5 (no
   cancellation there), exp(x) - 1 above, and x itself when x/2 flushes to zero. */
static inline float xexpm132(float x) {
  float h = ftz32(x * 0.5f);
  float e = xexp32(x);
  float r = sel32(fabsf(x) > 0.5f, e - 1.0f, xtanh32(h) * (e + 1.0f));
  return sel32(h == 0.0f, x, r);
}

static inline double xexpm164(double x) {
  double h = ftz64(x * 0.5);
  double e = xexp64(x);
  double r = sel64(fabs(x) > 0.5, e - 1.0, xtanh64(h) * (e + 1.0));
  return sel64(h == 0.0, x, r);
}
"""

_SOURCE = r"""
#include <stdint.h>
#include <math.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KILN_HAVE_RSQRTPS 1
#endif

""" + THREEFRY_C + r"""/* Threefry-2x32 (20 rounds) of n contiguous counter pairs. Keys are scalars when
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

""" + XLA_MATH_C + r"""#define UNARY(name, T, fn) \
  void name(const T *x, T *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = fn(x[i]); }
UNARY(kiln_log_f32, float, xlog32)
UNARY(kiln_log1p_f32, float, xlog1p32)
UNARY(kiln_exp_f32, float, xexp32)
UNARY(kiln_erf_inv_f32, float, xerfinv32)
UNARY(kiln_erf_f32, float, xerf32)
UNARY(kiln_log1p_f64, double, xlog1p64)
UNARY(kiln_exp_f64, double, xexp64)
UNARY(kiln_erf_inv_f64, double, xerfinv64)
UNARY(kiln_log_f64, double, xlog64)
/* XLA's CPU code calls the C library for these (JAX's tan, pow and float64 log are
   glibc's, bit for bit); NumPy's SIMD versions differ in the last bit. */
UNARY(kiln_tan_f32, float, tanf)
UNARY(kiln_tan_f64, double, tan)

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
EAGER_IPOW(kiln_eager_ipow_f32, float)
EAGER_IPOW(kiln_eager_ipow_f64, double)

/* y = pow(a, b) under XLA's flushing; an operand with stride 0 is a scalar. */
void kiln_eager_pow_f32(const float *a, int64_t sa, const float *b, int64_t sb, float *y,
                        int64_t n) {
  KILN_FTZ_ON for (int64_t i = 0; i < n; i++) y[i] = powf(a[i * sa], b[i * sb]); KILN_FTZ_OFF
}
void kiln_eager_pow_f64(const double *a, int64_t sa, const double *b, int64_t sb, double *y,
                        int64_t n) {
  KILN_FTZ_ON for (int64_t i = 0; i < n; i++) y[i] = pow(a[i * sa], b[i * sb]); KILN_FTZ_OFF
}
void kiln_eager_pow_f32_obj(const void *ao, int64_t sa, const void *bo, int64_t sb,
                            const void *yo, int64_t n) {
  kiln_eager_pow_f32((const float *)kiln_array_data(ao), sa,
                     (const float *)kiln_array_data(bo), sb, (float *)kiln_array_data(yo), n);
}
void kiln_eager_pow_f64_obj(const void *ao, int64_t sa, const void *bo, int64_t sb,
                            const void *yo, int64_t n) {
  kiln_eager_pow_f64((const double *)kiln_array_data(ao), sa,
                     (const double *)kiln_array_data(bo), sb, (double *)kiln_array_data(yo), n);
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
   rsqrt14 for float64) refined by two Newton steps
       h = (x * r) * r - 1;  r = (r * -0.5) * h + r
   with both multiply-adds fused (XLA's LLVM contracts them). Below the smallest
   normal number (zero, negatives, subnormals) and at +inf the raw estimate is returned. */
void kiln_rsqrt_f32(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
#ifdef KILN_HAVE_RSQRTPS
    float e = _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x[i])));
    float r = e;
    for (int k = 0; k < 2; k++) r = fmaf(r * -0.5f, fmaf(x[i] * r, r, -1.0f), r);
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
"""

UNARY_FUNCS = ("kiln_log_f32", "kiln_log1p_f32", "kiln_exp_f32", "kiln_erf_inv_f32",
               "kiln_erf_f32", "kiln_log1p_f64", "kiln_exp_f64", "kiln_erf_inv_f64",
               "kiln_log_f64", "kiln_tan_f32", "kiln_tan_f64")

#: The eager-math ops with JAX's bits (``kiln_eager_<op>_<f32|f64>``, x -> y, n).
EAGER_UNARY = ("exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "logistic", "erf")

_lock = threading.Lock()
_state: dict = {}


def _cpu_id() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
        return "\n".join(lines[:2])
    except OSError:
        import platform
        return platform.processor()


def _build():
    if os.environ.get("KILN_DISABLE_NATIVE", "").lower() in ("1", "true", "yes"):
        return None
    # Imported here, on the first use of the kernels: ``import kiln`` need not pay for them.
    import platform

    from kiln.compiler.build import build

    flags = ["-O3", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno",
             "-fno-trapping-math"]
    if platform.machine() in ("x86_64", "AMD64", "i686", "i386"):
        flags += ["-mavx2", "-mfma"] if "avx2" in _cpu_id() and " fma" in _cpu_id() else []
    # Built and cached by kiln's compiler (kiln.compiler.build.build): its cache checks who
    # owns every directory and file and hashes what it loads; a fault of the machine
    # (no compiler, a failing one, an unusable cache) means the NumPy implementations.
    try:
        lib = build.load_library(_SOURCE, flags=flags, name="kiln_random")
    except build.CompilerNotFound:
        return None
    except (build.BuildError, OSError) as e:
        warnings.warn("kiln.random: building the native kernels failed; using the NumPy "
                      f"implementations.\n{str(e)[-2000:]}", RuntimeWarning, stacklevel=3)
        return None
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    lib.kiln_threefry2x32.argtypes = [p, p, i64, p, p, p, p, i64]
    lib.kiln_threefry2x32.restype = None
    lib.kiln_rsqrt_f32.argtypes = [p, p, i64]
    lib.kiln_rsqrt_f32.restype = None
    lib.kiln_have_rsqrtps.restype = ctypes.c_int
    lib.kiln_rsqrt_f64.argtypes = [p, p, i64]
    lib.kiln_rsqrt_f64.restype = None
    lib.kiln_have_rsqrt14.restype = ctypes.c_int
    for name in UNARY_FUNCS:
        fn = getattr(lib, name)
        fn.argtypes = [p, p, i64]
        fn.restype = None
    for op in EAGER_UNARY:
        for w in ("f32", "f64"):
            for suffix in ("", "_obj"):
                fn = getattr(lib, f"kiln_eager_{op}_{w}{suffix}")
                fn.argtypes = [p, p, i64]
                fn.restype = None
    for w in ("f32", "f64"):
        for suffix in ("", "_obj"):
            fn = getattr(lib, f"kiln_eager_ipow_{w}{suffix}")
            fn.argtypes = [p, p, i64, i64]
            fn.restype = None
    lib.kiln_array_data.argtypes = [p]
    lib.kiln_array_data.restype = p
    lib.kiln_set_data_offset.argtypes = [i64]
    lib.kiln_set_data_offset.restype = None
    for name in ("kiln_pow_f32", "kiln_pow_f64", "kiln_eager_pow_f32", "kiln_eager_pow_f64",
                 "kiln_eager_pow_f32_obj", "kiln_eager_pow_f64_obj"):
        fn = getattr(lib, name)
        fn.argtypes = [p, i64, p, i64, p, i64]
        fn.restype = None
    for name in ("kiln_fma_f32", "kiln_fma_f64"):
        fn = getattr(lib, name)
        fn.argtypes = [p, i64, p, i64, p, i64, p, i64]
        fn.restype = None
    return lib


def lib():
    """The loaded native library, or None."""
    if "lib" not in _state:
        with _lock:
            if "lib" not in _state:
                try:
                    _state["lib"] = _build()
                except Exception as e:  # any failure: fall back to NumPy
                    warnings.warn(f"kiln.random: native kernels unavailable ({e}); using "
                                  "NumPy.", RuntimeWarning, stacklevel=2)
                    _state["lib"] = None
    return _state["lib"]


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def threefry2x32(k0, k1, x0, x1, y0, y1):
    """Hash contiguous uint32 ``x0``/``x1`` (length n) into ``y0``/``y1``. Keys are 0-d
    or contiguous of length n. Releases the GIL while it runs."""
    n = y0.size
    ks = 0 if k0.ndim == 0 else 1
    lib().kiln_threefry2x32(_ptr(k0), _ptr(k1), ks, _ptr(x0), _ptr(x1), _ptr(y0), _ptr(y1), n)


_CHUNK = 1 << 16


def _spans(n):
    from kiln.random._threefry import _THREADS
    k = _THREADS if n >= 4 * _CHUNK else 1
    step = -(-n // k)
    return [(s, min(s + step, n)) for s in range(0, n, step)] if n else []


def _parallel(fn, n):
    spans = _spans(n)
    if len(spans) <= 1:
        for s, e in spans:
            fn(s, e)
        return
    from kiln.random._threefry import _get_pool
    list(_get_pool().map(lambda se: fn(*se), spans))


def unary(name, x):
    """Apply the native elementwise function ``name`` (float32 or float64) to ``x``."""
    f = getattr(lib(), name)
    dt = np.float64 if name.endswith("f64") else np.float32
    x = np.ascontiguousarray(x, dt)
    flat = x.reshape(-1)
    y = np.empty_like(flat)
    isz = flat.itemsize

    def run(s, e):
        f(ctypes.c_void_p(flat.ctypes.data + s * isz), ctypes.c_void_p(y.ctypes.data + s * isz),
          e - s)
    _parallel(run, flat.size)
    return y.reshape(x.shape)


def fma(a, b, c, dt):
    """Exact ``a * b + c`` (float32 or float64 ``dt``), operands broadcast."""
    dt = np.dtype(dt)
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c))
    n = int(np.prod(shape, dtype=np.int64))
    ops = []
    for v in (a, b, c):
        v = np.asarray(v, dt)
        if v.size == 1:
            ops.append((np.ascontiguousarray(v.reshape(1)), 0))
        else:
            ops.append((np.ascontiguousarray(np.broadcast_to(v, shape)).reshape(-1), 1))
    y = np.empty(n, dt)
    f = lib().kiln_fma_f64 if dt == np.float64 else lib().kiln_fma_f32
    isz = dt.itemsize

    def run(s, e):
        args = []
        for o, st in ops:
            args += [ctypes.c_void_p(o.ctypes.data + s * isz * st), st]
        f(*args, ctypes.c_void_p(y.ctypes.data + s * isz), e - s)
    _parallel(run, n)
    return y.reshape(shape)


def power(a, b, dt):
    """The C library's ``pow(a, b)`` (float32 or float64 ``dt``), operands broadcast."""
    dt = np.dtype(dt)
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    n = int(np.prod(shape, dtype=np.int64))
    ops = []
    for v in (a, b):
        v = np.asarray(v, dt)
        if v.size == 1:
            ops.append((np.ascontiguousarray(v.reshape(1)), 0))
        else:
            ops.append((np.ascontiguousarray(np.broadcast_to(v, shape)).reshape(-1), 1))
    y = np.empty(n, dt)
    f = lib().kiln_pow_f64 if dt == np.float64 else lib().kiln_pow_f32
    isz = dt.itemsize

    def run(s, e):
        args = []
        for o, st in ops:
            args += [ctypes.c_void_p(o.ctypes.data + s * isz * st), st]
        f(*args, ctypes.c_void_p(y.ctypes.data + s * isz), e - s)
    _parallel(run, n)
    return y.reshape(shape)


def rsqrt_f32(x):
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    lib().kiln_rsqrt_f32(_ptr(x), _ptr(y), x.size)
    return y


def rsqrt_f64(x):
    x = np.ascontiguousarray(x, np.float64)
    y = np.empty_like(x)
    lib().kiln_rsqrt_f64(_ptr(x), _ptr(y), x.size)
    return y


def has_rsqrt14() -> bool:
    """Whether XLA's float64 rsqrt (AVX-512's ``rsqrt14`` estimate) can be reproduced."""
    lb = lib()
    return lb is not None and bool(lb.kiln_have_rsqrt14())


def has_rsqrt_estimate() -> bool:
    lb = lib()
    return lb is not None and bool(lb.kiln_have_rsqrtps())


def _install() -> None:
    """lax's eager XLA-math impls run this module's kernels (lax sits below kiln.random)."""
    import sys

    from kiln.lax._xla_eager import set_native
    set_native(sys.modules[__name__])


_install()
