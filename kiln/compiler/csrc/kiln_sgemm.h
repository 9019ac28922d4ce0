/* kiln's own single-threaded float32 GEMM for AVX-512 processors (included by
   blas_glue.c): row-major C[M x N] = op(A)[M x K] op(B)[K x N] (+ beta C), the same
   contract as one BLAS call of the glue.

   Why: on the MLP's and the transformer's shapes (M = 64..1024, N >= 256, K = 128..1024,
   one block of a 2-thread split) the scipy-openblas32 wheel's SkylakeX sgemm reaches
   134-150 GFLOP/s of a core's ~170; this kernel is 3-16% faster per block (7-9% on the
   MLP's forward and X^T dY blocks, 16% with B transposed) at the same results
   (benchmarks/NOTES.md, "Session 17, helper gemm").

   Same bits as that OpenBLAS: each C element is one chain of fused multiply-adds over k
   in order, started from +0, in K blocks chosen exactly as OpenBLAS's level-3 driver
   chooses them for its SkylakeX kernels (GEMM_Q 448, GEMM_UNROLL_M 16), each block's sum
   added to C (beta C first: C * beta rounded, then + block). Checked bit for bit against
   the wheel over the shapes of tests/compiler/test_own_sgemm.py.

   Layout: B is packed per K block into panels of 32 columns (kc rows of 32 floats, zero
   past N); the micro-kernel holds a 12 x 32 block of C in 24 zmm registers and per k
   loads two vectors of B and broadcasts 12 values of A. A is read in place when its
   rows are contiguous (not transposed), else packed per 12-row panel (a transposed A
   read in place touched a new page per k: slower). Row tails use 8- and 4-row kernels;
   column tails masked loads and stores.

   On AVX2+FMA processors without AVX-512 (built without __AVX512F__) the glue gets
   kiln_sgemm_avx2.h instead: the same functions with the bits of the wheel's Haswell
   sgemm (another blocking and summation order). */
#if defined(__AVX512F__)
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#define KILN_SGEMM_OWN 1
#define KSG_NR 32
#define KSG_Q 448       /* OpenBLAS SkylakeX SGEMM_DEFAULT_Q */
#define KSG_UNROLL 16   /* OpenBLAS SkylakeX SGEMM_DEFAULT_UNROLL_M */
#define KSG_NC 512      /* columns of B packed at once: 448 x 512 floats, 0.9 MB (L2) */
#define KSG_MR 12

/* Per-thread packing buffers (the glue runs one call per OpenMP thread). */
static __thread float *ksg_bbuf, *ksg_abuf;
static __thread int64_t ksg_bcap;

/* The K block starting at k0 (OpenBLAS's level-3 driver's choice of min_l). */
static inline int64_t ksg_kblock(int64_t rest) {
  if (rest >= 2 * KSG_Q) return KSG_Q;
  if (rest > KSG_Q) return ((rest / 2 + KSG_UNROLL - 1) / KSG_UNROLL) * KSG_UNROLL;
  return rest;
}

static inline __mmask16 ksg_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* r[i] <- column i of the 16 x 16 matrix whose rows are r[0..15]. */
static inline void ksg_transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), e = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
  }
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 4; i++) {
      t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0x88);
      t[8 * h + i + 4] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0xdd);
    }
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

/* Pack op(B)[k0:k0+kc, j0:j0+nc] into panels of 32 columns, zero past nc. */
static void ksg_pack_b(int transB, const float *B, int64_t ldb, int64_t k0, int64_t kc,
                       int64_t j0, int64_t nc, float *restrict dst) {
  for (int64_t jp = 0; jp < nc; jp += KSG_NR) {
    const int64_t w = nc - jp < KSG_NR ? nc - jp : KSG_NR;
    float *restrict d = dst + jp * kc;
    if (!transB) {
      const float *s = B + k0 * ldb + j0 + jp;
      const __mmask16 m0 = ksg_mask(w), m1 = ksg_mask(w - 16);
      for (int64_t k = 0; k < kc; k++) {
        _mm512_store_ps(d + k * KSG_NR, _mm512_maskz_loadu_ps(m0, s + k * ldb));
        _mm512_store_ps(d + k * KSG_NR + 16, _mm512_maskz_loadu_ps(m1, s + k * ldb + 16));
      }
    } else {  /* B stored N x K: op(B)(k, j) = B[j * ldb + k]; 16 x 16 transposes */
      for (int h = 0; h < 2; h++) {
        const int64_t rows = w - 16 * h;          /* columns of op(B) in this half */
        if (rows <= 0) {
          for (int64_t k = 0; k < kc; k++) _mm512_store_ps(d + k * KSG_NR + 16, _mm512_setzero_ps());
          continue;
        }
        const float *s = B + (j0 + jp + 16 * h) * ldb + k0;
        for (int64_t kk = 0; kk < kc; kk += 16) {
          const int64_t kn = kc - kk < 16 ? kc - kk : 16;
          const __mmask16 mk = ksg_mask(kn);
          __m512 r[16];
          _Pragma("GCC unroll 16")
          for (int j = 0; j < 16; j++)
            r[j] = j < rows ? _mm512_maskz_loadu_ps(mk, s + j * ldb + kk) : _mm512_setzero_ps();
          ksg_transpose16(r);
          if (kn == 16) {
            _Pragma("GCC unroll 16")
            for (int q = 0; q < 16; q++) _mm512_store_ps(d + (kk + q) * KSG_NR + 16 * h, r[q]);
          } else {
            float tmp[16][16] __attribute__((aligned(64)));
            for (int q = 0; q < 16; q++) _mm512_store_ps(tmp[q], r[q]);
            for (int64_t q = 0; q < kn; q++)
              _mm512_store_ps(d + (kk + q) * KSG_NR + 16 * h, _mm512_load_ps(tmp[q]));
          }
        }
      }
    }
  }
}

