
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
/* XLA's CPU runtime runs compiled code with denormals flushed: DAZ (subnormal operands
   read as zero) and FTZ (subnormal results become zero) in MXCSR. Each segment sets both
   on the calling thread and gives back the caller's bits when it returns; each parallel
   region sets them on every thread of its team and gives the bits back at its end (the
   kiln_ftz reduction: its initializer runs on each thread as the region starts, its
   combiner on each thread as the region ends, inside libgomp's atomic section). */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__SSE__) && defined(__GNUC__)
/* The compilers' MXCSR builtins, not <xmmintrin.h>: every program's build parses this
   prelude, and that header is ~4,800 lines (<immintrin.h>, 47,000, was 40% of a build). */
static inline unsigned kiln_ftz_enter(void) {
  unsigned c = __builtin_ia32_stmxcsr(); __builtin_ia32_ldmxcsr(c | 0x8040u); return c; }
static inline unsigned kiln_ftz_clear(void) {
  unsigned c = __builtin_ia32_stmxcsr(); __builtin_ia32_ldmxcsr(c & ~0x8040u); return c; }
static inline unsigned kiln_ftz_leave(unsigned c) { __builtin_ia32_ldmxcsr(c); return c; }
#else
static inline unsigned kiln_ftz_enter(void) { return 0u; }
static inline unsigned kiln_ftz_clear(void) { return 0u; }
static inline unsigned kiln_ftz_leave(unsigned c) { return c; }
#endif
static unsigned kiln_ftz_tok __attribute__((unused));
#ifdef _OPENMP
#pragma omp declare reduction(kiln_ftz : unsigned : omp_out = kiln_ftz_leave(omp_in)) \
    initializer(omp_priv = kiln_ftz_enter())
#endif
/* Functions holding only small loops (SMALL_ELEMENTS): gcc's loop vectorizer, peeling and
   unrolling cost compile time there that the run never earns back. `omp simd` loops still
   vectorize (OpenMP forces them), so reductions sum in the same order as elsewhere. */
/* KILN_SMALL_O1: small functions with no reduction whose order of additions depends on
   vectorization (no `omp simd reduction`): each element is the same scalar arithmetic at
   any optimization level (no contraction, no reassociation: the command line's
   -ffp-contract=off and math flags stay in force), so gcc builds them at -Og, every
   call in them inlined (`flatten`: the XLA math they call is then compiled at -Og with
   them, not on its own at -O3; `noinline` functions stay calls): a small function with
   one `exp` builds in a third of -O3's time, and the name stays from when it was -O1. */
#if defined(__GNUC__) && !defined(__clang__)
#define KILN_SMALL __attribute__((optimize("no-tree-loop-vectorize", "no-tree-slp-vectorize", \
                                           "no-peel-loops", "no-unroll-loops")))
#define KILN_SMALL_O1 __attribute__((optimize("Og"), flatten))
#else
#define KILN_SMALL
#define KILN_SMALL_O1
#endif
static inline int64_t kiln_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t kiln_floormod(int64_t a, int64_t b) {
  int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t kiln_clampi(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v); }
static inline float kiln_maxf(float a, float b) { return (a != a || a > b) ? a : b; }
static inline float kiln_minf(float a, float b) { return (a != a || a < b) ? a : b; }
static inline double kiln_maxd(double a, double b) { return (a != a || a > b) ? a : b; }
static inline double kiln_mind(double a, double b) { return (a != a || a < b) ? a : b; }
static inline float kiln_signf(float a) { return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : a); }
static inline double kiln_signd(double a) { return a > 0.0 ? 1.0 : (a < 0.0 ? -1.0 : a); }
static inline float kiln_logistic_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline double kiln_logistic_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline float kiln_rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double kiln_rsqrtd(double x) { return 1.0 / sqrt(x); }
