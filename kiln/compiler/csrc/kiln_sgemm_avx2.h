/* kiln's own single-threaded float32 GEMM for AVX2+FMA processors without AVX-512
   (included by kiln_sgemm.h): row-major C[M x N] = op(A)[M x K] op(B)[K x N] (+ beta C),
   the same contract as one BLAS call of the glue, with the bits of the scipy-openblas32
   wheel's Haswell sgemm (corename "Haswell"; its "Zen" target has the same kernel and
   blocking).

   That OpenBLAS, seen from kiln's row-major side (its M is kiln's columns, its N kiln's
   rows; benchmarks/NOTES.md, "Session 18, helper gemm2"):
   - K blocks of GEMM_Q 320 (the level-3 driver's min_l rule with GEMM_UNROLL_M 8), each
     block's sum added to C (beta C first);
   - column blocks of GEMM_P 320 by the same rule (min_i);
   - in the first column block the rows go to the kernel in calls of 12 rows while 12 are
     left, then 4 while more than 4 are left, then the rest; in the other column blocks
     the kernel gets all rows: 12 at a time, then 8, 4, 2, 1;
   - each element is one chain of fused multiply-adds over k from +0, except in 8-column
     chunks the kernel runs with two accumulators (k even / k odd over the first
     kc & ~7 values, the rest on the even one; the two added at the end): in 4-row calls
     every full 8-column chunk; in 12-row calls (when the block has >= 16 columns) the
     first chunk of rows 0-5, and the last full chunk of rows 0-5 when the block has an
     even number of full chunks, else of rows 6-11.
   This kernel computes each element in exactly that order, with its own blocking:
   B packed per K block into 8-column panels, a 6 x 16 one-chain micro-kernel (12 ymm
   accumulators), a 6 x 8 two-chain one (12), A read in place (rows) or packed per 6-row
   piece (transposed). Any sub-rectangle of a call can be computed on its own
   (ksh_sub: the split's blocks), with the bits of the whole call. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#define KILN_SGEMM_OWN 1
#define KILN_SGEMM_OWN_AVX2 1
#define KSH_Q 320        /* OpenBLAS Haswell SGEMM_DEFAULT_Q */
#define KSH_P 320        /* OpenBLAS Haswell SGEMM_DEFAULT_P */
#define KSH_UNROLL 8     /* OpenBLAS Haswell SGEMM_DEFAULT_UNROLL_M */
#define KSH_MR 6
/* Tuning switches (measured on a Zen 3: benchmarks/NOTES.md, session 18). */
#ifndef KSH_PACK_A
#define KSH_PACK_A 0          /* 1: pack a plain A's 6-row pieces too (else read in place) */
#endif
#ifndef KSH_MAX_LOG2
#define KSH_MAX_LOG2 27       /* products of 2^KSH_MAX_LOG2 multiply-adds or more: BLAS */
#endif
#ifndef KSH_UNROLL_K
#define KSH_UNROLL_K 4
#endif
#define KSH_STR(x) #x
#define KSH_PRAGMA(x) _Pragma(KSH_STR(x))
#define KSH_UNROLL_PRAGMA KSH_PRAGMA(GCC unroll KSH_UNROLL_K)
#ifdef KSH_PF_B
#define KSH_PREFETCH_B _mm_prefetch((const char *)(b0 + k * 8 + KSH_PF_B), _MM_HINT_T0);
#else
#define KSH_PREFETCH_B
#endif

static __thread float *ksh_bbuf, *ksh_abuf;

/* The level-3 driver's block rule (min_l over K with Q, min_i over columns with P). */
static inline int64_t ksh_block(int64_t rest, int64_t q) {
  if (rest >= 2 * q) return q;
  if (rest > q) return ((rest / 2 + KSH_UNROLL - 1) / KSH_UNROLL) * KSH_UNROLL;
  return rest;
}

static inline __m256i ksh_mask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0 ? 0 : n > 8 ? 8 : n)), idx);
}

