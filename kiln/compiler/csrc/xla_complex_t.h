/* ---- xla_complex.h's ops for one width (KC_W: 32 for complex64's float parts, 64 for
   complex128's double parts); included once per width. Names end in 32 or 64. Every
   function takes flushed parts (x, y) and, where a C library function reads them, the
   raw ones (xr, yr), and returns the result's parts through pointers. */
#if KC_W == 32
#define T float
#define KN(f) f##32
#define K(a, b) (a)
#define KFTZ ftz32
#define KSEL sel32
#define KFMA fmaf
#define KSQRT sqrtf
#define KABS fabsf
#define KCPS copysignf
#define KSIN sinf
#define KCOS cosf
#define KATAN2 atan2f
#define KMAX kcmax32
#define KMIN kcmin32
#define KXEXP xexp32
#define KXEXPM1 xexpm132
#define KXLOG xlog32
#define KXLOG1P xlog1p32
#define KINF HUGE_VALF
#define KNAN NAN
#else
#define T double
#define KN(f) f##64
#define K(a, b) (b)
#define KFTZ ftz64
#define KSEL sel64
#define KFMA fma
#define KSQRT sqrt
#define KABS fabs
#define KCPS copysign
#define KSIN sin
#define KCOS cos
#define KATAN2 atan2
#define KMAX kcmax64
#define KMIN kcmin64
#define KXEXP xexp64
#define KXEXPM1 xexpm164
#define KXLOG xlog64
#define KXLOG1P xlog1p64
#define KINF HUGE_VAL
#define KNAN ((double)NAN)
#endif

/* XLA's real functions as its complex code calls them, results flushed. */
#if KC_W == 32
static inline T KN(kc_exp)(T x) { return KFTZ(KXEXP(x)); }
static inline T KN(kc_expm1)(T x) { return KFTZ(KXEXPM1(x)); }
#else
static inline T KN(kc_exp)(T x) { return KFTZ(kc_fexp64(x)); }
static inline T KN(kc_expm1)(T x) { return KFTZ(kc_fexpm164(x)); }
#endif
static inline T KN(kc_log)(T x) { return KFTZ(KXLOG(x)); }
static inline T KN(kc_log1p)(T x) { return KFTZ(KXLOG1P(x)); }
static inline T KN(kc_sin)(T x) { return KFTZ(KSIN(x)); }
static inline T KN(kc_cos)(T x) { return KFTZ(KCOS(x)); }

/* ---- multiply, divide, abs, sign (XLA's elemental emitter) ---- */

/* a * b: fma(ar, br, -(ai bi)) + i fma(ai, br, ar bi). (With b one broadcast value and a
   an array, XLA contracts the other product of the imaginary part: the caller swaps the
   operands.) */
static inline void KN(kc_mul)(T ar0, T ai0, T br0, T bi0, T *re, T *im) {
  T ar = KFTZ(ar0), ai = KFTZ(ai0), br = KFTZ(br0), bi = KFTZ(bi0);
  *re = KFMA(ar, br, -(ai * bi));
  *im = KFMA(ai, br, ar * bi);
}

/* a / b by Smith's algorithm (the vectorized part: finite results and NaNs). */
static inline void KN(kc_div)(T ar0, T ai0, T br0, T bi0, T *re, T *im) {
  T ar = KFTZ(ar0), ai = KFTZ(ai0), br = KFTZ(br0), bi = KFTZ(bi0);
  int small_r = KABS(br) < KABS(bi);
  /* |br| < |bi|: r1 = br / bi, d1 = fma(r1, br, bi), (fma(r1, ar, ai) + i fma(r1, ai, -ar))
     / d1; else r2 = bi / br, d2 = fma(r2, bi, br), (fma(r2, ai, ar) + i fma(-r2, ar, ai))
     / d2. */
  T r = KSEL(small_r, br, bi) / KSEL(small_r, bi, br);
  T d = KFMA(r, KSEL(small_r, br, bi), KSEL(small_r, bi, br));
  T cr = KFMA(r, KSEL(small_r, ar, ai), KSEL(small_r, ai, ar)) / d;
  T ci = KFMA(KSEL(small_r, r, -r), KSEL(small_r, ai, ar), KSEL(small_r, -ar, ai)) / d;
  *re = cr;
  *im = ci;
}

