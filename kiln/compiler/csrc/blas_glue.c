/* kiln's BLAS glue library: row-major GEMM wrappers kiln_gemm_f32/f64 over the Fortran
   sgemm/dgemm whose addresses kiln_blas_init hands in (kiln/compiler/blas.py builds it
   once per machine, through kiln/compiler/build.py, and defines KILN_PARALLEL_MIN_MACS,
   its blas.PARALLEL_MIN_MACS, in a line before this text). */
#ifndef KILN_PARALLEL_MIN_MACS
#error "define KILN_PARALLEL_MIN_MACS (kiln/compiler/blas.py does)"
#endif
#include <stdint.h>
#include "kiln_sgemm.h"
#include "gemm_split.h"
typedef void (*kiln_sgemm_t)(const char*, const char*, const int*, const int*, const int*,
                             const float*, const float*, const int*, const float*, const int*,
                             const float*, float*, const int*);
typedef void (*kiln_dgemm_t)(const char*, const char*, const int*, const int*, const int*,
                             const double*, const double*, const int*, const double*,
                             const int*, const double*, double*, const int*);
typedef int (*kiln_set_threads_t)(int);
static kiln_sgemm_t kiln_sgemm_ptr;
static kiln_dgemm_t kiln_dgemm_ptr;
static kiln_set_threads_t kiln_set_threads_ptr;
static int kiln_blas_max_threads = 1;
/* kiln's own float32 kernel (kiln_sgemm.h) where it is built (AVX-512) and enabled:
   kiln_blas_init's own_sgemm argument (blas.own_sgemm_enabled: Intel AVX-512 by default,
   KILN_OWN_SGEMM=0/1 to choose). */
static int kiln_own_sgemm = 0;
/* Products split over two threads by gemm_split.h's claimed blocks with its helper
   thread (1), the same blocks claimed by the OpenMP worker (2), or OpenMP's static
   halves (0): kiln_blas_init's split argument (blas.py: KILN_GEMM_SPLIT, default 1). */
static int kiln_gemm_split = 0;

void kiln_blas_init(void *s, void *d, void *t, int max_threads, int own_sgemm, int split) {
  kiln_gemm_split = split;
  kiln_sgemm_ptr = (kiln_sgemm_t)s;
  kiln_dgemm_ptr = (kiln_dgemm_t)d;
  kiln_set_threads_ptr = (kiln_set_threads_t)t;
  kiln_blas_max_threads = max_threads > 0 ? max_threads : 1;
#ifdef KILN_SGEMM_OWN
  kiln_own_sgemm = own_sgemm;
#else
  kiln_own_sgemm = 0;
  (void)own_sgemm;
#endif
}

/* Whether float32 products run on kiln's own kernel here (1) or on the BLAS (0). */
int kiln_blas_own_sgemm(void) { return kiln_own_sgemm; }

/* Which own kernel this build holds: 512 (kiln_sgemm.h's AVX-512 one, the wheel's
   SkylakeX bits), 256 (kiln_sgemm_avx2.h, the wheel's Haswell bits) or 0 (none). */
int kiln_blas_own_sgemm_kind(void) {
#if defined(KILN_SGEMM_OWN_AVX2)
  return 256;
#elif defined(KILN_SGEMM_OWN)
  return 512;
#else
  return 0;
#endif
}

/* kiln's own kernel for float32 products it takes (1: done), else 0 (call the BLAS). */
#ifdef KILN_SGEMM_OWN
#define KILN_GEMM_OWN(T, M_, N_, A_, B_, C_)                                             \
  (sizeof(T) == 4 && kiln_own_sgemm && kiln_sgemm_own_takes(transA, transB, M_, N_, K)  \
   && kiln_sgemm_own(transA, transB, M_, N_, K, (const float *)(A_), lda,                \
                     (const float *)(B_), ldb, (float *)(C_), ldc, (float)beta))
