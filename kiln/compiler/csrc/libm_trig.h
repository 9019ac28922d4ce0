/* ---- float32 sin/cos with the C library's bits, vectorizable (see trig_math.py). ---- */
/* KTRIG_MA(a, b, c): a * b + c as the C library computes it, fused (glibc's FMA build,
   the default) or rounded twice ("#define KTRIG_MA(a, b, c) ((a) * (b) + (c))" first). */
#ifndef KTRIG_MA
#define KTRIG_MA(a, b, c) fma(a, b, c)
#endif
/* Cosine and sine polynomials on [-pi/4, pi/4], evaluated in double. */
static const double KTRIG_C[5] = {0x1p0, -0x1.ffffffd0c621cp-2, 0x1.55553e1068f19p-5,
  -0x1.6c087e89a359dp-10, 0x1.99343027bf8c3p-16};
static const double KTRIG_S[3] = {-0x1.555545995a603p-3, 0x1.1107605230bc4p-7,
  -0x1.994eb3774cf24p-13};
/* The bits of 4/pi after the binary point, behind 24 zero bits, in 64-bit words (zeros
   at the end): 216 bits, from which ktrig32 takes a 96-bit window per exponent. */
static const uint64_t KTRIG_4PI[4] = {0x000000a2f9836e4eull, 0x441529fc2757d1f5ull,
  0x34ddc0db6295993cull, 0x4390410000000000ull};

/* All-ones when a < b (both far inside int64's range), else zero; and a select by such a
   mask. 64-bit masks made by arithmetic, not from a comparison's truth value: gcc does
   not widen a 32-bit lane's condition to a double lane's mask, and the loop stays scalar. */
static inline uint64_t ktrig_lt(int64_t a, int64_t b) { return (uint64_t)((a - b) >> 63); }
static inline double ktrig_sel(uint64_t m, double a, double b) {
  uint64_t ai, bi; memcpy(&ai, &a, 8); memcpy(&bi, &b, 8);
  ai = (ai & m) | (bi & ~m);
  double r; memcpy(&r, &ai, 8); return r;
}

/* cos (odd all-ones) or sin of the reduced argument r (|r| <= pi/4), the cosine's sign
   flipped where neg is all-ones: every lane evaluates both polynomials. */
static inline float ktrig_poly32(double r, uint64_t odd, uint64_t neg) {
  double r2 = r * r;
  double r3 = r * r2, r4 = r2 * r2;
  double sp = KTRIG_MA(r3, KTRIG_S[0], r);
  double s12 = KTRIG_MA(r2, KTRIG_S[2], KTRIG_S[1]);
  double sv = KTRIG_MA(s12, r3 * r2, sp);
  double c01 = KTRIG_MA(r2, KTRIG_C[1], KTRIG_C[0]);
  double c34 = KTRIG_MA(r2, KTRIG_C[4], KTRIG_C[3]);
  double cv = KTRIG_MA(c34, r2 * r4, KTRIG_MA(r4, KTRIG_C[2], c01));
  cv = ktrig_sel(neg, -cv, cv);
  return (float)ktrig_sel(odd, cv, sv);
}

/* sin (cosine == 0) or cos (cosine == 1) of y: the reduction r = y - n pi/2 in one fused
   step from a double pi/2 for |y| < 120, from a 4/pi table in 64-bit fixed point above,
   both computed in every lane (then selected), as the polynomials are. far == 0 (a
   constant) leaves the second reduction and the non-finite select out: for |y| < 120
   only. */
