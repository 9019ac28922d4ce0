/* fexp32_in: fexp32 of an argument known to lie in [-87.33654, 88.72283] (the row's
   min and max checked once per row): no selects. The other two add them. */
static inline float fexp32_in(float x) {
  const float shifter = 12582912.0f;           /* 1.5 * 2^23 */
  float t = fmaf(x, 1.44269504088896341f, shifter);
  float n = t - shifter;                       /* rint(x / ln 2) */
  float r = fmaf(n, -0.693359375f, x);
  r = fmaf(n, 2.12194440e-4f, r);
  float p = fmaf(1.3836537e-3f, r, 8.3750607e-3f);
  p = fmaf(p, r, 4.1668244e-2f);
  p = fmaf(p, r, 1.6666417e-1f);
  p = fmaf(p, r, 4.9999991e-1f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  uint32_t ti, pi; memcpy(&ti, &t, 4); memcpy(&pi, &p, 4);
  pi += ti << 23;                              /* p * 2^n */
  float out; memcpy(&out, &pi, 4);
  return out;
}

/* fexp32 of an argument known to be at most 88.72283 and not NaN. */
static inline float fexp32_fin(float x) {
  return sel32(x < -87.33654f, 0.0f, fexp32_in(x));   /* below FLT_MIN: 0, as XLA */
}

static inline float fexp32(float x) {
  float out = fexp32_in(x);
  out = sel32(!(x <= 88.72283f), x + INFINITY, out);   /* overflow: inf; NaN: NaN */
  return sel32(x < -87.33654f, 0.0f, out);     /* below FLT_MIN: 0, as XLA */
}