/* Pack a transposed A's rows i0..i0+mr (op(A)(i, k) = A[k * lda + i]) for k0..k0+kc as
   kc groups of MRV floats; rows past mr repeat row mr-1 (computed, never stored). */
static void ksg_pack_at(const float *A, int64_t lda, int64_t i0, int64_t mr, int64_t k0,
                        int64_t kc, int mrv, float *restrict d) {
  const float *s = A + k0 * lda + i0;
  if (mr == mrv) {
    const __mmask16 m = ksg_mask(mrv);
    for (int64_t k = 0; k < kc; k++)
      _mm512_mask_storeu_ps(d + k * mrv, m, _mm512_maskz_loadu_ps(m, s + k * lda));
  } else {
    for (int64_t k = 0; k < kc; k++)
      for (int i = 0; i < mrv; i++) d[k * mrv + i] = s[k * lda + (i < mr ? i : mr - 1)];
  }
}

/* C[mr x nr] = (first block: beta C, else C) + sum over kc of a(i, k) b(k, j).
   a(i, k) = a[i * ARS + k * ACS]; b a packed panel (kc x 32). */
#define KSG_MICRO(NAME, MRV, ARS, ACS)                                                    \
  static inline void NAME(int64_t kc, const float *a, int64_t lda,                       \
                          const float *restrict b, float *C, int64_t ldc, int64_t mr,     \
                          int64_t nr, int first, float beta) {                            \
    __m512 c0[MRV], c1[MRV];                                                              \
    const float *ap[MRV];                                                                 \
    (void)lda;                                                                            \
    for (int i = 0; i < MRV; i++) {                                                       \
      c0[i] = _mm512_setzero_ps();                                                        \
      c1[i] = _mm512_setzero_ps();                                                        \
      ap[i] = a + (int64_t)(i < mr ? i : mr - 1) * (ARS);                                 \
    }                                                                                     \
    for (int64_t k = 0; k < kc; k++) {                                                    \
      const __m512 b0 = _mm512_load_ps(b + k * KSG_NR);                                   \
      const __m512 b1 = _mm512_load_ps(b + k * KSG_NR + 16);                              \
      _Pragma("GCC unroll 16")                                                            \
      for (int i = 0; i < MRV; i++) {                                                     \
        const __m512 av = _mm512_set1_ps(ap[i][k * (ACS)]);                               \
        c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);                                           \
        c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);                                           \
      }                                                                                   \
    }                                                                                     \
    const __mmask16 m0 = ksg_mask(nr), m1 = ksg_mask(nr - 16);                            \
    const __m512 vb = _mm512_set1_ps(beta);                                               \
    for (int i = 0; i < MRV && i < mr; i++) {                                             \
      float *r = C + i * ldc;                                                             \
      __m512 o0, o1;                                                                      \
      if (!first) {                                                                       \
        o0 = _mm512_maskz_loadu_ps(m0, r);                                                \
        o1 = _mm512_maskz_loadu_ps(m1, r + 16);                                           \
      } else if (beta != 0) {                                                             \
        o0 = _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m0, r));                             \
        o1 = _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m1, r + 16));                        \
      } else {                                                                            \
        o0 = o1 = _mm512_setzero_ps();                                                    \
      }                                                                                   \
      _mm512_mask_storeu_ps(r, m0, _mm512_add_ps(o0, c0[i]));                             \
      _mm512_mask_storeu_ps(r + 16, m1, _mm512_add_ps(o1, c1[i]));                        \
    }                                                                                     \
  }

KSG_MICRO(ksg_rows12, 12, lda, 1)
KSG_MICRO(ksg_rows8, 8, lda, 1)
KSG_MICRO(ksg_rows4, 4, lda, 1)
KSG_MICRO(ksg_pack12, 12, 1, 12)
KSG_MICRO(ksg_pack8, 8, 1, 8)
KSG_MICRO(ksg_pack4, 4, 1, 4)

/* Whether kiln's kernel takes this product (one thread's block): where it measured at
   least as fast as the wheel's OpenBLAS: M <= 512 and K <= 800 (the MLP's and the
   transformer's blocks, 2-9% faster), and deeper products with neither operand
   transposed (512x256x1024: 3-8%); deep transposed ones (K >= 1024: 0-9% slower),
   skinny (N < 64), tiny (< 2^20 multiply-adds, where OpenBLAS also takes another path
   with other bits) and large products (the 2048^2 dot's halves: 6% slower) stay with
   OpenBLAS. */