/* Where Smith's parts are both NaN: the limits for a zero divisor (inf with b's real sign
   times a), an infinite numerator over a finite divisor, a finite numerator over an
   infinite divisor; else the NaNs stay. */
static inline void KN(kc_div_special)(T ar0, T ai0, T br0, T bi0, T *re, T *im) {
  T ar = KFTZ(ar0), ai = KFTZ(ai0), br = KFTZ(br0), bi = KFTZ(bi0);
  T zero = 0, one = 1, inf = KINF;
  T abr = KABS(br), abi = KABS(bi), aar = KABS(ar), aai = KABS(ai);
  if (abr == 0 && abi == 0 && (ar == ar || ai == ai)) {
    T s = KCPS(inf, br);
    *re = s * ar;
    *im = s * ai;
    return;
  }
  int b_finite = abr < inf && abi < inf;
  int ar_inf = aar == inf, ai_inf = aai == inf;
  if ((ar_inf || ai_inf) && b_finite) {
    T ar1 = KCPS(ar_inf ? one : zero, ar), ai1 = KCPS(ai_inf ? one : zero, ai);
    *re = inf * KFMA(ar1, br, ai1 * bi);
    *im = inf * KFMA(ai1, br, -(ar1 * bi));
    return;
  }
  int a_finite = aar < inf && aai < inf;
  int br_inf = abr == inf, bi_inf = abi == inf;
  if ((br_inf || bi_inf) && a_finite) {
    T br1 = KCPS(br_inf ? one : zero, br), bi1 = KCPS(bi_inf ? one : zero, bi);
    *re = zero * KFMA(ar, br1, ai * bi1);
    *im = zero * KFMA(ai, br1, -(ar * bi1));
  }
}

static inline void KN(kc_div_full)(T ar, T ai, T br, T bi, T *re, T *im) {
  KN(kc_div)(ar, ai, br, bi, re, im);
  if (*re != *re && *im != *im) KN(kc_div_special)(ar, ai, br, bi, re, im);
}

/* The pass after a vectorized division loop over n elements (strides sa, sb). */
static inline void KN(kc_div_fix)(const T *a, int64_t sa, const T *b, int64_t sb, T *w, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (w[2 * i] != w[2 * i] && w[2 * i + 1] != w[2 * i + 1])
      KN(kc_div_special)(a[2 * i * sa], a[2 * i * sa + 1], b[2 * i * sb], b[2 * i * sb + 1],
                         &w[2 * i], &w[2 * i + 1]);
}
static inline void KN(kc_no_fix)(const T *a, int64_t sa, const T *b, int64_t sb, T *w,
                                 int64_t n) {
  (void)a; (void)sa; (void)b; (void)sb; (void)w; (void)n;
}

/* integer_pow as JAX lowers it: z * z for 2, (z * z) * z for 3, 1 / z for -1, else
   binary powering (acc * z for each set bit, z * z between) and 1 / acc for k < 0. */
