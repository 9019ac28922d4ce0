/* The check kiln/compiler/render/trig_math.py runs before generated code may call
   ksin64/kcos64 (libm_sincos64.h) for float64 sin/cos: their bits, through vectorized
   loops (the SIMD clones), against this machine's sin/cos on a sample of float64 bit
   patterns, with denormals flushed (MXCSR DAZ+FTZ, as compiled kernels run) and without.
   Built with KSC_MA defined either way. */
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include "libm_sincos64.h"

#define KSC_CHUNK 4096

static void ksc_set_flush(int on) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned c = __builtin_ia32_stmxcsr();
  __builtin_ia32_ldmxcsr(on ? (c | 0x8040u) : (c & ~0x8040u));
#else
  (void)on;
#endif
}

static int64_t ksc_check(const double *x, int n) {
  double s[KSC_CHUNK], c[KSC_CHUNK];
  int64_t bad = 0;
  for (int i = 0; i < n; i++) { s[i] = ksin64(x[i]); c[i] = kcos64(x[i]); }
  for (int i = 0; i < n; i++) {
    double ls = sin(x[i]), lc = cos(x[i]);
    bad += memcmp(&ls, &s[i], 8) != 0;
    bad += memcmp(&lc, &c[i], 8) != 0;
  }
  return bad;
}

/* Mismatches (sin and cos counted apart) over the patterns whose high words are
   first + k * step (k >= 0, below 2^32), each with a pseudo-random low word, and the
   `dense` patterns either side of each of `edges`, both signs; with the flush bits on
   where flush != 0 (the caller's MXCSR restored). */
int64_t kiln_trig64_probe(int64_t first, int64_t step, const uint64_t *edges, int n_edges,
                          int dense, int flush) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned saved = __builtin_ia32_stmxcsr();
#endif
  ksc_set_flush(flush);
  double x[KSC_CHUNK];
  int n = 0;
  int64_t bad = 0;
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (uint64_t b = (uint64_t)first; b < (1ull << 32); b += (uint64_t)step) {
    h ^= h << 13; h ^= h >> 7; h ^= h << 17;
    uint64_t u = (b << 32) | (h & 0xffffffffu);
    memcpy(&x[n++], &u, 8);
    if (n == KSC_CHUNK) { bad += ksc_check(x, n); n = 0; }
  }
  for (int e = 0; e < n_edges; e++)
    for (int d = -dense; d <= dense; d++)
      for (uint64_t sign = 0; sign < 2; sign++) {
        uint64_t u = (edges[e] + (uint64_t)(int64_t)d) ^ (sign << 63);
        memcpy(&x[n++], &u, 8);
        if (n == KSC_CHUNK) { bad += ksc_check(x, n); n = 0; }
      }
  bad += ksc_check(x, n);
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_ldmxcsr(saved);
#endif
  return bad;
}
