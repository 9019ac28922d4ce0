/* XLA's float32 asin and acos (the expansions of xla_math.h's comment above its
   KILN_LN2F), apart from xla_math.h because they call the float32 atan2 through the macro
   KILN_ATAN2F: the C library's atan2f, or katan2_32 (libm_atan2.h: its bits in vectorizable
   code) where generated code defines the macro first (render/binary_math.py). xla_math.h
   may be in a program's precompiled part (build.PCH_MARK); this file never is, so the
   program's definition of the macro always comes first. Needs xla_math.h before it. */
#ifndef KILN_ATAN2F
#define KILN_ATAN2F atan2f
#endif

static inline float xasin32(float x) {
  float xf = ftz32(x);
  float d = sqrtf(ftz32((1.0f - xf) * (xf + 1.0f))) + 1.0f;
  float a = ftz32(KILN_ATAN2F(x, d));
  return a + a;
}
static inline float xacos32(float x) {
  float xf = ftz32(x);
  return ftz32(KILN_ATAN2F(sqrtf(ftz32((1.0f - xf) * (xf + 1.0f))), x));
}