/* r[t] <- column t of the 8 x 8 matrix whose rows are r[0..7]. */
static inline void ksh_tr8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Pack op(B)[k0:k0+kc, j0:j0+nc] into panels of 8 columns (kc x 8 each), zero past nc. */
static void ksh_pack_b(int transB, const float *B, int64_t ldb, int64_t k0, int64_t kc,
                       int64_t j0, int64_t nc, float *restrict dst) {
  int64_t jp0 = 0;
  if (!transB) {   /* two panels a pass: each row's 64 bytes (a cache line) read at once */
    for (; jp0 + 16 <= nc; jp0 += 16) {
      const float *s = B + k0 * ldb + j0 + jp0;
      float *restrict d0 = dst + jp0 * kc, *restrict d1 = d0 + 8 * kc;
      for (int64_t k = 0; k < kc; k++) {
        _mm_prefetch((const char *)(s + (k + 8) * ldb), _MM_HINT_T0);
        _mm256_store_ps(d0 + k * 8, _mm256_loadu_ps(s + k * ldb));
        _mm256_store_ps(d1 + k * 8, _mm256_loadu_ps(s + k * ldb + 8));
      }
    }
  }
  for (int64_t jp = jp0; jp < nc; jp += 8) {
    const int64_t w = nc - jp < 8 ? nc - jp : 8;
    float *restrict d = dst + jp * kc;
    if (!transB) {
      const float *s = B + k0 * ldb + j0 + jp;
      if (w == 8) {
        for (int64_t k = 0; k < kc; k++) _mm256_store_ps(d + k * 8, _mm256_loadu_ps(s + k * ldb));
      } else {
        const __m256i m = ksh_mask(w);
        for (int64_t k = 0; k < kc; k++)
          _mm256_store_ps(d + k * 8, _mm256_maskload_ps(s + k * ldb, m));
      }
    } else {   /* B stored N x K: op(B)(k, j) = B[j * ldb + k]; 8 x 8 transposes */
      const float *s = B + (j0 + jp) * ldb + k0;
      int64_t kk = 0;
      if (w == 8) {
        for (; kk + 8 <= kc; kk += 8) {
          __m256 r0 = _mm256_loadu_ps(s + 0 * ldb + kk), r1 = _mm256_loadu_ps(s + 1 * ldb + kk);
          __m256 r2 = _mm256_loadu_ps(s + 2 * ldb + kk), r3 = _mm256_loadu_ps(s + 3 * ldb + kk);
          __m256 r4 = _mm256_loadu_ps(s + 4 * ldb + kk), r5 = _mm256_loadu_ps(s + 5 * ldb + kk);
          __m256 r6 = _mm256_loadu_ps(s + 6 * ldb + kk), r7 = _mm256_loadu_ps(s + 7 * ldb + kk);
          __m256 r[8] = {r0, r1, r2, r3, r4, r5, r6, r7};
          ksh_tr8(r);
          float *q = d + kk * 8;
          _Pragma("GCC unroll 8")
          for (int t = 0; t < 8; t++) _mm256_store_ps(q + 8 * t, r[t]);
        }
      }
      for (; kk < kc; kk++)
        for (int64_t j = 0; j < 8; j++) d[kk * 8 + j] = j < w ? s[j * ldb + kk] : 0.0f;
    }
  }
}

/* Pack a transposed A's rows i0..i0+mr (op(A)(i, k) = A[k * lda + i]) for k0..k0+kc as
   kc groups of 6 floats (d holds 2 more); rows past mr repeat row mr-1 (computed, never
   stored). */
static void ksh_pack_at(const float *A, int64_t lda, int64_t i0, int64_t mr, int64_t k0,
                        int64_t kc, float *restrict d) {
  const float *s = A + k0 * lda + i0;
  if (mr == KSH_MR) {   /* 8 floats stored per k, the last 2 overwritten by the next k */
    const __m256i m = ksh_mask(KSH_MR);
    for (int64_t k = 0; k < kc; k++) _mm256_storeu_ps(d + k * KSH_MR, _mm256_maskload_ps(s + k * lda, m));
    return;
  }
  for (int64_t k = 0; k < kc; k++)
    for (int i = 0; i < KSH_MR; i++) d[k * KSH_MR + i] = s[k * lda + (i < mr ? i : mr - 1)];
}

/* Pack A's rows i0..i0+mr (not transposed: op(A)(i, k) = A[i * lda + k]) for
   k0..k0+kc as kc groups of 6 floats, like ksh_pack_at (read in place, six rows a
   stream apart, it ran 7-15% behind OpenBLAS on a Zen 3). */
