/* Splitting one GEMM over two threads without waiting for a late thread (included by
   blas_glue.c, which defines kiln_gemm1_f32/f64: one single-threaded product).

   The OpenMP split (one static half per thread) ends when both halves are done, so a
   product waits for the second thread to be woken and scheduled: on a 2-core VM shared
   with other processes that took a 128x784x512 product from ~0.37 ms (both threads at
   once) to 0.66-0.82 ms at its best, worse than one thread (0.73 ms). Here the product
   is cut into blocks (about 8 column blocks, or 4 row blocks: see ksp_run);
   the calling thread starts on them at once and one helper thread, woken through a
   futex, takes blocks too when it gets a core. The caller waits only for blocks the
   helper has already taken, never for the helper to arrive.

   Finer blocks only for float32 products whose every block kiln's own kernel takes
   (kiln_sgemm.h): it sums each element the same way whatever the block, so the bits
   are those of the OpenMP halves. OpenBLAS does not (a 300x260x200 dgemm in 4 row
   blocks differs from 2 halves: its small-matrix path), so a product with BLAS blocks
   is cut into exactly the OpenMP halves (same calls, same bits), claimed the same way:
   the caller runs the second half too when the helper has not started by then. The
   AVX2 kernel (kiln_sgemm_avx2.h) has OpenBLAS's Haswell bits, which depend on where
   an element sits in the call: its blocks are sub-blocks of the whole product computed
   with the bits of one call on all of it (ksh_sub), as its OpenMP blocks are
   (blas_glue.c), so a product it takes has the same bits on any number of threads.
   Row blocks on kiln's kernels share one packing of op(B) (ksp_publish): both threads
   first take 64-column packing units, then row blocks (each row block packed all of B
   before: 4 packs per product, 2-6% of its CPU time). Linux only (futex); two threads
   only (more: the OpenMP split); one product at a time (a second caller, another device
   thread, uses the OpenMP split). */
#if defined(__linux__) && defined(_OPENMP) && defined(KILN_SGEMM_OWN)
#include <immintrin.h>
#include <linux/futex.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KILN_GEMM_SPLIT 1

static void kiln_gemm1_f32(int transA, int transB, int64_t M, int64_t N, int64_t K,
                           const float *A, int64_t lda, const float *B, int64_t ldb,
                           float *C, int64_t ldc, float beta);
static void kiln_gemm1_f64(int transA, int transB, int64_t M, int64_t N, int64_t K,
                           const double *A, int64_t lda, const double *B, int64_t ldb,
                           double *C, int64_t ldc, double beta);

typedef struct {
  int transA, transB, dbl, by_rows, whole;   /* whole: kiln_sgemm_avx2.h's sub-blocks */
  int64_t M, N, K, lda, ldb, ldc, nblocks, width;   /* width: rows or columns a block */
  const void *A, *B;
  void *C;
  double beta;
  float *bsh;         /* row blocks on kiln's kernel: all of op(B) packed once, here */
} ksp_job;

static ksp_job ksp_cur;
/* (sequence << 16) | (blocks << 8) | taken: one CAS claims a block of the current job. */
static _Atomic uint64_t ksp_next;
static _Atomic int ksp_done;          /* blocks finished in the current job */
static _Atomic uint32_t ksp_wake;     /* futex word: bumped for each job */
static _Atomic int ksp_sleeping, ksp_waiting;
/* Packing the shared B (ksp_job.bsh): (sequence << 32) | (units << 16) | taken, and the
   units finished; row blocks start when every unit is done. */
static _Atomic uint64_t ksp_pnext;
static _Atomic int ksp_pdone;
static float *ksp_bsh;                /* the shared buffer (grown under ksp_lock) */
static int64_t ksp_bsh_cap;
#define KSP_UNIT_COLS 64              /* columns of one packing unit */
static pthread_mutex_t ksp_lock = PTHREAD_MUTEX_INITIALIZER;
static int ksp_started;               /* the helper thread exists (in this process) */
static _Atomic long ksp_runs, ksp_helped;   /* products split here; blocks the helper ran */
static _Atomic long ksp_omp_helped;         /* of those, blocks the OpenMP worker ran */