static inline void KN(kc_ipow)(const T *z, T *w, int64_t n, int64_t k) {
  int64_t m = k < 0 ? -k : k;
  for (int64_t i = 0; i < n; i++) {
    T zr = z[2 * i], zi = z[2 * i + 1], ar, ai;
    if (k == 1) {
      ar = zr; ai = zi;
    } else if (k == 2) {
      KN(kc_mul)(zr, zi, zr, zi, &ar, &ai);
    } else if (k == 3) {
      T sr, si;
      KN(kc_mul)(zr, zi, zr, zi, &sr, &si);
      KN(kc_mul)(sr, si, zr, zi, &ar, &ai);
    } else if (k == -1) {
      KN(kc_div_full)(1, 0, zr, zi, &ar, &ai);
    } else {
      T br = zr, bi = zi;
      int first = 1;
      ar = 0; ai = 0;
      for (int64_t e = m; e > 0;) {
        if (e & 1) {
          if (first) { ar = br; ai = bi; first = 0; }
          else { T tr, ti; KN(kc_mul)(ar, ai, br, bi, &tr, &ti); ar = tr; ai = ti; }
        }
        e >>= 1;
        if (e > 0) { T tr, ti; KN(kc_mul)(br, bi, br, bi, &tr, &ti); br = tr; bi = ti; }
      }
      if (k < 0) { T tr, ti; KN(kc_div_full)(1, 0, ar, ai, &tr, &ti); ar = tr; ai = ti; }
    }
    w[2 * i] = ar;
    w[2 * i + 1] = ai;
  }
}

/* |z| of flushed parts: max * sqrt(1 + (min/max)^2), min where that is NaN (zeros,
   infinities, NaNs). */
static inline T KN(kc_abs_parts)(T x, T y) {
  T ax = KABS(x), ay = KABS(y);
  T mx = KMAX(ax, ay), mn = KMIN(ax, ay);
  T q = mn / mx;
  T r = mx * KSQRT(KFMA(q, q, (T)1));
  return KSEL(r != r, mn, r);
}

static inline T KN(kc_abs)(T x, T y) { return KN(kc_abs_parts)(KFTZ(x), KFTZ(y)); }

/* z / |z| part by part; z itself (bits unchanged) where |z| is 0. */
static inline void KN(kc_sign)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr);
  T a = KN(kc_abs_parts)(x, y);
  *re = KSEL(a == 0, xr, x / a);
  *im = KSEL(a == 0, yr, y / a);
}

/* ---- exp, log, sqrt (StableHLO's expander, simplified by XLA) ---- */

/* exp(x + iy) from cos y, sin y: exp(x) (cos y + i sin y), exp(x/2) cos(y) exp(x/2) (and
   sin) where exp(x) overflows; imaginary part 0 for y == 0. */
static inline void KN(kc_exp_cs)(T x, T y, T c, T s, T *re, T *im) {
  T e = KN(kc_exp)(x);
  int big = e == KINF;
#if KC_W == 32
  T h = KN(kc_exp)(x * (T)0.5);       /* (both computed: the loop is vectorized) */
#else
  T h = big ? KN(kc_exp)(x * (T)0.5) : (T)0;
#endif
  *re = KSEL(big, (h * c) * h, e * c);
  *im = KSEL(y == 0, (T)0, KSEL(big, (h * s) * h, e * s));
}

static inline void KN(kc_exp_parts)(T x, T y, T xr, T yr, T *re, T *im) {
  (void)xr;
  KN(kc_exp_cs)(x, y, KN(kc_cos)(yr), KN(kc_sin)(yr), re, im);
}

static inline void KN(kc_cexp)(T xr, T yr, T *re, T *im) {
  KN(kc_exp_parts)(KFTZ(xr), KFTZ(yr), xr, yr, re, im);
}

static inline void KN(kc_logistic)(T xr, T yr, T *re, T *im) {
  /* 1 / (1 + exp(-z)), JAX's lowering: the complex exp and division. */
  T er, ei;
  KN(kc_exp_parts)(KFTZ(-xr), KFTZ(-yr), -xr, -yr, &er, &ei);
  KN(kc_div_full)(1, 0, er + (T)1, ei + (T)0, re, im);
}

/* h = fl(v v) and its error (Dekker's product with Veltkamp's split), as XLA contracts
   it. */
static inline T KN(kc_sq_err)(T v, T h) {
  T t = K(4097.0f, 134217729.0) * v;
  T hi = t + (v - t);
  T lo = v - hi;
  T m = hi * lo;
  return KFMA(lo, lo, (KFMA(hi, hi, -h) + m) + m);
}

