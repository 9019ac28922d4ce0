/* The check kiln/compiler/render/trig_math.py runs before generated code may call
   ksin32/kcos32/ktan32 (libm_trig.h) for float32 sin/cos/tan: their bits against this
   machine's sinf/cosf/tanf on a sample of float32 bit patterns, with denormals flushed
   (MXCSR DAZ+FTZ, as compiled kernels run) and without. Built with KTRIG_MA defined
   either way. */
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include "xla_math.h"
#include "libm_trig.h"

#define KTRIG_CHUNK 4096

static void ktrig_set_flush(int on) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned c = __builtin_ia32_stmxcsr();
  __builtin_ia32_ldmxcsr(on ? (c | 0x8040u) : (c & ~0x8040u));
#else
  (void)on;
#endif
}

static int64_t ktrig_check(const float *x, int n, int which_tan) {
  float s[KTRIG_CHUNK], c[KTRIG_CHUNK];
  int64_t bad = 0;
  if (which_tan) {
    for (int i = 0; i < n; i++) s[i] = ktan32(x[i]);
    for (int i = 0; i < n; i++) { float l = tanf(x[i]); bad += memcmp(&l, &s[i], 4) != 0; }
    return bad;
  }
  for (int i = 0; i < n; i++) { s[i] = ksin32(x[i]); c[i] = kcos32(x[i]); }
  for (int i = 0; i < n; i++) {
    float ls = sinf(x[i]), lc = cosf(x[i]);
    bad += memcmp(&ls, &s[i], 4) != 0;
    bad += memcmp(&lc, &c[i], 4) != 0;
  }
  return bad;
}

/* Mismatches (sin and cos counted apart; tan's alone where which_tan != 0) over the
   patterns first + k * step (k >= 0, below 2^32) and each of `edges` with the `dense` patterns either side of it,
   both signs; with the flush bits on where flush != 0 (the caller's MXCSR restored). */
int64_t kiln_trig_probe(int64_t first, int64_t step, const uint32_t *edges, int n_edges,
                        int dense, int flush, int which_tan) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned saved = __builtin_ia32_stmxcsr();
#endif
  ktrig_set_flush(flush);
  float x[KTRIG_CHUNK];
  int n = 0;
  int64_t bad = 0;
  for (uint64_t b = (uint64_t)first; b < (1ull << 32); b += (uint64_t)step) {
    uint32_t u = (uint32_t)b;
    memcpy(&x[n++], &u, 4);
    if (n == KTRIG_CHUNK) { bad += ktrig_check(x, n, which_tan); n = 0; }
  }
  for (int e = 0; e < n_edges; e++)
    for (int d = -dense; d <= dense; d++)
      for (uint32_t sign = 0; sign < 2; sign++) {
        uint32_t u = (edges[e] + (uint32_t)d) ^ (sign << 31);
        memcpy(&x[n++], &u, 4);
        if (n == KTRIG_CHUNK) { bad += ktrig_check(x, n, which_tan); n = 0; }
      }
  bad += ktrig_check(x, n, which_tan);
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_ldmxcsr(saved);
#endif
  return bad;
}