static void ksp_futex_wait(_Atomic uint32_t *w, uint32_t v) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void ksp_futex_wake(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* The packing units of op(B) (the kernel's ksh_/ksg_pack_unit): KSP_UNIT_COLS columns
   of one (column block, K block), in the kernel's block order. Counts them (u < 0) or
   packs unit u. */
#ifdef KILN_SGEMM_OWN_AVX2
#define KSP_CBLOCK(rest) ksh_block(rest, KSH_P)
#define KSP_KBLOCK(rest) ksh_block(rest, KSH_Q)
#define KSP_PACK_UNIT ksh_pack_unit
#define KSP_PADDED(n) ksh_r8(n)
#else
#define KSP_CBLOCK(rest) ((rest) < KSG_NC ? (rest) : KSG_NC)
#define KSP_KBLOCK(rest) ksg_kblock(rest)
#define KSP_PACK_UNIT ksg_pack_unit
#define KSP_PADDED(n) ksg_r32(n)
#endif
static int64_t ksp_pack_units(const ksp_job *j, int64_t u) {
  int64_t n = 0;
  for (int64_t j0 = 0, mc; j0 < j->N; j0 += mc) {
    mc = KSP_CBLOCK(j->N - j0);
    for (int64_t k0 = 0, kc; k0 < j->K; k0 += kc) {
      kc = KSP_KBLOCK(j->K - k0);
      for (int64_t jc = j0; jc < j0 + mc; jc += KSP_UNIT_COLS, n++) {
        if (n != u) continue;
        const int64_t w = j0 + mc - jc < KSP_UNIT_COLS ? j0 + mc - jc : KSP_UNIT_COLS;
        KSP_PACK_UNIT(j->transB, (const float *)j->B, j->ldb, j->K, j0, mc, k0, kc, jc, w,
                      j->bsh);
        return n;
      }
    }
  }
  return n;
}

static void ksp_block(const ksp_job *j, int64_t b) {
#ifdef KILN_SGEMM_OWN_AVX2
  if (j->whole) {   /* a sub-block of the whole call, with the whole call's bits */
    const int64_t ext = j->by_rows ? j->M : j->N;
    const int64_t lo = b * j->width, hi = b == j->nblocks - 1 ? ext : lo + j->width;
    ksh_sub_b(j->transA, j->transB, j->M, j->N, j->K, (const float *)j->A, j->lda,
              (const float *)j->B, j->ldb, (float *)j->C, j->ldc, (float)j->beta,
              j->by_rows ? lo : 0, j->by_rows ? hi : j->M, j->by_rows ? 0 : lo,
              j->by_rows ? j->N : hi, j->bsh);
    return;
  }
#endif
  const int64_t lo = b * j->width;
  const int64_t hi = b == j->nblocks - 1 ? (j->by_rows ? j->M : j->N) : lo + j->width;
  if (j->by_rows) {
    const int64_t ao = j->transA ? lo : lo * j->lda, co = lo * j->ldc;
#ifndef KILN_SGEMM_OWN_AVX2
    if (j->bsh        /* own blocks, B packed once (else: its buffers failed) */
        && kiln_sgemm_own_b(j->transA, j->transB, hi - lo, j->N, j->K,
                            (const float *)j->A + ao, j->lda, (const float *)j->B, j->ldb,
                            (float *)j->C + co, j->ldc, (float)j->beta, j->bsh))
      return;
#endif
    if (j->dbl)
      kiln_gemm1_f64(j->transA, j->transB, hi - lo, j->N, j->K, (const double *)j->A + ao,
                     j->lda, (const double *)j->B, j->ldb, (double *)j->C + co, j->ldc,
                     j->beta);
    else
      kiln_gemm1_f32(j->transA, j->transB, hi - lo, j->N, j->K, (const float *)j->A + ao,
                     j->lda, (const float *)j->B, j->ldb, (float *)j->C + co, j->ldc,
                     (float)j->beta);
  } else {
    const int64_t bo = j->transB ? lo * j->ldb : lo;
    if (j->dbl)
      kiln_gemm1_f64(j->transA, j->transB, j->M, hi - lo, j->K, (const double *)j->A,
                     j->lda, (const double *)j->B + bo, j->ldb, (double *)j->C + lo,
                     j->ldc, j->beta);
    else
      kiln_gemm1_f32(j->transA, j->transB, j->M, hi - lo, j->K, (const float *)j->A,
                     j->lda, (const float *)j->B + bo, j->ldb, (float *)j->C + lo,
                     j->ldc, (float)j->beta);
  }
}

/* Claim and run blocks of the current job until none is left. The job's fields are
   read only while holding an unfinished block (the caller cannot start another job
   before every block is done). */
static void ksp_work(int helper) {
  unsigned spins = 0;
  for (;;) {
    uint64_t v = atomic_load_explicit(&ksp_next, memory_order_acquire);
    const uint64_t blocks = (v >> 8) & 0xff, taken = v & 0xff;
    if (taken >= blocks) return;
    /* First the shared B's packing units (a claimed unit holds the job: no row block
       starts before every unit is done); then wait for the other thread's unit in
       progress (a few microseconds), never for a thread that has not claimed one. */
    uint64_t pv = atomic_load_explicit(&ksp_pnext, memory_order_acquire);
    if ((pv >> 32) == ((v >> 16) & 0xffffffffu)) {
      const uint64_t units = (pv >> 16) & 0xffff, ptaken = pv & 0xffff;
      if (ptaken < units) {
        if (atomic_compare_exchange_weak_explicit(&ksp_pnext, &pv, pv + 1,
                                                  memory_order_acq_rel, memory_order_acquire)) {
          ksp_pack_units(&ksp_cur, (int64_t)ptaken);
          atomic_fetch_add_explicit(&ksp_pdone, 1, memory_order_acq_rel);
        }
        continue;
      }
      if (atomic_load_explicit(&ksp_pdone, memory_order_acquire) < (int)units) {
        if (++spins % 4096 == 0) sched_yield();    /* its thread lost the core */
        else _mm_pause();
        continue;
      }
    }
    if (!atomic_compare_exchange_weak_explicit(&ksp_next, &v, v + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    ksp_block(&ksp_cur, (int64_t)taken);
    if (helper) atomic_fetch_add_explicit(&ksp_helped, 1, memory_order_relaxed);
    if (helper == 2) atomic_fetch_add_explicit(&ksp_omp_helped, 1, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&ksp_done, 1, memory_order_acq_rel) + 1 == (int)blocks
        && atomic_load_explicit(&ksp_waiting, memory_order_acquire))
      ksp_futex_wake((_Atomic uint32_t *)&ksp_done);
  }
}

#ifdef KILN_SGEMM_OWN_AVX2
static _Atomic int ksp_helper_ready = 1;   /* the helper has kiln_sgemm_avx2.h's buffers */
#endif

static void *ksp_helper(void *arg) {
  (void)arg;
#ifdef KILN_SGEMM_OWN_AVX2
  if (!ksh_ready()) {   /* its sub-blocks could not fall back: no helper (the caller
                           claims every block) */
    atomic_store(&ksp_helper_ready, 0);
    return NULL;
  }
#endif
  sigset_t all;               /* signals go to the program's own threads */
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  uint32_t seen = atomic_load(&ksp_wake);
  for (;;) {
    /* A short spin (~10 us) bridges back-to-back products; then sleep. */
    for (int i = 0; i < 256 && atomic_load_explicit(&ksp_wake, memory_order_acquire) == seen;
         i++)
      _mm_pause();
    if (atomic_load_explicit(&ksp_wake, memory_order_acquire) == seen) {
      atomic_store(&ksp_sleeping, 1);
      if (atomic_load(&ksp_wake) == seen) ksp_futex_wait(&ksp_wake, seen);
      atomic_store(&ksp_sleeping, 0);
    }
    seen = atomic_load_explicit(&ksp_wake, memory_order_acquire);
    ksp_work(1);
  }
  return NULL;
}

static void ksp_after_fork_child(void) {
  ksp_started = 0;            /* threads do not survive fork: start a new helper */
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  ksp_lock = fresh;
  atomic_store(&ksp_sleeping, 0);
  atomic_store(&ksp_waiting, 0);
}

/* Sets the current job (the caller holds ksp_lock). Row blocks on kiln's kernels share
   one packing of op(B) (each row block packed all of B: 4 packs per product) when the
   buffer can be had. */
static int ksp_share_b = 1;           /* tests and A/B measurements turn it off */
static long ksp_shared_runs;          /* products whose row blocks shared B */
static void ksp_publish(int own, int transA, int transB, int dbl, int by_rows, int whole,
                        int64_t M,
                        int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
                        int64_t ldb, void *C, int64_t ldc, double beta, int64_t nb,
                        int64_t width) {
  ksp_job j = {transA, transB, dbl, by_rows, whole, M, N, K, lda, ldb, ldc, nb, width, A, B, C,
               beta, NULL};
  int64_t units = 0;
  /* own: every block on kiln's kernel (AVX2: whole-call sub-blocks; AVX-512:
     kiln_sgemm_own_b), not the BLAS halves. */
  if (by_rows && nb > 1 && ksp_share_b && own) {
    const int64_t need = K * KSP_PADDED(N);
    if (need > ksp_bsh_cap && need <= ((int64_t)1 << 22)) {   /* up to 16 MB */
      float *p = aligned_alloc(64, (size_t)need * 4);
      if (p) { free(ksp_bsh); ksp_bsh = p; ksp_bsh_cap = need; }
    }
    if (need <= ksp_bsh_cap) {
      j.bsh = ksp_bsh;
      units = ksp_pack_units(&j, -1);
      if (units > 0xffff) { units = 0; j.bsh = NULL; }
      else ksp_shared_runs++;
    }
  }
  ksp_cur = j;
  atomic_store_explicit(&ksp_done, 0, memory_order_relaxed);
  atomic_store_explicit(&ksp_pdone, 0, memory_order_relaxed);
  const uint64_t seq = ((atomic_load(&ksp_next) >> 16) + 1) & 0xffffffffffffULL;
  atomic_store_explicit(&ksp_pnext, ((seq & 0xffffffffu) << 32) | ((uint64_t)units << 16),
                        memory_order_relaxed);
  atomic_store_explicit(&ksp_next, (seq << 16) | ((uint64_t)nb << 8), memory_order_release);
}

/* Whether row blocks share one packing of B (1, the default) or each packs all of it
   (0); -1 only asks. Returns the previous setting. */
int kiln_blas_split_share_b(int on) {
  const int was = ksp_share_b;
  if (on >= 0) ksp_share_b = on;
  return was;
}

/* Products whose row blocks shared one packing of B so far. */
long kiln_blas_split_shared_b_runs(void) { return ksp_shared_runs; }

/* Waits for the blocks other threads took of the current job (all are claimed): spin
   briefly, then sleep on ksp_done. */
static void ksp_wait_done(int64_t nb) {
  for (int i = 0; atomic_load_explicit(&ksp_done, memory_order_acquire) < nb; i++) {
    if (i < 4096) { _mm_pause(); continue; }
    atomic_store(&ksp_waiting, 1);
    const int d = atomic_load(&ksp_done);
    if (d < nb) ksp_futex_wait((_Atomic uint32_t *)&ksp_done, (uint32_t)d);
    atomic_store(&ksp_waiting, 0);
  }
}

/* Runs the product on the caller and the helper; 0 when it cannot (the helper could not
   be started, or another product holds it): the caller then splits with OpenMP.
   on_omp (KILN_GEMM_SPLIT=2): the same claimed blocks, but the second thread is the
   kernels' OpenMP worker (an `omp parallel` region whose thread 0 starts claiming at
   once) instead of the helper thread. The worker is then still spinning when the next
   kernel's region starts (with the helper, it has slept through the product: ~10 us to
   wake it, 100+ under load), but the product waits at the region's end for the worker
   to arrive. Measured slower at load 4 on 2 cores (benchmarks/NOTES.md, "Session 18,
   helper gemm3"), so not the default. */
static int ksp_run(int dbl, int transA, int transB, int64_t M, int64_t N, int64_t K,
                   const void *A, int64_t lda, const void *B, int64_t ldb, void *C,
                   int64_t ldc, double beta, int on_omp) {
  /* Blocks: 4 of rows (each packs all of B: 2 for products of 2^27 multiply-adds or
     more, where waking the helper is a small part and 2 more packs of B are not), or
     about 8 of columns on 32-column panel boundaries, at least 64 wide (4 when A is
     transposed: each column block packs all of A); the last one takes the rest. */
  const int by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t rows_n = M * N * K >= ((int64_t)1 << 27) ? 2 : 4, cols_n = transA ? 4 : 8;
  int64_t width = by_rows ? (M + rows_n - 1) / rows_n
                          : ((N + cols_n - 1) / cols_n + 31) / 32 * 32;
  if (!by_rows && width < 64) width = 64;
  int64_t nb = extent / width;                  /* the rest joins the last block */
  int own = nb >= 2 && nb <= 255 && !dbl;
  for (int64_t b = 0; own && b < nb; b++) {
    const int64_t w = b == nb - 1 ? extent - b * width : width;
    own = kiln_sgemm_own_takes(transA, transB, by_rows ? w : M, by_rows ? N : w, K);
  }
  int whole = 0;
#ifdef KILN_SGEMM_OWN_AVX2
  /* The AVX2 kernel's bits depend on where an element sits in its call (OpenBLAS's
     Haswell blocking), so its blocks are sub-blocks of the whole product computed with
     the bits of one call on all of it (ksh_sub): the same bits as on one thread. Row
     blocks as above; column blocks a multiple of 8 columns, at least 32. */
  if (!dbl) {
    own = atomic_load(&ksp_helper_ready) && ksh_ready()
          && kiln_sgemm_own_takes(transA, transB, M, N, K);
    if (own) {
      width = by_rows ? (M + rows_n - 1) / rows_n : ((N + cols_n - 1) / cols_n + 7) / 8 * 8;
      if (!by_rows && width < 32) width = 32;
      nb = extent / width;
      if (nb < 1) nb = 1;
      whole = 1;
    }
  }
#endif
  if (!own) {         /* BLAS blocks: exactly the OpenMP halves (their bits), claimed */
    nb = 2;
    width = extent / 2;
    if (width < 1) return 0;
  }
  if (pthread_mutex_trylock(&ksp_lock) != 0) return 0;
  if (on_omp) {       /* the caller and the OpenMP worker claim the blocks */
    ksp_publish(own, transA, transB, dbl, by_rows, whole, M, N, K, A, lda, B, ldb, C, ldc,
                beta, nb, width);
    atomic_fetch_add_explicit(&ksp_runs, 1, memory_order_relaxed);
#pragma omp parallel num_threads(2)
    {
      if (omp_get_thread_num() == 0) ksp_work(0);
#ifdef KILN_SGEMM_OWN_AVX2
      else if (!whole || ksh_ready()) ksp_work(2);
#else
      else ksp_work(2);
#endif
    }
    /* The helper thread, woken for an earlier product but scheduled only now, may have
       claimed a block of this one: the region's end does not wait for it. */
    ksp_wait_done(nb);
    pthread_mutex_unlock(&ksp_lock);
    return 1;
  }
  if (!ksp_started) {
    static int atfork_done;
    if (!atfork_done) { pthread_atfork(NULL, NULL, ksp_after_fork_child); atfork_done = 1; }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int rc = pthread_create(&t, &attr, ksp_helper, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) { pthread_mutex_unlock(&ksp_lock); return 0; }
    ksp_started = 1;
  }
  ksp_publish(own, transA, transB, dbl, by_rows, whole, M, N, K, A, lda, B, ldb, C, ldc, beta,
              nb, width);
  atomic_fetch_add_explicit(&ksp_wake, 1, memory_order_acq_rel);
  if (atomic_load(&ksp_sleeping)) ksp_futex_wake(&ksp_wake);
  atomic_fetch_add_explicit(&ksp_runs, 1, memory_order_relaxed);
  ksp_work(0);
  ksp_wait_done(nb);
  pthread_mutex_unlock(&ksp_lock);
  return 1;
}

/* Products split by the helper scheme so far, and blocks the helper thread ran. */
void kiln_blas_split_stats(long *runs, long *helped) {
  *runs = atomic_load(&ksp_runs);
  *helped = atomic_load(&ksp_helped);
}

/* Blocks the OpenMP worker ran (KILN_GEMM_SPLIT=2). */
long kiln_blas_split_omp_blocks(void) { return atomic_load(&ksp_omp_helped); }
#endif