#else
#define KILN_GEMM_OWN(T, M_, N_, A_, B_, C_) 0
#endif

/* One single-threaded BLAS call on the calling thread; the thread's own setting is put
   back afterwards (the setter returns it), so the user's SciPy calls on this thread keep
   their threads. */
#define KILN_GEMM_CALL(T, PTR, M_, N_, A_, B_, C_)                                        \
  do {                                                                                 \
    if (KILN_GEMM_OWN(T, (M_), (N_), (A_), (B_), (C_))) break;                          \
    const int kiln_prev = kiln_set_threads_ptr ? kiln_set_threads_ptr(1) : 0;          \
    const char ta = transB ? 'T' : 'N', tb = transA ? 'T' : 'N';                      \
    const int m = (int)(N_), n = (int)(M_), k = (int)K;                                \
    const int la = (int)(ldb > 0 ? ldb : 1), lb = (int)(lda > 0 ? lda : 1);            \
    const int lc = (int)(ldc > 0 ? ldc : 1);                                           \
    const T one = 1;                                                                   \
    PTR(&ta, &tb, &m, &n, &k, &one, (B_), &la, (A_), &lb, &beta, (C_), &lc);           \
    if (kiln_set_threads_ptr && kiln_prev > 0) kiln_set_threads_ptr(kiln_prev);        \
  } while (0)

/* One single-threaded product (a block of a split one). */
static void kiln_gemm1_f32(int transA, int transB, int64_t M, int64_t N, int64_t K,
                           const float *A, int64_t lda, const float *B, int64_t ldb,
                           float *C, int64_t ldc, float beta) {
  KILN_GEMM_CALL(float, kiln_sgemm_ptr, M, N, A, B, C);
}

static void kiln_gemm1_f64(int transA, int transB, int64_t M, int64_t N, int64_t K,
                           const double *A, int64_t lda, const double *B, int64_t ldb,
                           double *C, int64_t ldc, double beta) {
  KILN_GEMM_CALL(double, kiln_dgemm_ptr, M, N, A, B, C);
}

/* On two threads, the product goes to gemm_split.h's caller-plus-helper split when it
   is enabled (kiln_gemm_split). */
#ifdef KILN_GEMM_SPLIT
#define KILN_GEMM_SPLIT_TRY(T)                                                          \
  if (nt == 2 && kiln_gemm_split && kiln_own_sgemm && !omp_in_parallel()               \
      && ksp_run(sizeof(T) == 8, transA, transB, M, N, K, A, lda, B, ldb, C, ldc,      \
                 (double)beta, kiln_gemm_split == 2))                                 \
    return;
#else
#define KILN_GEMM_SPLIT_TRY(T)
#endif

/* Row-major C[MxN] = op(A) @ op(B) (+ beta*C): column-major C^T = op(B)^T op(A)^T.
   Large products (>= KILN_PARALLEL_MIN_MACS multiply-adds) are split into row (or
   column) blocks, one per OpenMP thread, each a single-threaded BLAS call: the same
   thread pool as the kernels, so BLAS's own workers never spin against OpenMP's
   (blas.threads_for). */
#ifdef _OPENMP
/* The calling thread's OpenMP budget: a device thread of pmap/shard_map has a share. */
int omp_get_max_threads(void);
int omp_in_parallel(void);
/* kiln_sgemm_avx2.h: the threads' blocks are sub-blocks of the whole call with its bits
   (ksh_sub; OpenBLAS's Haswell bits depend on the call's shape), so a product the
   kernel takes has the same bits on any number of threads. Rows, or columns in
   multiples of 8; a block whose buffers cannot be allocated goes to the BLAS. */
