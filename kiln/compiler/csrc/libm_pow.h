/* ---- float32 pow with the C library's bits, vectorizable (pow_math.py). ---- */
/* KPOW_MA(a, b, c): a * b + c as the C library computes it, fused (glibc's FMA build)
   or rounded twice ("#define KPOW_MA(a, b, c) ((a) * (b) + (c))" first). */
#ifndef KPOW_MA
#define KPOW_MA(a, b, c) fma(a, b, c)
#endif
/* log2 of the mantissa: 16 intervals of [0x3f330000, 2 * 0x3f330000), each with an
   approximate reciprocal of its centre and the log2 of that centre. */
static const uint64_t KPOW_INVC[16] = {
  0x3ff661ec79f8f3beull, 0x3ff571ed4aaf883dull, 0x3ff49539f0f010b0ull, 0x3ff3c995b0b80385ull,
  0x3ff30d190c8864a5ull, 0x3ff25e227b0b8ea0ull, 0x3ff1bb4a4a1a343full, 0x3ff12358f08ae5baull,
  0x3ff0953f419900a7ull, 0x3ff0000000000000ull, 0x3fee608cfd9a47acull, 0x3feca4b31f026aa0ull,
  0x3feb2036576afce6ull, 0x3fe9c2d163a1aa2dull, 0x3fe886e6037841edull, 0x3fe767dcf5534862ull};
static const uint64_t KPOW_LOGC[16] = {
  0xbfdefec65b963019ull, 0xbfdb0b6832d4fca4ull, 0xbfd7418b0a1fb77bull, 0xbfd39de91a6dcf7bull,
  0xbfd01d9bf3f2b631ull, 0xbfc97c1d1b3b7af0ull, 0xbfc2f9e393af3c9full, 0xbfb960cbbf788d5cull,
  0xbfaa6f9db6475fceull, 0x0000000000000000ull, 0x3fb338ca9f24f53dull, 0x3fc476a9543891baull,
  0x3fce840b4ac4e4d2ull, 0x3fd40645f0c6651cull, 0x3fd88e9c2c1b9ff8ull, 0x3fdce0a44eb17bccull};
/* log1p(r) / ln 2 ~ r * (P4 + r * (P3 + r * (P2 + r * (P1 + r * P0)))) */
static const double KPOW_P[5] = {0x1.27616c9496e0bp-2, -0x1.71969a075c67ap-2,
  0x1.ec70a6ca7baddp-2, -0x1.7154748bef6c8p-1, 0x1.71547652ab82bp0};
/* 2^(i/32) as double bits, less i << 47 (the exponent the caller adds back). */
static const uint64_t KPOW_EXP2[32] = {
  0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
  0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
  0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
  0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
  0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
  0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
  0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
  0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull};
/* 2^r ~ 1 + r * (E2 + r * (E1 + r * E0)) on [-1/64, 1/64] */
static const double KPOW_E[3] = {0x1.c6af84b912394p-5, 0x1.ebfce50fac4f3p-3,
  0x1.62e42ff0c52d6p-1};

