/* Blocks of a parallel loop shared by work stealing: each thread starts on its own
   contiguous share (the static schedule's order, and its long runs through memory that
   the hardware prefetchers follow; OpenMP's dynamic schedule interleaves the threads'
   blocks and was 4-15% slower on a quiet machine) and, when that is done, takes blocks
   from the end of the share with most left, so a thread that loses its core for a while
   holds up at most the block it is in. kiln_rg[8 * t] packs thread t's share as
   (next << 32) | end; each sits on its own cache line. The shares are set before the
   parallel region (a barrier inside it would make every call wait until all threads
   run at once; a team smaller than nt leaves shares that the others steal). Which
   thread runs a block never changes what the block computes. */
static inline void kiln_steal_init(uint64_t *kiln_rg, int nt, int64_t n) {
  for (int t = 0; t < nt; t++) {
    const uint64_t lo = (uint64_t)(n * t / nt), hi = (uint64_t)(n * (t + 1) / nt);
    kiln_rg[8 * t] = (lo << 32) | hi;
  }
}
static inline int64_t kiln_steal_next(uint64_t *kiln_rg, int t, int nt) {
  uint64_t r = __atomic_load_n(&kiln_rg[8 * t], __ATOMIC_RELAXED);
  while ((uint32_t)(r >> 32) < (uint32_t)r) {          /* own share, from the front */
    if (__atomic_compare_exchange_n(&kiln_rg[8 * t], &r, r + ((uint64_t)1 << 32), 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return (int64_t)(r >> 32);
  }
  for (;;) {                                           /* others', from the back */
    int best = -1;
    uint32_t most = 0;
    for (int u = 0; u < nt; u++) {
      const uint64_t q = __atomic_load_n(&kiln_rg[8 * u], __ATOMIC_RELAXED);
      const uint32_t lo = (uint32_t)(q >> 32), hi = (uint32_t)q;
      if (hi > lo && hi - lo > most) { most = hi - lo; best = u; }
    }
    if (best < 0) return -1;
    uint64_t q = __atomic_load_n(&kiln_rg[8 * best], __ATOMIC_RELAXED);
    if ((uint32_t)(q >> 32) < (uint32_t)q &&
        __atomic_compare_exchange_n(&kiln_rg[8 * best], &q, q - 1, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return (int64_t)(uint32_t)q - 1;
  }
}
#ifdef _OPENMP
static inline int kiln_team_max(void) { return omp_get_max_threads(); }
static inline int kiln_team_rank(void) { return omp_get_thread_num(); }
/* Whether this code runs alone: no other thread of its team streams memory beside it. */
static inline int kiln_team_solo(void) { return omp_get_num_threads() == 1; }
#else
static inline int kiln_team_max(void) { return 1; }
static inline int kiln_team_rank(void) { return 0; }
static inline int kiln_team_solo(void) { return 1; }
#endif