/* log|z| + i atan2(y, x): log1p(s) / 2 with s = x^2 + y^2 - 1 summed from Dekker squares
   where |s| < 1/2, else log(max) + log1p((min/max)^2) / 2. */
static inline T KN(kc_clog_re)(T xr, T yr) {
  T x = KFTZ(xr), y = KFTZ(yr);
  T half = 0.5;
  T yh = y * y, xh = x * x;
  T yl = KN(kc_sq_err)(y, yh), xl = KN(kc_sq_err)(x, xh);
  int y_big = yh > xh;
  T big_h = KSEL(y_big, yh, xh), small_h = KSEL(y_big, xh, yh);
  /* fast two-sums of -1, the high and low parts; XLA folded the first error term,
     big_h - ((big_h + -1) - -1), to big_h - big_h. */
  T s1 = big_h + (T)-1;
  T s2 = s1 + small_h;
  T s3 = s2 + yl;
  T s4 = s3 + xl;
  T e1 = big_h - big_h;
  T e2 = small_h - (s2 - s1);
  T e3 = yl - (s3 - s2);
  T e4 = xl - (s4 - s3);
  T s = s4 + (((e1 + e2) + e3) + e4);
  T near_one = KN(kc_log1p)(s) * half;
  T ax = KABS(x), ay = KABS(y);
  T mx = KMAX(ax, ay), mn = KMIN(ax, ay);
  T q = KSEL(mn == mx, (T)1, mn / mx);
  T other = KFMA(KN(kc_log1p)(q * q), half, KN(kc_log)(mx));
  return KSEL(KABS(s) < half, near_one, other);
}

static inline void KN(kc_clog)(T xr, T yr, T *re, T *im) {
  *re = KN(kc_clog_re)(xr, yr);
  *im = KATAN2(yr, xr);
}

/* The expander's m sqrt(1 + (n/m)^2) (m >= n): m + m (n/m)^2 / 2 where the root rounds to
   1, m sqrt(2) for m == n. */
static inline T KN(kc_hypot_sqrt)(T m, T n, T sqrt2) {
  T q = n / m;
  T q2 = q * q;
  T root = KSQRT(q2 + (T)1);
  T general = KSEL((root == (T)1) & (q2 > 0), KFMA(m * q2, (T)0.5, m), m * root);
  return KSEL(m == n, m * sqrt2, general);
}

/* The principal square root: u = sqrt((|z| + |x|) / 2) and |y| / (2u), rescaled where u
   underflows or overflows, placed by the signs of x and y. The constants as XLA folded
   them: 1.5537739740300374 / sqrt(2), sqrt(2), 1 / sqrt(2), 1 / 2.19736822693562. */
static inline void KN(kc_csqrt)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr);
  const T k_eq = K(1.09868407f, 1.0986841134678098);
  const T sqrt2 = K(1.41421354f, 1.4142135623730951);
  const T rsqrt2 = K(0.707106769f, 0.70710678118654746);
  const T k_eq_y = K(0.455089867f, 0.45508986056222733);
  T one = 1, half = 0.5;
  T ax = KABS(x), ay = KABS(y);
  int eq = ax == ay, lt = ax < ay, gt = ax > ay;
  T r = KSEL(eq, one, KSEL(lt, ax / ay, ay / ax));
  T sq_ax = KSQRT(ax), sq_ay = KSQRT(ay);
  /* hypot / 2 + |x| / 2, the second product fused */
  T u_general = KSQRT(KFMA(ax, half, KN(kc_hypot_sqrt)(KMAX(ax, ay), KMIN(ax, ay), sqrt2)
                                         * half));
  int rescale = (u_general == 0) | (u_general == KINF);
  T ar = KABS(r);
  T h = KN(kc_hypot_sqrt)(KMAX(ar, one), KMIN(ar, one), sqrt2);
  T sq_1h = KSQRT(h + one);
  T sq_rh = KSQRT(r + h);
  T u = KSEL(eq, sq_ax * k_eq,
             KSEL(rescale, KSEL(gt, sq_ax * (sq_1h * rsqrt2), sq_ay * (sq_rh * rsqrt2)),
                  u_general));
  T ratio = KSEL(eq, one, KSEL(lt, sq_ax / sq_ay, sq_ay / sq_ax));
  T v = KSEL(eq, sq_ay * k_eq_y,
             KSEL(rescale, KSEL(gt, (sq_ay * ratio) / (sq_1h * sqrt2), sq_ay / (sq_rh * sqrt2)),
                  ay / (u_general * (T)2)));
  int neg_y = y < 0;
  *re = KSEL(x >= 0, u, v);
  *im = KSEL(x < 0, KSEL(neg_y, -u, u), KSEL(neg_y, -v, v));
}

