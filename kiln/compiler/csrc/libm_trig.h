/* ---- float32 sin/cos/tan with the C library's bits, vectorizable (trig_math.py). ---- */
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

/* |y| >= 120 (yi: its bits; the sign ignored): the 24-bit mantissa, shifted by the
   exponent's low 3 bits, times a 96-bit window of 4/pi chosen by its high bits gives
   |y| * 4/pi mod 8 in 2.62 fixed point (f); *n is that rounded to a multiple of 2 (in
   units of 2^62), the result the rest times pi/4, in double. */
static inline double ktrig_far(uint32_t yi, uint64_t *n) {
  uint64_t at = (uint64_t)((yi >> 23) & 0x78u);   /* the window's first bit, 8 * k */
  uint64_t w = (uint64_t)0 - (at >> 6), sh = at & 63;
  uint64_t wa = (KTRIG_4PI[1] & w) | (KTRIG_4PI[0] & ~w);
  uint64_t wb = (KTRIG_4PI[2] & w) | (KTRIG_4PI[1] & ~w);
  uint64_t wc = (KTRIG_4PI[3] & w) | (KTRIG_4PI[2] & ~w);
  uint64_t win = (wa << sh) | ((wb >> 1) >> (63 - sh));      /* window bits 0..63 */
  uint64_t low = ((wb << sh) | ((wc >> 1) >> (63 - sh))) >> 32;  /* bits 64..95 */
  uint32_t m = ((yi & 0x7fffffu) | 0x800000u) << ((yi >> 23) & 7u);
  uint64_t m64 = (uint64_t)m & 0xffffffffu;     /* 32x32 -> 64-bit products */
  uint64_t hi = (uint64_t)(m * (uint32_t)(win >> 32)) << 32;
  uint64_t mid = m64 * (win & 0xffffffffu), lo = m64 * (low & 0xffffffffu);
  uint64_t f = (hi | (lo >> 32)) + mid;
  uint64_t nl = (f + (1ull << 61)) >> 62;
  *n = nl;
  return (double)(int64_t)(f - (nl << 62)) * 0x1.921fb54442d18p-62;
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

/* sin (cosine == 0) or cos (cosine == 1) of y: the reduction r = y - n pi/2 in one
   KTRIG_MA from a double pi/2 for |y| < 120, from a 4/pi table in 64-bit fixed point above,
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
  uint64_t nl;
  double rl = ktrig_far(yi, &nl);
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

/* tan: glibc's tanf (the fdlibm kernel in float arithmetic, unfused, after the
   sincosf reduction in double split into a float head and tail). Its coefficients: */
static const float KTAN_T[13] = {3.3333334327e-01f, 1.3333334029e-01f, 5.3968254477e-02f,
  2.1869488060e-02f, 8.8632395491e-03f, 3.5920790397e-03f, 1.4562094584e-03f,
  5.8804126456e-04f, 2.4646313977e-04f, 7.8179444245e-05f, 7.1407252108e-05f,
  -1.8558637748e-05f, 2.5907305826e-05f};

/* tan(x + y) (|x + y| <= pi/4, y below x's last bit) or -1/tan where iy == -1: every
   case of the kernel computed, then selected. */
static inline float ktan_kernel32(float x, float y, int32_t iy) {
  uint32_t hx; memcpy(&hx, &x, 4);
  uint32_t ix = hx & 0x7fffffffu;
  int neg = (int32_t)hx < 0, big = ix >= 0x3f2ca140u, tiny = ix < 0x39000000u;
  float sgn = sel32(neg, -1.0f, 1.0f), fiy = (float)iy;
  /* |x| >= 0.6744: tan(pi/4 - |x|) instead, from pi/4 in two floats */
  float xb = sel32(neg, -x, x), yb = sel32(neg, -y, y);
  float xt = (7.8539812565e-01f - xb) + (3.7748947079e-08f - yb);
  x = sel32(big, xt, x);
  y = sel32(big, 0.0f, y);
  float near = (sgn * fiy) * (1.0f - (2.0f * fiy) * x);     /* that below 2^-13 */
  float z = x * x, w = z * z;
  float r = KTAN_T[9] + w * KTAN_T[11], v = KTAN_T[10] + w * KTAN_T[12];
  r = KTAN_T[7] + w * r; v = KTAN_T[8] + w * v;
  r = KTAN_T[5] + w * r; v = KTAN_T[6] + w * v;
  r = KTAN_T[3] + w * r; v = KTAN_T[4] + w * v;
  r = KTAN_T[1] + w * r; v = KTAN_T[2] + w * v;
  v = z * v;
  float s = z * x;
  r = y + z * (s * (r + v) + y);
  r = r + KTAN_T[0] * s;
  w = x + r;
  float far = sgn * (fiy - 2.0f * (x - (w * w / (w + fiy) - r)));
  /* -1/(x + r) from w's and its reciprocal's high halves */
  uint32_t wi; memcpy(&wi, &w, 4);
  wi &= 0xfffff000u;
  float zh; memcpy(&zh, &wi, 4);
  float vt = r - (zh - x);
  float a = -1.0f / w;
  uint32_t ai; memcpy(&ai, &a, 4);
  ai &= 0xfffff000u;
  float t; memcpy(&t, &ai, 4);
  float inv = t + a * ((1.0f + t * zh) + t * vt);
  float out = sel32(iy == 1, w, inv);
  out = sel32(big, sel32(fabsf(x) < 0x1p-13f, near, far), out);
  /* |x| < 2^-13 as given: x, -1/x, or 1/|x| for a zero when iy == -1 */
  float small = sel32(iy == 1, x, -1.0f / x);
  small = sel32((ix | (uint32_t)(iy + 1)) == 0, 1.0f / fabsf(x), small);
  return sel32(tiny, small, out);
}

/* tan(y); far as ktrig32's. */
static inline float ktan32_any(float y, int far) {
  uint32_t yi; memcpy(&yi, &y, 4);
  uint32_t ax = yi & 0x7fffffffu, top = (yi >> 20) & 0x7ffu;
  int64_t top64 = (int64_t)top;
  double x = (double)y;
  uint64_t large = far ? ~ktrig_lt(top64, 0x42f) : 0;
  double xm = ktrig_sel(large, 0.0, x);
  int32_t nm = ((int32_t)(xm * 0x1.45f306dc9c883p+23) + 0x800000) >> 24;
  double rm = xm - (double)nm * 0x1.921fb54442d18p0;        /* unfused, as tanf */
  uint64_t nl;
  double rl = ktrig_far(yi, &nl);
  rl = ktrig_sel((uint64_t)0 - (uint64_t)(yi >> 31), -rl, rl);
  double r = ktrig_sel(large, rl, rm);
  int32_t n = (int32_t)((nl & large) | ((uint64_t)(int64_t)nm & ~large));
  float hi = (float)r, lo = (float)(r - (double)hi);
  int pio4 = ax <= 0x3f490fdau;
  float v = ktan_kernel32(sel32(pio4, y, hi), sel32(pio4, 0.0f, lo),
                          pio4 ? 1 : 1 - ((n & 1) << 1));
  return far ? sel32(ax >= 0x7f800000u, y - y, v) : v;
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8 && defined(__x86_64__) \
    && !defined(KTRIG_INLINE)
/* gcc on x86-64: ksin32/kcos32/ktan32 are declared SIMD functions (the x86 vector
   function ABI, as libmvec's), so a vectorized loop calls a clone on 4, 8 or 16 lanes at
   once. Each clone runs the |y| < 120 code on all its lanes, and the whole function (the
   large reduction and the non-finite select too) only when a lane needs it: half the
   instructions in the common case. The scalar symbol (a loop's remainder, a loop that did not vectorize) is the C
   library's own function. Weak and hidden: every compilation unit of a program
   defines them, the library keeps one, nothing outside sees them. The asm labels give
   the definitions the names gcc calls without making gcc derive clones of its own. */
__attribute__((simd("notinbranch"), const, nothrow, visibility("hidden"))) float ksin32(float y);
__attribute__((simd("notinbranch"), const, nothrow, visibility("hidden"))) float kcos32(float y);
__attribute__((simd("notinbranch"), const, nothrow, visibility("hidden"))) float ktan32(float y);
__attribute__((weak, visibility("hidden"))) float ktrig_sin_1(float y) __asm__("ksin32");
__attribute__((weak, visibility("hidden"))) float ktrig_sin_1(float y) { return sinf(y); }
__attribute__((weak, visibility("hidden"))) float ktrig_cos_1(float y) __asm__("kcos32");
__attribute__((weak, visibility("hidden"))) float ktrig_cos_1(float y) { return cosf(y); }
__attribute__((weak, visibility("hidden"))) float ktrig_tan_1(float y) __asm__("ktan32");
__attribute__((weak, visibility("hidden"))) float ktrig_tan_1(float y) { return tanf(y); }
static inline float ktrig_sin_any(float y, int far) { return ktrig32(y, 0, far); }
static inline float ktrig_cos_any(float y, int far) { return ktrig32(y, 1, far); }
#define KTRIG_CLONE(NAME, FN, ISA, N, SYMBOL, TARGET) \
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
    if (far) { for (int i = 0; i < N; i++) out[i] = FN(in[i], 1); } \
    else { for (int i = 0; i < N; i++) out[i] = FN(in[i], 0); } \
    memcpy(&y, out, sizeof y); \
    return y; }
#define KTRIG_CLONES(NAME, FN, STEM) \
  KTRIG_CLONE(NAME, FN, b, 4, "_ZGVbN4v_" STEM, "sse2") \
  KTRIG_CLONE(NAME, FN, c, 8, "_ZGVcN8v_" STEM, "avx") \
  KTRIG_CLONE(NAME, FN, d, 8, "_ZGVdN8v_" STEM, "avx2") \
  KTRIG_CLONE(NAME, FN, e, 16, "_ZGVeN16v_" STEM, "avx512f")
KTRIG_CLONES(ktrig_sin, ktrig_sin_any, "ksin32")
KTRIG_CLONES(ktrig_cos, ktrig_cos_any, "kcos32")
KTRIG_CLONES(ktrig_tan, ktan32_any, "ktan32")
#undef KTRIG_CLONES
#undef KTRIG_CLONE
#else
/* Elsewhere: inline, branch-free over the whole range (vectorized where the compiler
   can). */
static inline float ksin32(float y) { return ktrig32(y, 0, 1); }
static inline float kcos32(float y) { return ktrig32(y, 1, 1); }
static inline float ktan32(float y) { return ktan32_any(y, 1); }
#endif
