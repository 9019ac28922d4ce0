"""Native synchronization for device threads: a futex barrier and an in-place all-reduce.

A Python ``threading.Barrier`` costs 100-200 µs per crossing with 8 threads on 2 cores
(condition variables, one lock per waiter, the GIL on every wake). The barrier here is an
atomic counter and a generation word: the last arrival bumps the generation and wakes
the others with one ``futex`` call; waiters spin briefly, then sleep on the word. It runs
with the GIL released (a ``ctypes`` call), so a crossing costs a few µs plus the wakes.

``kiln_allreduce`` is the local part of ``psum``/``pmax``/``pmin``: every participant
publishes its operand's address, crosses the barrier, reduces its share of the elements
of all operands (device order: the same bits every run) into the shared output, and
crosses again. Built once per machine through the compiler's disk cache; without a C
compiler (``available()`` is False) the Python fallbacks in ``spmd``/``collectives`` run.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

_SOURCE = r"""
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
"""

DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2,
          np.dtype(np.int64): 3, np.dtype(np.uint32): 4, np.dtype(np.uint64): 5}
OPS = {"SUM": 0, "MAX": 1, "MIN": 2}

def _cores() -> int:
    import os
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # pragma: no cover
        return os.cpu_count() or 1


_lib: list = []
_lock = threading.Lock()


def _load():
    if _lib:
        return _lib[0]
    with _lock:
        if not _lib:
            lib = None
            try:
                import platform

                from kiln.compiler.build.build import load_library
                if platform.machine() in ("x86_64", "AMD64") and \
                        platform.system() == "Linux":
                    lib = load_library(_SOURCE, name="kiln_spmd")
                    lib.kiln_barrier.argtypes = [ctypes.c_void_p]
                    lib.kiln_barrier.restype = ctypes.c_int
                    lib.kiln_barrier_abort.argtypes = [ctypes.c_void_p]
                    lib.kiln_barrier_abort.restype = None
                    lib.kiln_allreduce.argtypes = [
                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
                    lib.kiln_allreduce.restype = ctypes.c_int
            except Exception:        # noqa: BLE001 - no compiler: the Python fallbacks
                lib = None
            _lib.append(lib)
    return _lib[0]


def available() -> bool:
    return _load() is not None


class NativeBarrier:
    """A barrier of ``n`` threads with ``threading.Barrier``'s ``wait``/``abort``
    (``wait`` returns 0 for exactly one participant; ``BrokenBarrierError`` once
    aborted)."""

    def __init__(self, n: int):
        self.n = n
        self.word = np.zeros(8, np.int32)
        self.word[2] = n
        self.word[4] = 2000 if n <= _cores() else 0
        self.addr = self.word.ctypes.data
        self._lib = _load()

    def wait(self) -> int:
        r = self._lib.kiln_barrier(self.addr)
        if r < 0:
            raise threading.BrokenBarrierError
        return 0 if r == 1 else 1

    def abort(self) -> None:
        self._lib.kiln_barrier_abort(self.addr)

    def allreduce(self, slots_addr: int, outp_addr: int, size: int, k: int, m: int,
                  dtype: int, op: int) -> None:
        if self._lib.kiln_allreduce(self.addr, slots_addr, outp_addr, size, k, m, dtype,
                                    op) < 0:
            raise threading.BrokenBarrierError


def make_barrier(n: int):
    """A :class:`NativeBarrier` where the native library builds, else ``threading.Barrier``."""
    return NativeBarrier(n) if n > 1 and available() else threading.Barrier(n)
