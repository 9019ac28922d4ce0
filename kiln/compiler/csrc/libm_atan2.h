/* ---- float32 atan2 with the C library's bits, vectorizable (binary_math.py). ---- */
/* KATAN_MA(a, b, c): a * b + c in float as the C library computes it: rounded twice (its
   plain build), or fused ("#define KATAN_MA(a, b, c) fmaf(a, b, c)" first). */
#ifndef KATAN_MA
#define KATAN_MA(a, b, c) ((a) * (b) + (c))
#endif
/* atan(0.5), atan(1), atan(1.5), atan(inf) as a float head and tail */
static const float KATAN_HI[4] = {4.6364760399e-01f, 7.8539812565e-01f, 9.8279368877e-01f,
  1.5707962513e+00f};
static const float KATAN_LO[4] = {5.0121582440e-09f, 3.7748947079e-08f, 3.4473217170e-08f,
  7.5497894159e-08f};
/* atan(x) ~ x - x * (z * (A0 + w * (A2 + ...)) + w * (A1 + w * (A3 + ...))), z = x^2,
   w = z^2 */
static const float KATAN_A[11] = {3.3333334327e-01f, -2.0000000298e-01f, 1.4285714924e-01f,
  -1.1111110449e-01f, 9.0908870101e-02f, -7.6918758452e-02f, 6.6610731184e-02f,
  -5.8335702866e-02f, 4.9768779427e-02f, -3.6531571299e-02f, 1.6285819933e-02f};
/* pi/4, pi/2 and pi rounded to float, and pi's next bits */
#define KATAN_PIO4 7.8539818525e-01f
#define KATAN_PIO2 1.5707963705e+00f
#define KATAN_PI 3.1415927410e+00f
#define KATAN_PILO -8.7422776573e-08f