static inline float ktrig32(float y, int cosine, int far) {
  uint32_t yi; memcpy(&yi, &y, 4);
  uint32_t top = (yi >> 20) & 0x7ffu;           /* exponent and 3 mantissa bits of |y| */
  int64_t top64 = (int64_t)top;
  double x = (double)y;
  uint64_t large = far ? ~ktrig_lt(top64, 0x42f) : 0, small = ktrig_lt(top64, 0x3f4);
  /* |y| < 120: n = y * 2/pi rounded to the nearest integer (scaled by 2^24 and rounded
     in the integer domain), r = y - n pi/2. Other lanes reduce 0 (no out-of-range
     conversion). */
  double xm = ktrig_sel(large, 0.0, x);
  int32_t nm = ((int32_t)(xm * 0x1.45f306dc9c883p+23) + 0x800000) >> 24;
  double rm = KTRIG_MA(-(double)nm, 0x1.921fb54442d18p0, xm);
  /* |y| >= 120: the 24-bit mantissa, shifted by the exponent's low 3 bits, times a
     96-bit window of 4/pi chosen by its high bits gives |y| * 4/pi mod 8 in 2.62 fixed
     point (f); n is that rounded to a multiple of 2 (in units of 2^62), r the rest. */
  uint64_t at = (uint64_t)((yi >> 23) & 0x78u);   /* the window's first bit, 8 * k */
  uint64_t w = (uint64_t)0 - (at >> 6), sh = at & 63;
  uint64_t wa = (KTRIG_4PI[1] & w) | (KTRIG_4PI[0] & ~w);
  uint64_t wb = (KTRIG_4PI[2] & w) | (KTRIG_4PI[1] & ~w);
  uint64_t wc = (KTRIG_4PI[3] & w) | (KTRIG_4PI[2] & ~w);
  uint64_t win = (wa << sh) | ((wb >> 1) >> (63 - sh));      /* window bits 0..63 */
  uint64_t low = ((wb << sh) | ((wc >> 1) >> (63 - sh))) >> 32;  /* bits 64..95 */
  uint32_t m = ((yi & 0x7fffffu) | 0x800000u) << ((yi >> 23) & 7u);
  uint64_t m64 = (uint64_t)m & 0xffffffffu;     /* 32x32 -> 64-bit products (vpmuludq) */
  uint64_t hi = (uint64_t)(m * (uint32_t)(win >> 32)) << 32;
  uint64_t mid = m64 * (win & 0xffffffffu), lo = m64 * (low & 0xffffffffu);
  uint64_t f = (hi | (lo >> 32)) + mid;
  uint64_t nl = (f + (1ull << 61)) >> 62;
  double rl = (double)(int64_t)(f - (nl << 62)) * 0x1.921fb54442d18p-62;
  /* the quadrant n picks the polynomial; q = n (+1 for negative y above 120, whose
     reduction was of |y|) picks the signs */
  uint64_t n = (nl & large) | ((uint64_t)(int64_t)nm & ~large & ~small);
  uint64_t q = n + ((uint64_t)(yi >> 31) & large);
  double r = ktrig_sel(large, rl, ktrig_sel(small, x, rm));
  r = ktrig_sel((uint64_t)0 - (((q + 1) >> 1) & 1), -r, r);   /* sin < 0 in quadrants 1, 2 */
  float v = ktrig_poly32(r, (uint64_t)0 - ((n & 1) ^ (uint64_t)cosine),
                         (uint64_t)0 - ((q >> 1) & 1));
  v = sel32(top < 0x398u, cosine ? 1.0f : y, v); /* |y| < 2^-12: y, or 1 */
  return far ? sel32(top >= 0x7f8u, y - y, v) : v;   /* inf: the default NaN; NaN: quieted */
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8 && defined(__x86_64__) \
    && !defined(KTRIG_INLINE)
/* gcc on x86-64: ksin32/kcos32 are declared SIMD functions (the x86 vector function
   ABI, as libmvec's), so a vectorized loop calls a clone on 4, 8 or 16 lanes at once.
   Each clone runs the |y| < 120 code on all its lanes, and the whole of ktrig32 (the
   large reduction too) only when a lane needs it: half the instructions in the common
   case. The scalar symbol (a loop's remainder, a loop that did not vectorize) is the C
   library's own function. Weak and hidden: every compilation unit of a program
   defines them, the library keeps one, nothing outside sees them. The asm labels give
   the definitions the names gcc calls without making gcc derive clones of its own. */
__attribute__((simd("notinbranch"), const, nothrow, visibility("hidden"))) float ksin32(float y);
__attribute__((simd("notinbranch"), const, nothrow, visibility("hidden"))) float kcos32(float y);
__attribute__((weak, visibility("hidden"))) float ktrig_sin_1(float y) __asm__("ksin32");
__attribute__((weak, visibility("hidden"))) float ktrig_sin_1(float y) { return sinf(y); }
__attribute__((weak, visibility("hidden"))) float ktrig_cos_1(float y) __asm__("kcos32");
__attribute__((weak, visibility("hidden"))) float ktrig_cos_1(float y) { return cosf(y); }
#define KTRIG_CLONE(NAME, COS, ISA, N, SYMBOL, TARGET) \
  typedef float ktrig_v##N __attribute__((vector_size(4 * N))); \
  __attribute__((weak, visibility("hidden"), target(TARGET))) \
  ktrig_v##N NAME##_##ISA(ktrig_v##N y) __asm__(SYMBOL); \
  __attribute__((weak, visibility("hidden"), target(TARGET))) \
  ktrig_v##N NAME##_##ISA(ktrig_v##N y) { \
    float in[N], out[N]; \
    uint32_t bits[N]; \
    int far = 0; \
    memcpy(in, &y, sizeof in); \
    memcpy(bits, &y, sizeof bits); \
    for (int i = 0; i < N; i++) far |= ((bits[i] >> 20) & 0x7ffu) >= 0x42fu; \
    if (far) { for (int i = 0; i < N; i++) out[i] = ktrig32(in[i], COS, 1); } \
    else { for (int i = 0; i < N; i++) out[i] = ktrig32(in[i], COS, 0); } \
    memcpy(&y, out, sizeof y); \
    return y; }
KTRIG_CLONE(ktrig_sin, 0, b, 4, "_ZGVbN4v_ksin32", "sse2")
KTRIG_CLONE(ktrig_sin, 0, c, 8, "_ZGVcN8v_ksin32", "avx")
KTRIG_CLONE(ktrig_sin, 0, d, 8, "_ZGVdN8v_ksin32", "avx2")
KTRIG_CLONE(ktrig_sin, 0, e, 16, "_ZGVeN16v_ksin32", "avx512f")
KTRIG_CLONE(ktrig_cos, 1, b, 4, "_ZGVbN4v_kcos32", "sse2")
KTRIG_CLONE(ktrig_cos, 1, c, 8, "_ZGVcN8v_kcos32", "avx")
KTRIG_CLONE(ktrig_cos, 1, d, 8, "_ZGVdN8v_kcos32", "avx2")
KTRIG_CLONE(ktrig_cos, 1, e, 16, "_ZGVeN16v_kcos32", "avx512f")
#undef KTRIG_CLONE
#else
/* Elsewhere: inline, branch-free over the whole range (vectorized where the compiler
   can). */
static inline float ksin32(float y) { return ktrig32(y, 0, 1); }
static inline float kcos32(float y) { return ktrig32(y, 1, 1); }
#endif