static inline double kpow_d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static inline uint64_t kpow_u(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
static inline float kpow_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t kpow_w(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
/* Masks: all-ones where a < b (both far inside int64's range); selects by them. */
static inline uint64_t kpow_lt(int64_t a, int64_t b) { return (uint64_t)((a - b) >> 63); }
static inline uint64_t kpow_sel(uint64_t m, uint64_t a, uint64_t b) {
  return (a & m) | (b & ~m);
}
static inline uint32_t kpow_sel32(uint32_t m, uint32_t a, uint32_t b) {
  return (a & m) | (b & ~m);
}
/* tab[i & 3], tab[i & 15], tab[i & 31] by trees of selects on i's bits: gcc vectorizes
   no table load here (this tuning makes no gathers; its emulated ones are scalar loads
   and inserts). */
static inline uint64_t kpow_pick4(uint64_t i, const uint64_t *t) {
  uint64_t m0 = (uint64_t)0 - (i & 1), m1 = (uint64_t)0 - ((i >> 1) & 1);
  return kpow_sel(m1, kpow_sel(m0, t[3], t[2]), kpow_sel(m0, t[1], t[0]));
}
static inline uint64_t kpow_pick16(uint64_t i, const uint64_t *t) {
  uint64_t q[4] = {kpow_pick4(i, t), kpow_pick4(i, t + 4), kpow_pick4(i, t + 8),
                   kpow_pick4(i, t + 12)};
  return kpow_pick4(i >> 2, q);
}
static inline uint64_t kpow_pick32(uint64_t i, const uint64_t *t) {
  return kpow_sel((uint64_t)0 - ((i >> 4) & 1), kpow_pick16(i, t + 16), kpow_pick16(i, t));
}

/* The table index of |x|'s mantissa (x subnormal: normalized by a float multiply by 2^23,
   which DAZ reads as zero, as the library's does); and |x| so normalized. */
static inline uint32_t kpow_norm(float x) {
  uint32_t ax = kpow_w(x) & 0x7fffffffu;
  uint32_t xs = (kpow_w(x * 0x1p23f) & 0x7fffffffu) - (23u << 23);
  return kpow_sel32((uint32_t)kpow_lt((int64_t)ax, 0x00800000), xs, ax);
}
static inline uint64_t kpow_index(float x) {
  return (uint64_t)(((kpow_norm(x) - 0x3f330000u) >> 19) & 15u);
}

/* y * log2|x| in double: log2|x| = k + log2(c) + log1p(z / c - 1) / ln 2, 1 / c and
   log2(c) the table's entries (bits) at kpow_index(x). */
__attribute__((always_inline)) static inline double kpow_ylog(float x, float y,
                                                              uint64_t invc, uint64_t logc) {
  uint32_t iu = kpow_norm(x);
  uint32_t top = (iu - 0x3f330000u) & 0xff800000u;
  double z = (double)kpow_f(iu - top);
  double k = (double)((int32_t)top >> 23);
  double r = KPOW_MA(z, kpow_d(invc), -1.0);
  double y0 = kpow_d(logc) + k;
  double r2 = r * r;
  double a = KPOW_MA(KPOW_P[0], r, KPOW_P[1]);
  double p = KPOW_MA(KPOW_P[2], r, KPOW_P[3]);
  double r4 = r2 * r2;
  double q = KPOW_MA(KPOW_P[4], r, y0);
  q = KPOW_MA(p, r2, q);
  double lg = KPOW_MA(a, r4, q);
  return (double)y * lg;
}

/* 2^t = 2^(n/32) 2^d (n = round(32 t), |d| <= 1/64): kpow_shift(t)'s low 5 bits index
   the table, whose entry (bits) is tab. */
static inline uint64_t kpow_shift(double t) { return kpow_u(t + 0x1.8p+47); }

/* x^y from t = y * log2|x| (kpow_ylog) and the 2^(n/32) table's entry; every lane
   computes the main path, then the special cases are selected over it. */
__attribute__((always_inline)) static inline float kpow_finish(float x, float y, double t,
                                                               uint64_t tab) {
  uint32_t ix = kpow_w(x), iy = kpow_w(y);
  uint32_t ax = ix & 0x7fffffffu, ay = iy & 0x7fffffffu;
  /* y an integer: odd where its lowest integer bit is set and no fraction bit is */
  uint32_t ey = (iy >> 23) & 0xffu;
  int64_t ey64 = (int64_t)ey;
  uint32_t sh = (uint32_t)((0x96 - ey64) & 31);
  uint32_t inrange = (uint32_t)(~kpow_lt(ey64, 0x7f) & kpow_lt(ey64, 0x97));
  uint32_t frac = iy & ((1u << sh) - 1u), bit = (iy >> sh) & 1u;
  uint32_t fracm = (uint32_t)kpow_lt(0, (int64_t)frac);       /* frac != 0 */
  uint32_t notint = (uint32_t)kpow_lt(ey64, 0x7f) | (inrange & fracm);
  uint32_t odd = inrange & ~fracm & (0u - bit);
  uint32_t xneg = 0u - (ix >> 31);
  uint32_t flip = xneg & odd;                 /* the result's sign: x < 0, y odd */
  uint64_t ki = kpow_shift(t);
  double kd = kpow_d(ki) - 0x1.8p+47;
  double d = t - kd;
  double s = kpow_d(tab + (ki << 47));
  double e = KPOW_MA(KPOW_E[0], d, KPOW_E[1]);
  double d2 = d * d;
  double v = KPOW_MA(KPOW_E[2], d, 1.0);
  v = KPOW_MA(e, d2, v);
  float m = (float)(v * s);
  /* |x^y| out of float's range: inf, zero, or (t below -149) the library's
     0x1.4p-75f * 0x1.4p-75f: the least subnormal, zero when flushed */
  uint32_t over = (uint32_t)(0u - (uint32_t)(t > 0x1.fffffffd1d571p+6));
  uint32_t under = (uint32_t)(0u - (uint32_t)(t <= -150.0));
  uint32_t least = (uint32_t)(0u - (uint32_t)(t < -149.0));
  float tiny = (float)kpow_d(kpow_sel(0u - (uint64_t)(least & 1u), 0x3698000000000000ull,
                                      kpow_u(v * s)));
  uint32_t im = kpow_w(sel32(least & 1u, tiny, m));
  im = kpow_sel32(under, 0u, kpow_sel32(over, 0x7f800000u, im));
  im ^= flip & 0x80000000u;
  /* x < 0 finite, y not an integer: the default NaN */
  im = kpow_sel32(xneg & notint, 0xffc00000u, im);
  /* x zero, infinite or NaN (y finite, nonzero): x * x, negated for y odd, inverted
     for y < 0 */
  uint32_t xnan = (uint32_t)kpow_lt(0x7f800000, (int64_t)ax);
  uint32_t xzero = (uint32_t)kpow_lt((int64_t)ax - 1, 0);
  uint32_t xinf = (uint32_t)(0u - (uint32_t)(ax == 0x7f800000u));
  uint32_t yneg = 0u - (iy >> 31);
  uint32_t zi = kpow_sel32(xzero ^ yneg, 0u, 0x7f800000u) ^ (flip & 0x80000000u);
  zi = kpow_sel32(xnan, (ix | 0x00400000u) ^ (flip & 0x80000000u), zi);
  im = kpow_sel32(xnan | xzero | xinf, zi, im);
  /* y zero, infinite or NaN */
  uint32_t ynan = (uint32_t)kpow_lt(0x7f800000, (int64_t)ay);
  uint32_t yzero = (uint32_t)kpow_lt((int64_t)ay - 1, 0);
  uint32_t yinf = (uint32_t)(0u - (uint32_t)(ay == 0x7f800000u));
  uint32_t xsnan = xnan & ~(0u - ((ix >> 22) & 1u));
  uint32_t ysnan = ynan & ~(0u - ((iy >> 22) & 1u));
  uint32_t one = (uint32_t)(0u - (uint32_t)(ix == 0x3f800000u));
  uint32_t nan = kpow_sel32(xnan, ix, iy) | 0x00400000u;     /* x + y: x's NaN first */
  uint32_t small = (uint32_t)kpow_lt((int64_t)ax, 0x3f800000);
  uint32_t yi = kpow_sel32((small ^ yneg) & ~(uint32_t)(0u - (uint32_t)(ax == 0x3f800000u)),
                           0u, 0x7f800000u);                /* y infinite */
  yi = kpow_sel32(ax == 0x3f800000u ? 0xffffffffu : 0u, 0x3f800000u, yi);
  yi = kpow_sel32(xnan | ynan, nan, yi);
  yi = kpow_sel32(one, kpow_sel32(ysnan, nan, 0x3f800000u), yi);
  yi = kpow_sel32(yzero, kpow_sel32(xsnan, nan, 0x3f800000u), yi);
  im = kpow_sel32(yzero | yinf | ynan, yi, im);
  return kpow_f(im);
}

/* Branch-free over everything, the tables read by select trees. */
__attribute__((always_inline)) static inline float kpow32_any(float x, float y) {
  uint64_t i = kpow_index(x);
  double t = kpow_ylog(x, y, kpow_pick16(i, KPOW_INVC), kpow_pick16(i, KPOW_LOGC));
  return kpow_finish(x, y, t, kpow_pick32(kpow_shift(t), KPOW_EXP2));
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8 && defined(__x86_64__) \
    && !defined(KPOW_INLINE)
/* gcc on x86-64: kpow32 is a declared SIMD function (the x86 vector function ABI, as
   libmvec's): a vectorized loop calls a clone on 4, 8 or 16 lanes. The 16-lane clone
   (AVX-512) reads the tables by permutes (__builtin_shuffle of two 8-lane vectors:
   vpermt2q), between three lane loops; the others run kpow32_any on each lane. The scalar
   symbol (a loop's remainder, a loop that did not vectorize) is the C library's powf.
   Weak and hidden, asm labels: as libm_trig.h's clones. */
__attribute__((simd("notinbranch"), const, nothrow, visibility("hidden")))
float kpow32(float x, float y);
__attribute__((weak, visibility("hidden"))) float kpow_scalar(float x, float y) __asm__("kpow32");
__attribute__((weak, visibility("hidden"))) float kpow_scalar(float x, float y) {
  return powf(x, y);
}
typedef uint64_t kpow_v8u __attribute__((vector_size(64)));
/* out[j] = tab[idx[j] & 15] (and & 31 for kpow_perm32), j < 8. */
__attribute__((always_inline, target("avx512f"))) static inline void kpow_perm16(
    const uint64_t *tab, const uint64_t *idx, uint64_t *out) {
  kpow_v8u lo, hi, i;
  memcpy(&lo, tab, 64); memcpy(&hi, tab + 8, 64); memcpy(&i, idx, 64);
  kpow_v8u r = __builtin_shuffle(lo, hi, i & 15);
  memcpy(out, &r, 64);
}
__attribute__((always_inline, target("avx512f"))) static inline void kpow_perm32(
    const uint64_t *tab, const uint64_t *idx, uint64_t *out) {
  kpow_v8u a, b, i;
  kpow_perm16(tab, idx, (uint64_t *)&a);
  kpow_perm16(tab + 16, idx, (uint64_t *)&b);
  memcpy(&i, idx, 64);
  kpow_v8u m = (kpow_v8u){0} - ((i >> 4) & 1);
  kpow_v8u r = (b & m) | (a & ~m);
  memcpy(out, &r, 64);
}
typedef float kpow_v16 __attribute__((vector_size(64)));
__attribute__((weak, visibility("hidden"), target("avx512f")))
kpow_v16 kpow_clone_e(kpow_v16 x, kpow_v16 y) __asm__("_ZGVeN16vv_kpow32");
__attribute__((weak, visibility("hidden"), target("avx512f")))
kpow_v16 kpow_clone_e(kpow_v16 x, kpow_v16 y) {
  float a[16], b[16], o[16];
  uint64_t i[16], c[16], l[16], n[16];
  double t[16];
  memcpy(a, &x, sizeof a);
  memcpy(b, &y, sizeof b);
  for (int j = 0; j < 16; j++) i[j] = kpow_index(a[j]);
  kpow_perm16(KPOW_INVC, i, c); kpow_perm16(KPOW_INVC, i + 8, c + 8);
  kpow_perm16(KPOW_LOGC, i, l); kpow_perm16(KPOW_LOGC, i + 8, l + 8);
  for (int j = 0; j < 16; j++) {
    t[j] = kpow_ylog(a[j], b[j], c[j], l[j]);
    n[j] = kpow_shift(t[j]);
  }
  kpow_perm32(KPOW_EXP2, n, c); kpow_perm32(KPOW_EXP2, n + 8, c + 8);
  for (int j = 0; j < 16; j++) o[j] = kpow_finish(a[j], b[j], t[j], c[j]);
  memcpy(&x, o, sizeof x);
  return x;
}
#define KPOW_CLONE(ISA, N, SYMBOL, TARGET) \
  typedef float kpow_v##N __attribute__((vector_size(4 * N))); \
  __attribute__((weak, visibility("hidden"), target(TARGET))) \
  kpow_v##N kpow_clone_##ISA(kpow_v##N x, kpow_v##N y) __asm__(SYMBOL); \
  __attribute__((weak, visibility("hidden"), target(TARGET))) \
  kpow_v##N kpow_clone_##ISA(kpow_v##N x, kpow_v##N y) { \
    float a[N], b[N], o[N]; \
    memcpy(a, &x, sizeof a); \
    memcpy(b, &y, sizeof b); \
    for (int j = 0; j < N; j++) o[j] = kpow32_any(a[j], b[j]); \
    memcpy(&x, o, sizeof x); \
    return x; }
KPOW_CLONE(b, 4, "_ZGVbN4vv_kpow32", "sse2")
KPOW_CLONE(c, 8, "_ZGVcN8vv_kpow32", "avx")
KPOW_CLONE(d, 8, "_ZGVdN8vv_kpow32", "avx2")
#undef KPOW_CLONE
#else
/* Elsewhere: inline, branch-free (vectorized where the compiler can). */
__attribute__((always_inline)) static inline float kpow32(float x, float y) {
  return kpow32_any(x, y);
}
#endif