/* ---- expm1, tanh, tan (XLA's elemental emitter) ---- */

/* cos(v) - 1: -v^2/2 + v^4 P(v^2) (Cephes' cosm1) while v^2 <= 0.61685, else cos(v) - 1. */
static inline T KN(kc_cosm1)(T v, T vr) {
  T v2 = v * v;
  T p = 0;
  p = KFMA(p, v2, (T)4.7377507964246204691685e-14);
  p = KFMA(p, v2, (T)-1.1470284843425359765671e-11);
  p = KFMA(p, v2, (T)2.0876754287081521758361e-9);
  p = KFMA(p, v2, (T)-2.7557319214999787979814e-7);
  p = KFMA(p, v2, (T)2.4801587301570552304991e-5);
  p = KFMA(p, v2, (T)-1.3888888888888872993737e-3);
  p = KFMA(p, v2, (T)4.1666666666666666609054e-2);
  T small = KFMA(v2 * v2, p, (T)-0.5 * v2);
  T large = KN(kc_cos)(vr) + (T)-1;
  return KSEL(v2 > (T)0.61685, large, small);
}

/* expm1(x) cos(y) + cosm1(y) + i exp(x) sin(y) (imaginary part 0 for y == 0). */
static inline void KN(kc_expm1c)(T xr, T yr, T *re, T *im) {
  T y = KFTZ(yr);
  T em = KN(kc_expm1)(xr);
  T cm = KN(kc_cosm1)(y, yr);
  *re = KFMA(em, cm + (T)1, cm);
  *im = KSEL(y == 0, (T)0, (em + (T)1) * KN(kc_sin)(yr));
}

/* tanh(a + ib) of flushed a, b (ar, br raw): (expm1(2a) - expm1(-2a) + 4i sin(b) cos(b))
   / (expm1(2a) + expm1(-2a) + 4 cos(b)^2); +-1 where the denominator overflows, C99's
   NaNs and zeros for infinite or NaN parts. */
static inline void KN(kc_tanh_tail)(T a, T b, T ar, T e1, T e2, T c, T s, T *re, T *im) {
  T four = 4;
  T num_im = four * (c * s);
  T e_sum = e1 + e2;
  T den = KFMA(c * c, four, e_sum);
  T rr = KSEL(e_sum == KINF, KCPS((T)1, ar), (e1 - e2) / den);
  T ii = num_im / den;
  int a_inf = KABS(a) == KINF;
  int nan_2b = num_im != num_im;
  *re = KSEL(nan_2b & !a_inf, (T)KNAN, rr);
  *im = KSEL((b == 0) | (a_inf & nan_2b), (T)0, ii);
}

static inline void KN(kc_tanh_parts)(T a, T b, T ar, T br, T *re, T *im) {
  T two_a = a + a;
  T e1 = KN(kc_expm1)(two_a);
  T e2 = KN(kc_expm1)((T)-1 * two_a);
  KN(kc_tanh_tail)(a, b, ar, e1, e2, KN(kc_cos)(br), KN(kc_sin)(br), re, im);
}

static inline void KN(kc_ctanh)(T xr, T yr, T *re, T *im) {
  KN(kc_tanh_parts)(KFTZ(xr), KFTZ(yr), xr, yr, re, im);
}