static inline float katan_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t katan_w(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline uint32_t katan_sel(uint32_t m, uint32_t a, uint32_t b) {
  return (a & m) | (b & ~m);
}
static inline uint32_t katan_mask(int c) { return (uint32_t)0 - (uint32_t)(c != 0); }
static inline float katan_self(uint32_t m, float a, float b) {
  return katan_f(katan_sel(m, katan_w(a), katan_w(b)));
}

/* atan(t) for t >= 0 (NaN: itself, from 0 / 0 of flushed subnormals): fdlibm's float kernel, its four reductions
   (2t - 1) / (2 + t), (t - 1) / (t + 1), (t - 1.5) / (1 + 1.5 t), -1 / t as one
   division of selected operands, every case computed and selected. */
static inline float katan_kernel(float t) {
  uint32_t it = katan_w(t);
  uint32_t lo = katan_mask(it < 0x3ee00000u), tiny = katan_mask(it < 0x31000000u);
  uint32_t big = katan_mask(it >= 0x4c000000u);
  uint32_t id0 = katan_mask(it < 0x3f300000u), id01 = katan_mask(it < 0x3f980000u);
  uint32_t id2 = katan_mask(it < 0x401c0000u);
  float num = katan_self(id2, t - 1.5f, -1.0f), den = katan_self(id2, KATAN_MA(1.5f, t, 1.0f), t);
  num = katan_self(id01, katan_self(id0, 2.0f * t - 1.0f, t - 1.0f), num);
  den = katan_self(id01, katan_self(id0, 2.0f + t, t + 1.0f), den);
  num = katan_self(lo, t, num);
  den = katan_self(lo, 1.0f, den);
  float x = num / den;
  uint64_t id = (uint64_t)((id0 & 1u) ^ 1u) + (uint64_t)((id01 & 1u) ^ 1u)
                + (uint64_t)((id2 & 1u) ^ 1u);
  float hi = katan_self(katan_mask(id & 2), katan_self(katan_mask(id & 1), KATAN_HI[3],
                                                       KATAN_HI[2]),
                        katan_self(katan_mask(id & 1), KATAN_HI[1], KATAN_HI[0]));
  float lw = katan_self(katan_mask(id & 2), katan_self(katan_mask(id & 1), KATAN_LO[3],
                                                       KATAN_LO[2]),
                        katan_self(katan_mask(id & 1), KATAN_LO[1], KATAN_LO[0]));
  float z = x * x, w = z * z;
  float s1 = KATAN_MA(w, KATAN_A[10], KATAN_A[8]);
  s1 = KATAN_MA(w, s1, KATAN_A[6]);
  s1 = KATAN_MA(w, s1, KATAN_A[4]);
  s1 = KATAN_MA(w, s1, KATAN_A[2]);
  s1 = z * KATAN_MA(w, s1, KATAN_A[0]);
  float s2 = KATAN_MA(w, KATAN_A[9], KATAN_A[7]);
  s2 = KATAN_MA(w, s2, KATAN_A[5]);
  s2 = KATAN_MA(w, s2, KATAN_A[3]);
  s2 = w * KATAN_MA(w, s2, KATAN_A[1]);
  float s = s1 + s2;
  float near = KATAN_MA(-x, s, x);
  float far = hi - (KATAN_MA(x, s, -lw) - x);
  float r = katan_self(lo, katan_self(tiny, t, near), far);
  r = katan_self(big, KATAN_HI[3] + KATAN_LO[3], r);
  return katan_self(katan_mask(it > 0x7f800000u), t, r);
}

/* atan2(y, x): |y / x| (x == 1: |y| itself, as the library's atanf(y)), its arctangent,
   moved to the quadrant; the special cases selected over it. */
__attribute__((always_inline)) static inline float katan2_32(float y, float x) {
  uint32_t hx = katan_w(x), hy = katan_w(y);
  uint32_t ix = hx & 0x7fffffffu, iy = hy & 0x7fffffffu;
  uint32_t xone = katan_mask(hx == 0x3f800000u);
  float q = katan_self(xone, katan_f(iy), katan_f(katan_w(y / x) & 0x7fffffffu));
  int32_t k = ((int32_t)iy - (int32_t)ix) >> 23;
  float z = katan_kernel(q);
  z = katan_self(katan_mask(((hx >> 31) != 0) & (k < -60)), 0.0f, z);
  z = katan_self(katan_mask(k > 60) & ~xone, KATAN_PIO2 + 0.5f * KATAN_PILO, z);
  uint32_t ny = katan_mask(hy >> 31), nx = katan_mask(hx >> 31);
  float zl = z - KATAN_PILO;
  float r = katan_self(nx, katan_self(ny, zl - KATAN_PI, KATAN_PI - zl),
                       katan_f(katan_w(z) ^ (ny & 0x80000000u)));
  /* y infinite (x finite): +-pi/2 */
  uint32_t sy = hy & 0x80000000u;
  uint32_t yinf = katan_mask(iy == 0x7f800000u), xinf = katan_mask(ix == 0x7f800000u);
  r = katan_self(yinf, katan_f(katan_w(KATAN_PIO2) | sy), r);
  /* x infinite: +-pi/4, +-3pi/4 (y too), else +-0, +-pi */
  float xi = katan_self(yinf, katan_self(nx, 3.0f * KATAN_PIO4, KATAN_PIO4),
                        katan_self(nx, KATAN_PI, 0.0f));
  r = katan_self(xinf, katan_f(katan_w(xi) | sy), r);
  /* x zero: +-pi/2 */
  r = katan_self(katan_mask(ix == 0), katan_f(katan_w(KATAN_PIO2) | sy), r);
  /* y zero: y, or +-pi for x < 0 */
  r = katan_self(katan_mask(iy == 0), katan_self(nx, katan_f(katan_w(KATAN_PI) | sy), y), r);
  /* NaN: x + y, x's NaN first */
  uint32_t xnan = katan_mask(ix > 0x7f800000u), ynan = katan_mask(iy > 0x7f800000u);
  r = katan_self(xnan | ynan, katan_f(katan_sel(xnan, hx, hy) | 0x00400000u), r);
  return r;
}