static void ksh_pack_a(const float *A, int64_t lda, int64_t i0, int64_t mr, int64_t k0,
                       int64_t kc, float *restrict d) {
  const float *s = A + i0 * lda + k0;
  int64_t k = 0;
  if (mr == KSH_MR) {
    for (; k + 8 <= kc; k += 8) {
      __m256 r[8];
      _Pragma("GCC unroll 6")
      for (int i = 0; i < KSH_MR; i++) r[i] = _mm256_loadu_ps(s + i * lda + k);
      r[6] = r[7] = _mm256_setzero_ps();
      ksh_tr8(r);
      _Pragma("GCC unroll 8")
      for (int t = 0; t < 8; t++) _mm256_storeu_ps(d + (k + t) * KSH_MR, r[t]);
    }
  }
  for (; k < kc; k++)
    for (int i = 0; i < KSH_MR; i++) d[k * KSH_MR + i] = s[(i < mr ? i : mr - 1) * lda + k];
}

/* Store: C = (first block: beta C, else C) + acc, columns < nr. */
static inline void ksh_store(float *r, __m256 acc, int64_t nr, int first, float beta) {
  if (nr >= 8) {
    __m256 o = first ? (beta != 0 ? _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(r))
                                  : _mm256_setzero_ps())
                     : _mm256_loadu_ps(r);
    _mm256_storeu_ps(r, _mm256_add_ps(o, acc));
  } else {
    const __m256i m = ksh_mask(nr);
    __m256 o = first ? (beta != 0 ? _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_maskload_ps(r, m))
                                  : _mm256_setzero_ps())
                     : _mm256_maskload_ps(r, m);
    _mm256_maskstore_ps(r, m, _mm256_add_ps(o, acc));
  }
}

/* Rows unrolled by hand (gcc kept arrays of accumulators in memory): kernels for 6, 4
   and 2 rows (a piece of mr rows runs on the smallest that holds it). */
#define KSH_R6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define KSH_R4(X) X(0) X(1) X(2) X(3)
#define KSH_R2(X) X(0) X(1)
#define KSH_AP(i) const float *ap##i = a + (int64_t)((i) < mr ? (i) : mr - 1) * ars;
/* C's rows are read at the end (other than in the first K block): fetched meanwhile. */
#define KSH_PF(i)                                                                         \
  if ((i) < mr) { _mm_prefetch((const char *)(C + (i) * ldc), _MM_HINT_T0);              \
                  _mm_prefetch((const char *)(C + (i) * ldc + 15), _MM_HINT_T0); }

/* One chain per element: C[mr x (8 or 16)] from panels b0 (and b1 when TWO).
   a(i, k) = a[i * ars + k * acs]. */
