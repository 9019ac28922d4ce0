/* The check kiln/compiler/render/binary_math.py runs before generated code may call
   kpow32 (libm_pow.h) or katan2_32 (libm_atan2.h) for float32 pow/atan2: their bits
   against this machine's powf/atan2f on pseudo-random pairs of float32 bit patterns
   (every exponent of both arguments, and pairs where the results are neither 0, 1 nor
   infinite) and on every pair of the caller's special patterns, with denormals flushed
   (MXCSR DAZ+FTZ, as compiled kernels run) and without. Built with KPOW_MA and KATAN_MA
   defined as the variant tried. */
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include "xla_math.h"
#include "libm_pow.h"
#include "libm_atan2.h"

#define KB_CHUNK 4096

static void kb_set_flush(int on) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned c = __builtin_ia32_stmxcsr();
  __builtin_ia32_ldmxcsr(on ? (c | 0x8040u) : (c & ~0x8040u));
#else
  (void)on;
#endif
}

static uint32_t kb_next(uint64_t *s) {
  *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
  return (uint32_t)(*s >> 16);
}

static int64_t kb_check(const float *x, const float *y, int n, int which) {
  float r[KB_CHUNK];
  int64_t bad = 0;
  if (which == 0) {
    for (int i = 0; i < n; i++) r[i] = kpow32(x[i], y[i]);
    for (int i = 0; i < n; i++) { float l = powf(x[i], y[i]); bad += memcmp(&l, &r[i], 4) != 0; }
  } else {
    for (int i = 0; i < n; i++) r[i] = katan2_32(x[i], y[i]);
    for (int i = 0; i < n; i++) { float l = atan2f(x[i], y[i]); bad += memcmp(&l, &r[i], 4) != 0; }
  }
  return bad;
}

/* Mismatches of pow (which == 0) or atan2 (which == 1) over n pseudo-random pairs from
   seed, a quarter each: both patterns uniform; the second's exponent limited (pow: |y| in
   [2^-10, 2^6), where x^y is finite and not 1) or near the first's (atan2: |y / x|
   between 2^-8 and 2^8); the second a small integer or half of one (pow), or near
   +-1 (atan2's x, whose x == 1 is its own case); one of `special` with a uniform
   pattern. Then every ordered pair of `special`. With the flush bits on where
   flush != 0 (the caller's MXCSR restored). */
int64_t kiln_binary_probe(int which, uint64_t seed, int64_t n, const uint32_t *special,
                          int n_special, int flush) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned saved = __builtin_ia32_stmxcsr();
#endif
  kb_set_flush(flush);
  float x[KB_CHUNK], y[KB_CHUNK];
  uint64_t s = seed | 1u;
  int m = 0;
  int64_t bad = 0;
  for (int64_t k = 0; k < n; k++) {
    uint32_t u = kb_next(&s), v = kb_next(&s), w = kb_next(&s);
    switch (k & 3) {
      case 1:
        if (which == 0) v = (v & 0x807fffffu) | ((0x75u + w % 16u) << 23);
        else v = (v & 0x807fffffu) | ((((u >> 23) + w % 16u - 8u) & 0xffu) << 23);
        break;
      case 2:
        if (which == 0) {
          float f = (float)((int32_t)(w % 129u) - 64) * ((w >> 8) & 1 ? 0.5f : 1.0f);
          memcpy(&v, &f, 4);
        } else {
          v = (v & 0x007fffffu) | ((0x7eu + (w & 1u)) << 23) | (w & 0x80000000u);
        }
        break;
      case 3:
        if (n_special > 0) {
          if (w & 1) u = special[(w >> 1) % (uint32_t)n_special];
          else v = special[(w >> 1) % (uint32_t)n_special];
        }
        break;
      default:
        break;
    }
    memcpy(&x[m], &u, 4);
    memcpy(&y[m], &v, 4);
    if (++m == KB_CHUNK) { bad += kb_check(x, y, m, which); m = 0; }
  }
  for (int i = 0; i < n_special; i++)
    for (int j = 0; j < n_special; j++) {
      memcpy(&x[m], &special[i], 4);
      memcpy(&y[m], &special[j], 4);
      if (++m == KB_CHUNK) { bad += kb_check(x, y, m, which); m = 0; }
    }
  bad += kb_check(x, y, m, which);
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_ldmxcsr(saved);
#endif
  return bad;
}