#ifdef KILN_SGEMM_OWN_AVX2
#define KILN_GEMM_WHOLE_TRY(T, PTR)                                                    \
  if (sizeof(T) == 4 && kiln_own_sgemm && kiln_sgemm_own_takes(transA, transB, M, N, K)) { \
    const int64_t cw = ((N + nt - 1) / nt + 7) / 8 * 8;                                \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                       \
    for (int t = 0; t < nt; t++) {                                                     \
      int64_t r0 = 0, r1 = M, c0 = 0, c1 = N;                                          \
      if (M >= N) r0 = M * t / nt, r1 = M * (t + 1) / nt;                              \
      else c0 = cw * t < N ? cw * t : N, c1 = cw * (t + 1) < N ? cw * (t + 1) : N;     \
      if (r1 > r0 && c1 > c0                                                           \
          && !ksh_sub(transA, transB, M, N, K, (const float *)A, lda, (const float *)B,\
                      ldb, (float *)C, ldc, (float)beta, r0, r1, c0, c1))              \
        KILN_GEMM_CALL(T, PTR, r1 - r0, c1 - c0,                                       \
                       A + (transA ? r0 : r0 * lda),                                    \
                       B + (transB ? c0 * ldb : c0), C + r0 * ldc + c0);               \
    }                                                                                  \
    return;                                                                            \
  }
#else
#define KILN_GEMM_WHOLE_TRY(T, PTR)
#endif
#define KILN_GEMM_PARALLEL(T, PTR)                                                     \
  if (kiln_blas_max_threads > 1 && M * N * K >= (int64_t)KILN_PARALLEL_MIN_MACS      \
      && omp_get_max_threads() > 1) {                                                  \
    const int nt = kiln_blas_max_threads < omp_get_max_threads()                        \
                   ? kiln_blas_max_threads : omp_get_max_threads();                     \
    KILN_GEMM_SPLIT_TRY(T)                                                             \
    KILN_GEMM_WHOLE_TRY(T, PTR)                                                        \
    if (M >= N) {                                                                      \
      _Pragma("omp parallel for num_threads(nt) schedule(static)")                     \
      for (int t = 0; t < nt; t++) {                                                   \
        const int64_t r0 = M * t / nt, r1 = M * (t + 1) / nt;                          \
        if (r1 > r0) KILN_GEMM_CALL(T, PTR, r1 - r0, N, A + (transA ? r0 : r0 * lda),  \
                                    B, C + r0 * ldc);                                  \
      }                                                                                \
    } else {                                                                           \
      _Pragma("omp parallel for num_threads(nt) schedule(static)")                     \
      for (int t = 0; t < nt; t++) {                                                   \
        const int64_t c0 = N * t / nt, c1 = N * (t + 1) / nt;                          \
        if (c1 > c0) KILN_GEMM_CALL(T, PTR, M, c1 - c0, A,                             \
                                    B + (transB ? c0 * ldb : c0), C + c0);             \
      }                                                                                \
    }                                                                                  \
    return;                                                                            \
  }
#else
#define KILN_GEMM_PARALLEL(T, PTR)
#endif

#define KILN_GEMM_BODY(T, PTR)                                                        \
  if (M <= 0 || N <= 0) return;                                                        \
  if (K <= 0) { for (int64_t i = 0; i < M; i++) for (int64_t j = 0; j < N; j++)        \
      C[i * ldc + j] = beta == 0 ? (T)0 : beta * C[i * ldc + j]; return; }            \
  KILN_GEMM_PARALLEL(T, PTR)                                                           \
  KILN_GEMM_CALL(T, PTR, M, N, A, B, C);

void kiln_gemm_f32(int transA, int transB, int64_t M, int64_t N, int64_t K,
                   const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                   int64_t ldc, float beta) {
  KILN_GEMM_BODY(float, kiln_sgemm_ptr)
}

void kiln_gemm_f64(int transA, int transB, int64_t M, int64_t N, int64_t K,
                   const double *A, int64_t lda, const double *B, int64_t ldb, double *C,
                   int64_t ldc, double beta) {
  KILN_GEMM_BODY(double, kiln_dgemm_ptr)
}