/* tan(z) = -i tanh(-y + ix). */
static inline void KN(kc_ctan)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr);
  T tr, ti;
  KN(kc_tanh_parts)((T)-1 * y, x, -yr, xr, &tr, &ti);
  *re = ti;
  *im = (T)-1 * tr;
}

/* ---- sin, cos (JAX's expansion), sinh, cosh (CHLO's) ---- */

/* sin(x) cosh(y) + i cos(x) sinh(y), cosh/sinh from expm1(y), expm1(-y); real part +0
   where x == 0. */
static inline void KN(kc_csin)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr);
  T ep = KN(kc_expm1)(yr), em = KN(kc_expm1)(-yr);
  T sh = (ep - em) * (T)0.5, ch = ((ep + em) + (T)2) * (T)0.5;
  *re = KSEL(x == 0, (T)0, KN(kc_sin)(xr) * ch);
  *im = KN(kc_cos)(xr) * sh;
}

/* cos(x) cosh(y) - i sin(x) sinh(y), imaginary part +0 where x == 0. */
static inline void KN(kc_ccos)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr);
  T ep = KN(kc_expm1)(yr), em = KN(kc_expm1)(-yr);
  T sh = (ep - em) * (T)0.5, ch = ((ep + em) + (T)2) * (T)0.5;
  *re = KN(kc_cos)(xr) * ch;
  *im = KSEL(x == 0, (T)0, (-KN(kc_sin)(xr)) * sh);
}

/* sinh(z) = exp(z - log 2) - exp(-log 2 - z) (CHLO's decomposition), cosh with +. */
static inline void KN(kc_sinh_cosh)(T xr, T yr, int sign, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr);
  const T c = K(-0.693147182f, -0.69314718055994529);
  T px = x + c, py = y + (T)0;
  T nx = c - x, ny = (T)0 - y;
  T ar, ai, br, bi;
  KN(kc_exp_parts)(px, py, px, py, &ar, &ai);
  KN(kc_exp_parts)(nx, ny, nx, ny, &br, &bi);
  *re = KSEL(sign < 0, ar - br, ar + br);
  *im = KSEL(sign < 0, ai - bi, ai + bi);
}
static inline void KN(kc_csinh)(T xr, T yr, T *re, T *im) {
  KN(kc_sinh_cosh)(xr, yr, -1, re, im);
}
static inline void KN(kc_ccosh)(T xr, T yr, T *re, T *im) {
  KN(kc_sinh_cosh)(xr, yr, 1, re, im);
}

/* ---- log1p (XLA's expansion, compensated near zero) ---- */

static inline T KN(kc_two_sum)(T a, T b, T *err) {
  T s = a + b;
  T v = s - a;
  *err = (a - (s - v)) + (b - v);
  return s;
}

/* log(1 + z): Re 0.5 log1p(2x + x^2 + y^2) (the sum compensated), 0.5 log((1+x)^2 + y^2)
   near -1 (|1 + x| + |y| < 0.2, the first square fused), log(m) + 0.5 log1p((n/m)^2) for
   huge |z|; Im atan2(y, 1 + x). */
static inline void KN(kc_clog1p)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr);
  T half = 0.5, one = 1;
  T ax = KABS(x), ay = KABS(y);
  T mx = KMAX(ax, ay), mn = KMIN(ax, ay);
  T xp1 = x + one;
  T y2h = y * y, x2h = x * x;
  T y2l = KN(kc_sq_err)(y, y2h), x2l = KN(kc_sq_err)(x, x2h);
  T e1, e2, e3, e4;
  T s1 = KN(kc_two_sum)(x + x, y2h, &e1);
  T s2 = KN(kc_two_sum)(s1, x2h, &e2);
  T s3 = KN(kc_two_sum)(s2, y2l, &e3);
  T s4 = KN(kc_two_sum)(s3, x2l, &e4);
  T s = s4 + (((e1 + e2) + e3) + e4);
  T regular = KN(kc_log1p)(s) * half;
  T near_minus_one = KN(kc_log)(KFMA(xp1, xp1, y2h)) * half;
  T q = mn / mx;
  T ratio = KSEL(mn == mx, one, q * q);
  T huge = KFMA(KN(kc_log1p)(ratio), half, KN(kc_log)(mx));
  *re = KSEL(mx > K(1.84467419e17f, 1.3407807929942595e152), huge,
             KSEL((KABS(xp1) + ay) < (T)0.2, near_minus_one, regular));
  *im = KATAN2(yr, xp1);
}