static inline int kiln_sgemm_own_takes(int transA, int transB, int64_t M, int64_t N,
                                       int64_t K) {
  return M >= 8 && M <= 512 && N >= 64 && K >= 32 && (K <= 800 || (!transA && !transB))
         && M * N * K >= ((int64_t)1 << 20);
}

/* All of op(B) packed once, for row blocks that share it (gemm_split.h): the panels of
   column block j0 (KSG_NC wide but the last) and K block k0 start at
   K * j0 + k0 * ksg_r32(nc), K * ksg_r32(N) floats in all; ksg_pack_unit packs columns
   [jc, jc + w) of one (column block, K block), jc - j0 a multiple of 32. */
static inline int64_t ksg_r32(int64_t n) { return (n + KSG_NR - 1) / KSG_NR * KSG_NR; }
static inline void ksg_pack_unit(int transB, const float *B, int64_t ldb, int64_t K,
                                 int64_t j0, int64_t nc, int64_t k0, int64_t kc, int64_t jc,
                                 int64_t w, float *bsh) {
  ksg_pack_b(transB, B, ldb, k0, kc, jc, w, bsh + K * j0 + k0 * ksg_r32(nc) + (jc - j0) * kc);
}

/* One single-threaded product (M, N, K > 0); bsh: all of op(B) already packed
   (ksg_pack_unit), else NULL. Returns 0 when the packing buffer could not be allocated
   (the caller then calls BLAS). */
static int kiln_sgemm_own_b(int transA, int transB, int64_t M, int64_t N, int64_t K,
                            const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                            int64_t ldc, float beta, const float *bsh) {
  const int64_t ncmax = N < KSG_NC ? N : KSG_NC;
  const int64_t kcmax = K < KSG_Q ? K : KSG_Q;
  const int64_t need = kcmax * ((ncmax + KSG_NR - 1) / KSG_NR * KSG_NR);
  if (need > ksg_bcap || !ksg_abuf) {
    float *nb = need > ksg_bcap ? aligned_alloc(64, (size_t)need * 4) : ksg_bbuf;
    float *na = ksg_abuf ? ksg_abuf : aligned_alloc(64, (KSG_Q * KSG_MR + 16) * 4);
    if (!nb || !na) { if (nb != ksg_bbuf) free(nb); if (na != ksg_abuf) free(na); return 0; }
    if (nb != ksg_bbuf) { free(ksg_bbuf); ksg_bbuf = nb; ksg_bcap = need; }
    ksg_abuf = na;
  }
  for (int64_t j0 = 0; j0 < N; j0 += KSG_NC) {
    const int64_t nc = N - j0 < KSG_NC ? N - j0 : KSG_NC;
    for (int64_t k0 = 0, kc; k0 < K; k0 += kc) {
      kc = ksg_kblock(K - k0);
      const float *bpk = bsh ? bsh + K * j0 + k0 * ksg_r32(nc) : ksg_bbuf;
      if (!bsh) ksg_pack_b(transB, B, ldb, k0, kc, j0, nc, ksg_bbuf);
      for (int64_t i0 = 0; i0 < M; i0 += KSG_MR) {
        const int64_t mr = M - i0 < KSG_MR ? M - i0 : KSG_MR;
        const int mrv = mr > 8 ? 12 : mr > 4 ? 8 : 4;
        const float *a = transA ? ksg_abuf : A + i0 * lda + k0;
        if (transA) ksg_pack_at(A, lda, i0, mr, k0, kc, mrv, ksg_abuf);
        for (int64_t jp = 0; jp < nc; jp += KSG_NR) {
          const int64_t nr = nc - jp < KSG_NR ? nc - jp : KSG_NR;
          const float *b = bpk + jp * kc;
          float *c = C + i0 * ldc + j0 + jp;
          const int first = k0 == 0;
          if (!transA) {
            if (mrv == 12) ksg_rows12(kc, a, lda, b, c, ldc, mr, nr, first, beta);
            else if (mrv == 8) ksg_rows8(kc, a, lda, b, c, ldc, mr, nr, first, beta);
            else ksg_rows4(kc, a, lda, b, c, ldc, mr, nr, first, beta);
          } else {
            if (mrv == 12) ksg_pack12(kc, a, lda, b, c, ldc, mr, nr, first, beta);
            else if (mrv == 8) ksg_pack8(kc, a, lda, b, c, ldc, mr, nr, first, beta);
            else ksg_pack4(kc, a, lda, b, c, ldc, mr, nr, first, beta);
          }
        }
      }
    }
  }
  return 1;
}

static int kiln_sgemm_own(int transA, int transB, int64_t M, int64_t N, int64_t K,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                          int64_t ldc, float beta) {
  return kiln_sgemm_own_b(transA, transB, M, N, K, A, lda, B, ldb, C, ldc, beta, NULL);
}
#elif defined(__AVX2__) && defined(__FMA__)
#include "kiln_sgemm_avx2.h"
#endif