#define KSH_Z(i) __m256 c0##i = _mm256_setzero_ps(), c1##i = _mm256_setzero_ps();
#define KSH_F(i)                                                                          \
  { const __m256 av = _mm256_broadcast_ss(ap##i + k * acs);                               \
    c0##i = _mm256_fmadd_ps(av, v0, c0##i);                                               \
    if (two) c1##i = _mm256_fmadd_ps(av, v1, c1##i); }
#define KSH_S(i)                                                                          \
  if ((i) < mr) {                                                                         \
    ksh_store(C + (i) * ldc, c0##i, nr, first, beta);                                     \
    if (two) ksh_store(C + (i) * ldc + 8, c1##i, nr - 8, first, beta);                    \
  }
#define KSH_SINGLE(NAME, TWO, ROWS)                                                       \
  static inline void NAME(int64_t kc, const float *a, int64_t ars, int64_t acs,          \
                          const float *restrict b0, const float *restrict b1, float *C,   \
                          int64_t ldc, int64_t mr, int64_t nr, int first, float beta) {   \
    const int two = TWO;                                                                  \
    ROWS(KSH_Z) ROWS(KSH_AP) ROWS(KSH_PF)                                                 \
    (void)b1;                                                                             \
    KSH_UNROLL_PRAGMA                                                                     \
    for (int64_t k = 0; k < kc; k++) {                                                    \
      KSH_PREFETCH_B                                                                      \
      const __m256 v0 = _mm256_load_ps(b0 + k * 8);                                       \
      const __m256 v1 = TWO ? _mm256_load_ps(b1 + k * 8) : v0;                            \
      ROWS(KSH_F)                                                                         \
    }                                                                                     \
    ROWS(KSH_S)                                                                           \
  }

/* OpenBLAS's two-accumulator order for one 8-column chunk (see the header comment):
   c0 sums k even (and the tail past kc & ~7), c1 k odd. */
#define KSH_FE(i) c0##i = _mm256_fmadd_ps(_mm256_broadcast_ss(ap##i + k * acs), v0, c0##i);
#define KSH_FO(i) c1##i = _mm256_fmadd_ps(_mm256_broadcast_ss(ap##i + (k + 1) * acs), v1, c1##i);
#define KSH_SD(i) if ((i) < mr) ksh_store(C + (i) * ldc, _mm256_add_ps(c0##i, c1##i), nr, first, beta);
#define KSH_DOUBLE(NAME, ROWS)                                                            \
  static inline void NAME(int64_t kc, const float *a, int64_t ars, int64_t acs,          \
                          const float *restrict b, float *C, int64_t ldc, int64_t mr,     \
                          int64_t nr, int first, float beta) {                            \
    ROWS(KSH_Z) ROWS(KSH_AP) ROWS(KSH_PF)                                                 \
    const int64_t k8 = kc & ~(int64_t)7;                                                  \
    int64_t k = 0;                                                                        \
    for (; k < k8; k += 2) {                                                              \
      const __m256 v0 = _mm256_load_ps(b + k * 8), v1 = _mm256_load_ps(b + k * 8 + 8);   \
      ROWS(KSH_FE) ROWS(KSH_FO)                                                           \
    }                                                                                     \
    for (; k < kc; k++) {                                                                 \
      const __m256 v0 = _mm256_load_ps(b + k * 8);                                        \
      ROWS(KSH_FE)                                                                        \
    }                                                                                     \
    ROWS(KSH_SD)                                                                          \
  }

KSH_SINGLE(ksh_single16_6, 1, KSH_R6)
KSH_SINGLE(ksh_single8_6, 0, KSH_R6)
KSH_DOUBLE(ksh_double8_6, KSH_R6)
KSH_SINGLE(ksh_single16_4, 1, KSH_R4)
KSH_SINGLE(ksh_single8_4, 0, KSH_R4)
KSH_DOUBLE(ksh_double8_4, KSH_R4)
KSH_SINGLE(ksh_single16_2, 1, KSH_R2)
KSH_SINGLE(ksh_single8_2, 0, KSH_R2)
KSH_DOUBLE(ksh_double8_2, KSH_R2)

/* The kernel for a piece of mr rows. */
#define KSH_PICK(NAME, mr) ((mr) > 4 ? NAME##_6 : (mr) > 2 ? NAME##_4 : NAME##_2)
#define ksh_single16(kc, a, ars, acs, b0, b1, C, ldc, mr, nr, first, beta)               \
  KSH_PICK(ksh_single16, mr)(kc, a, ars, acs, b0, b1, C, ldc, mr, nr, first, beta)
#define ksh_single8(kc, a, ars, acs, b0, b1, C, ldc, mr, nr, first, beta)                \
  KSH_PICK(ksh_single8, mr)(kc, a, ars, acs, b0, b1, C, ldc, mr, nr, first, beta)
#define ksh_double8(kc, a, ars, acs, b, C, ldc, mr, nr, first, beta)                     \
  KSH_PICK(ksh_double8, mr)(kc, a, ars, acs, b, C, ldc, mr, nr, first, beta)

/* Whether 8-column chunk c (of c8 full ones in a block of mc columns) of a piece of
   this kind is summed with two accumulators. kind: 0 one chain, 4 a 4-row call, 'L' /
   'R' the halves (rows 0-5 / 6-11) of a 12-row call. */
static inline int ksh_dbl(int kind, int64_t c, int64_t c8, int64_t mc) {
  if (c >= c8) return 0;
  if (kind == 4) return 1;
  if (kind == 'L') return mc >= 16 && (c == 0 || (c8 % 2 == 0 && c == c8 - 1));
  if (kind == 'R') return mc >= 16 && c8 % 2 == 1 && c == c8 - 1;
  return 0;
}

/* Up to two pieces of <= 6 rows (rows [p0[q], p1[q]), kinds kind[q]) of one row group,
   columns [c0, c1) of the column block whose first column is j0 (width mc), one K
   block: 16 columns at a time, both pieces in turn (the B panels are read once from
   L2 for both). */
static void ksh_group(int np, const int *kind, const int64_t *p0, const int64_t *p1,
                      int64_t j0, int64_t mc, int64_t c0, int64_t c1, int64_t kc,
                      int transA, const float *A, int64_t lda, int64_t k0,
                      const float *bpk, float *C, int64_t ldc, int first, float beta) {
  const int64_t c8 = mc / 8;
  const float *a[2];
  int64_t ars, acs;
  for (int q = 0; q < np; q++) {
    float *d = ksh_abuf + q * (KSH_Q * KSH_MR + 16);
    if (transA) ksh_pack_at(A, lda, p0[q], p1[q] - p0[q], k0, kc, d);
    else if (KSH_PACK_A) ksh_pack_a(A, lda, p0[q], p1[q] - p0[q], k0, kc, d);
    a[q] = transA || KSH_PACK_A ? d : A + p0[q] * lda + k0;
  }
  if (transA || KSH_PACK_A) ars = 1, acs = KSH_MR;
  else ars = lda, acs = 1;
  for (int64_t j = c0; j < c1; j += 16) {
    const int64_t c = (j - j0) / 8, w = c1 - j < 16 ? c1 - j : 16;
    const float *b = bpk + (j - c0) * kc;
    for (int q = 0; q < np; q++) {
      const int64_t mr = p1[q] - p0[q];
      float *cc = C + p0[q] * ldc + j;
      const int d0 = ksh_dbl(kind[q], c, c8, mc), d1 = w > 8 && ksh_dbl(kind[q], c + 1, c8, mc);
      if (w > 8 && !d0 && !d1) {
        ksh_single16(kc, a[q], ars, acs, b, b + 8 * kc, cc, ldc, mr, w, first, beta);
        continue;
      }
      if (d0) ksh_double8(kc, a[q], ars, acs, b, cc, ldc, mr, 8, first, beta);
      else ksh_single8(kc, a[q], ars, acs, b, b, cc, ldc, mr, w < 8 ? w : 8, first, beta);
      if (w <= 8) continue;
      if (d1) ksh_double8(kc, a[q], ars, acs, b + 8 * kc, cc + 8, ldc, mr, 8, first, beta);
      else ksh_single8(kc, a[q], ars, acs, b + 8 * kc, b + 8 * kc, cc + 8, ldc, mr, w - 8,
                       first, beta);
    }
  }
}

/* Whether this thread has its packing buffers (allocated on the first call). */
static int ksh_ready(void) {
  if (!ksh_bbuf) {
    ksh_bbuf = aligned_alloc(64, (size_t)KSH_Q * KSH_P * 4);
    ksh_abuf = aligned_alloc(64, ((size_t)KSH_Q * KSH_MR + 16) * 2 * 4);
    if (!ksh_bbuf || !ksh_abuf) {
      free(ksh_bbuf); free(ksh_abuf); ksh_bbuf = ksh_abuf = NULL;
      return 0;
    }
  }
  return 1;
}

/* All of op(B) packed once, for row blocks that share it (gemm_split.h): the panels of
   column block j0 (width mc) and K block k0 start at K * j0 + k0 * ksh_r8(mc) (every
   column block but the last is a multiple of 8 wide), K * ksh_r8(N) floats in all.
   ksh_pack_unit packs columns [jc, jc + w) of one (column block, K block): jc - j0 a
   multiple of 8. */
static inline int64_t ksh_r8(int64_t n) { return (n + 7) / 8 * 8; }
static inline void ksh_pack_unit(int transB, const float *B, int64_t ldb, int64_t K,
                                 int64_t j0, int64_t mc, int64_t k0, int64_t kc, int64_t jc,
                                 int64_t w, float *bsh) {
  ksh_pack_b(transB, B, ldb, k0, kc, jc, w, bsh + K * j0 + k0 * ksh_r8(mc) + (jc - j0) * kc);
}

/* Rows [r0, r1) and columns [c0, c1) of the product C[M x N] = op(A) op(B) (+ beta C)
   with OpenBLAS's bits for the whole call; c0 - 0 is a multiple of 8 (a chunk start).
   bsh: all of op(B) already packed (ksh_pack_unit; only with c0 = 0, c1 = N), else
   NULL (each K block's panels packed here). Returns 0 when a buffer could not be
   allocated. */
static int ksh_sub_b(int transA, int transB, int64_t M, int64_t N, int64_t K,
                     const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                     int64_t ldc, float beta, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                     const float *bsh) {
  if (!ksh_ready()) return 0;
  for (int64_t j0 = 0, mc; j0 < N && j0 < c1; j0 += mc) {
    mc = ksh_block(N - j0, KSH_P);
    const int64_t b0 = c0 > j0 ? c0 : j0, b1 = c1 < j0 + mc ? c1 : j0 + mc;
    if (b1 <= b0) continue;
    for (int64_t k0 = 0, kc; k0 < K; k0 += kc) {
      kc = ksh_block(K - k0, KSH_Q);
      const float *bpk = bsh ? bsh + K * j0 + k0 * ksh_r8(mc) : ksh_bbuf;
      if (!bsh) ksh_pack_b(transB, B, ldb, k0, kc, b0, b1 - b0, ksh_bbuf);
      const int first = k0 == 0;
      /* Row groups: the first column block's calls of 12 / 4 / rest rows, the others'
         12 / 8 / 4 / 2 / 1 (each cut into pieces of <= 6 rows). */
      for (int64_t g = 0, gn; g < M && g < r1; g += gn) {
        const int64_t rest = M - g;
        if (j0 == 0) gn = rest >= 12 ? 12 : rest > 4 ? 4 : rest;
        else gn = rest >= 12 ? 12 : rest >= 8 ? 8 : rest >= 4 ? 4 : rest >= 2 ? 2 : 1;
        int kinds[2], np = 0;
        int64_t q0[2], q1[2];
        const int64_t step = gn == 8 ? 4 : KSH_MR;     /* halves of 12; 8 -> 4 + 4 */
        for (int64_t h = 0; h < gn; h += step) {
          int64_t p0 = g + h, p1 = g + (h + step < gn ? h + step : gn);
          /* a call of 3 rows is 2 + 1 with one chain each: kind 0 covers it */
          const int kind = gn == 12 ? (h == 0 ? 'L' : 'R') : gn == 4 ? 4 : 0;
          if (p0 < r0) p0 = r0;
          if (p1 > r1) p1 = r1;
          if (p1 <= p0) continue;
          kinds[np] = kind, q0[np] = p0, q1[np] = p1, np++;
        }
        if (np)
          ksh_group(np, kinds, q0, q1, j0, mc, b0, b1, kc, transA, A, lda, k0, bpk, C, ldc,
                    first, beta);
      }
    }
  }
  return 1;
}

/* Whether kiln's kernel takes this product (the whole product: its blocks on threads
   are sub-blocks of it). On a quiet Zen 3 it runs 5-11% behind the wheel's Haswell
   sgemm per thread (benchmarks/NOTES.md, session 18), so it takes only products where
   the two-thread split that it allows (gemm_split.h: the caller never waits for a late
   thread) pays for that: 2^20 .. 2^27 multiply-adds (the MLP's batch-128 products);
   larger ones (batch 1024, the 2048^2 dot) and skinny ones (N < 64) stay with
   OpenBLAS. */
static inline int kiln_sgemm_own_takes(int transA, int transB, int64_t M, int64_t N,
                                       int64_t K) {
  (void)transA; (void)transB;
  const int64_t macs = M * N * K;
  return M >= 8 && N >= 64 && K >= 32 && macs >= ((int64_t)1 << 20)
         && macs < ((int64_t)1 << KSH_MAX_LOG2);
}

static int ksh_sub(int transA, int transB, int64_t M, int64_t N, int64_t K,
                   const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                   int64_t ldc, float beta, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  return ksh_sub_b(transA, transB, M, N, K, A, lda, B, ldb, C, ldc, beta, r0, r1, c0, c1,
                   NULL);
}

static int kiln_sgemm_own(int transA, int transB, int64_t M, int64_t N, int64_t K,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                          int64_t ldc, float beta) {
  return ksh_sub(transA, transB, M, N, K, A, lda, B, ldb, C, ldc, beta, 0, M, 0, N);
}