/* ---- asin, acos, asinh, acosh (one kernel w(z)), atan, atanh (CHLO's decompositions)
   ---- */

/* hypot(m, n), m = max, n = min, as the kernel writes it: m sqrt(1 + q^2) (q = n/m,
   1 + q^2 fused), m + m q^2 / 2 where the root rounds to 1, m sqrt(2) for m == n. */
static inline T KN(kc_hypot)(T m, T n, T sqrt2) {
  T one = 1;
  T q = n / m;
  T root = KSQRT(KFMA(q, q, one));
  T q2 = q * q;
  T general = KSEL((root == one) & (q2 > 0), KFMA(m * q2, (T)0.5, m), m * root);
  return KSEL(m == n, m * sqrt2, general);
}

/* (Re w, Im w) of the asin/acos kernel at sx + i sy (flushed; y_raw: the imaginary part
   unflushed, which Re w passes through for huge operands): a modified Hull et al.
   algorithm, its constants folded by XLA (sqrt2, safe_max = sqrt(largest) / 8, the bound
   of safe_max_opt and its two values, log 2, safe_min = sqrt(smallest normal) * 4). */
static inline void KN(kc_asin_kernel)(T sx, T sy, T y_raw, T *wr, T *wi) {
  const T sqrt2 = K(1.41421354f, 1.4142135623730951);
  const T safe_max = K(2.30584287e+18f, 1.6759759912428245e+153);
  const T opt_bound = K(2.30584285e+30f, 1.6759759912428244e+165);
  const T opt_lo = K(2.30584274e+12f, 1.6759759912428242e+147);
  const T opt_hi = K(2.30584283e+20f, 1.6759759912428244e+155);
  const T ln2 = K(0.693147182f, 0.69314718055994529);
  const T safe_min = K(4.33680869e-19f, 5.9666725849601654e-154);
  T one = 1, half = 0.5;
  T x = KABS(sx), y = KABS(sy);
  T xp1 = x + one;
  T xm1 = x + (T)-1;
  T r = KN(kc_hypot)(KMAX(KABS(xp1), y), KMIN(KABS(xp1), y), sqrt2);
  T s = KN(kc_hypot)(KMAX(KABS(xm1), y), KMIN(KABS(xm1), y), sqrt2);
  T a = (r + s) * half;
  T half_apx = (a + x) * half;
  T yy = sy * sy;
  T rpxp1 = r + xp1;
  T smxm1 = s - xm1;
  T spxm1 = s + xm1;
  T inner = KSQRT(half_apx * ((yy / rpxp1) + smxm1));
  T outer = y * KSQRT((half_apx / rpxp1) + (half_apx / spxm1));
  *wr = KSEL(KMAX(x, y) >= safe_max, KABS(y_raw), KSEL(x <= one, inner, outer));
  T opt = KSEL(x < opt_bound, opt_lo, opt_hi);
  int y_big = y >= opt;
  T m = KSEL(y_big, y, x);
  T xoy = KSEL(y_big & (y != KINF), x / y, (T)0);
  T huge = KFMA(KN(kc_log1p)(xoy * xoy), half, KN(kc_log)(m) + ln2);
  int tiny = (y < safe_min) & (x < one);
  T half_yy = yy * half;
  T d = half_yy / rpxp1;
  T am1 = KSEL(tiny, -((xp1 * xm1) / (a + one)),
               KSEL(x >= one, KFMA(spxm1, half, d),
                    KSEL(a <= (T)1.5, d + half_yy / smxm1, a + (T)-1)));
  T sq = KSQRT(am1 * (a + one));
  *wi = KSEL(m >= KSEL(y_big, opt, safe_max), huge,
             KSEL(tiny, y / sq, KN(kc_log1p)(am1 + sq)));
}

