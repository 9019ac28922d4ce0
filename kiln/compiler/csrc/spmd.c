/* kiln_spmd: the futex barrier and in-place all-reduce of device threads
   (kiln/parallel/native.py; x86-64 Linux). */
#include <stdint.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* word[0]: arrivals, word[1]: generation, word[2]: participants, word[3]: aborted,
   word[4]: spins before sleeping (0 when the participants outnumber the cores) */
static void kwake(int32_t *w) { syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, 0, 0, 0); }
static void kwait(int32_t *w, int32_t v) { syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, 0, 0, 0); }

int kiln_barrier(int32_t *b) {
  if (__atomic_load_n(&b[3], __ATOMIC_ACQUIRE)) return -1;
  int32_t gen = __atomic_load_n(&b[1], __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&b[0], 1, __ATOMIC_ACQ_REL) == b[2]) {
    __atomic_store_n(&b[0], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&b[1], gen + 1, __ATOMIC_RELEASE);
    kwake(&b[1]);
    return 1;                          /* exactly one participant sees 1 */
  }
  for (int i = 0; i < b[4]; i++) {
    if (__atomic_load_n(&b[1], __ATOMIC_ACQUIRE) != gen) return 0;
    __builtin_ia32_pause();
  }
  while (__atomic_load_n(&b[1], __ATOMIC_ACQUIRE) == gen) {
    if (__atomic_load_n(&b[3], __ATOMIC_ACQUIRE)) return -1;
    kwait(&b[1], gen);
  }
  return __atomic_load_n(&b[3], __ATOMIC_ACQUIRE) ? -1 : 0;
}

void kiln_barrier_abort(int32_t *b) {
  __atomic_store_n(&b[3], 1, __ATOMIC_RELEASE);
  __atomic_add_fetch(&b[1], 1, __ATOMIC_ACQ_REL);
  kwake(&b[1]);
}

#define KMAX(a, b) ((a) > (b) ? (a) : (b))
#define KMIN(a, b) ((a) < (b) ? (a) : (b))
#define KSUM(a, b) ((a) + (b))
/* NaN-propagating max/min as XLA's */
#define KFMAX(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : KMAX(a, b))
#define KFMIN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : KMIN(a, b))

/* Tiles of 2048 elements: the output tile stays in L1 while each operand streams
   through it (vectorized passes, operands combined in device order). */
#define KREDUCE(T, OP)                                                                \
  { T *o = (T *)out; T *const *s = (T *const *)slots;                                \
    for (int64_t t0 = lo; t0 < hi; t0 += 2048) {                                      \
      const int64_t t1 = t0 + 2048 < hi ? t0 + 2048 : hi;                              \
      const T *s0 = s[0];                                                             \
      for (int64_t i = t0; i < t1; i++) o[i] = s0[i];                                 \
      for (int j = 1; j < m; j++) {                                                   \
        const T *sj = s[j];                                                           \
        for (int64_t i = t0; i < t1; i++) o[i] = OP(o[i], sj[i]);                     \
      } } }

#define KOPS(T, MAXOP, MINOP)                                                          \
  if (op == 0) KREDUCE(T, KSUM) else if (op == 1) KREDUCE(T, MAXOP)                    \
  else KREDUCE(T, MINOP)

/* dtype: 0 f32, 1 f64, 2 i32, 3 i64, 4 u32, 5 u64; op: 0 sum, 1 max, 2 min */
int kiln_allreduce(int32_t *b, void **slots, void **outp, int64_t size, int k, int m,
                   int dtype, int op) {
  if (kiln_barrier(b) < 0) return -1;
  void *out = *outp;
  const int64_t lo = size * k / m, hi = size * (k + 1) / m;
  switch (dtype) {
    case 0: KOPS(float, KFMAX, KFMIN) break;
    case 1: KOPS(double, KFMAX, KFMIN) break;
    case 2: KOPS(int32_t, KMAX, KMIN) break;
    case 3: KOPS(int64_t, KMAX, KMIN) break;
    case 4: KOPS(uint32_t, KMAX, KMIN) break;
    case 5: KOPS(uint64_t, KMAX, KMIN) break;
  }
  return kiln_barrier(b) < 0 ? -1 : 0;
}