/* asin(z) = atan2(x, Re w) + i sign(y) Im w. */
static inline void KN(kc_casin)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr), wr, wi;
  KN(kc_asin_kernel)(x, y, yr, &wr, &wi);
  *re = KATAN2(xr, wr);
  *im = KSEL(y < 0, -wi, wi);
}

/* acos(z) = atan2(Re w, x) - i sign(y) Im w. */
static inline void KN(kc_cacos)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr), wr, wi;
  KN(kc_asin_kernel)(x, y, yr, &wr, &wi);
  *re = KATAN2(wr, xr);
  *im = KSEL(y < 0, wi, -wi);
}

/* asinh(z) = sign(x) Im w(iz) + i atan2(y, Re w(iz)), iz = -y + ix. */
static inline void KN(kc_casinh)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr), wr, wi;
  KN(kc_asin_kernel)(-y, x, xr, &wr, &wi);
  *re = KSEL(x < 0, -wi, wi);
  *im = KATAN2(yr, wr);
}

/* acosh(z) = Im w + i sign(y) atan2(Re w, x). */
static inline void KN(kc_cacosh)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr), wr, wi;
  KN(kc_asin_kernel)(x, y, yr, &wr, &wi);
  T t = KATAN2(wr, xr);
  *re = wi;
  *im = KSEL(y < 0, -t, t);
}

/* atanh(a + ib) of flushed parts: sign(a) log1p(4|a| / ((1 - |a|)^2 + b^2)) / 4 +
   i atan2(2b, (1 - |a|)(1 + |a|) - b^2) / 2; 1/|a| and pi/2 forms for huge parts (the
   bounds 2**48 / 2**106, the ratios 2**24 + 2 / 2**53 + 2). */
static inline void KN(kc_atanh_parts)(T a, T b, T *re, T *im) {
  const T bound = K(2.81475044e+14f, 8.1129638414606718e+31);
  const T ratio = K(16777218.0f, 9007199254740994.0);
  const T pi = K(3.14159274f, 3.1415926535897931);
  T one = 1;
  T ax = KABS(a), ay = KABS(b);
  int inside = (ax < bound) & (ay < bound);
  T s = one - ax;
  T b2 = b * b;
  int infinite = (ax == KINF) | (ay == KINF);
  T far = one / (((ax / b) + (b / ax)) * b);
  T q = KSEL(inside, ax / KFMA(s, s, b2),
             KSEL(ay * ratio < ax, one / ax, KSEL(infinite, (T)0, far)));
  *re = (KSEL(a >= 0, one, -one) * KN(kc_log1p)(q * (T)4)) * (T)0.25;
  T angle = KATAN2(b + b, KFMA(s, ax + one, -b2));
  *im = KSEL(inside, angle, KSEL(b >= 0, one, -one) * pi) * (T)0.5;
}

static inline void KN(kc_catanh)(T xr, T yr, T *re, T *im) {
  KN(kc_atanh_parts)(KFTZ(xr), KFTZ(yr), re, im);
}

/* atan(z) = -i atanh(iz). */
static inline void KN(kc_catan)(T xr, T yr, T *re, T *im) {
  T x = KFTZ(xr), y = KFTZ(yr), ar, ai;
  KN(kc_atanh_parts)(-y, x, &ar, &ai);
  *re = ai;
  *im = -ar;
}

#undef T
#undef KN
#undef K
#undef KFTZ
#undef KSEL
#undef KFMA
#undef KSQRT
#undef KABS
#undef KCPS
#undef KSIN
#undef KCOS
#undef KATAN2
#undef KMAX
#undef KMIN
#undef KXEXP
#undef KXEXPM1
#undef KXLOG
#undef KXLOG1P
#undef KINF
#undef KNAN
