"""Compiler benchmarks: jitted programs built by kiln's C compiler against JAX (XLA), one run.

Every workload runs for kiln and for JAX in the same process, the timed batches of the two
interleaved so that background load inflates both alike. Each table row gives the median
time per call (and the minimum), the ratio kiln ÷ JAX of the medians, the target ratio and
whether it is met, and a check that kiln's output agrees with JAX's (✓ / ✗; loose
tolerance, PRNG output compared bit for bit).

Workloads (target kiln ÷ JAX):

1. ``elementwise``  ``jit(lambda x: x*x + x*2.0)``, x f32[5000,5000]            ≤ 0.25
2. ``sum``          ``jit(lambda x: jnp.sum(x*x))``, same x                       ≤ 1
3. ``logsumexp``    ``jit(nn.logsumexp(x, axis=1))``, same x                     ≤ 0.5
4. ``mlp128``, ``mlp1024``  ``jit(grad(loss))(params, x, y)``: 784-512-512-10 tanh MLP,
   softmax cross-entropy, batch 128 / 1024                                         ≤ 1
5. ``perex``        ``jit(vmap(grad(loss1), in_axes=(None, 0, 0)))``, batch 128   ≤ 0.25
6. ``normal``       ``jit(lambda k: random.normal(k, (10**7,)))(key)``            ≤ 0.5
7. ``jit_call``     cached ``jit(lambda x: x + 1.0)`` on f32[10], per call        ≤ 1.5
   ``eager_add``    eager ``jnp.add(a, b)`` of two f32[10], per call               ≤ 0.5
8. ``first_call``   first call of ``jit(grad(loss))`` (batch 128; trace + compile + run)
   in a fresh subprocess: kiln with an empty disk cache vs JAX (persistent cache off) ≤ 1;
   kiln with the disk cache that run left behind vs the same JAX time            ≤ 0.33
9. ``xfmr``         ``jit(grad(loss))`` of one pre-LN transformer block (B=8, T=128, d=256,
   4 heads, causal softmax attention masked with ``jnp.where(mask, s, -inf)``, GELU
   MLP 1024, layer norms; loss ``mean(out**2)``) w.r.t. all 12 parameters        ≤ 0.75
   ``sdpa``         ``jit(grad(...))`` of ``nn.dot_product_attention(q, k, v,
   is_causal=True)``, q/k/v f32[8,128,4,64], w.r.t. q, k, v                      ≤ 0.75
10. ``dot``          ``jit(jnp.dot)`` of two f32[2048,2048]: kiln vs JAX (no target) and
   kiln ÷ ``np.dot`` (NumPy's own OpenBLAS with its threads; kiln calls the
   ``scipy-openblas32`` wheel's OpenBLAS, split over its OpenMP threads): kiln must
   reach 95% of BLAS speed                                                     ≤ 1/0.95
   (SciPy's ``sgemm`` called directly is reported alongside; one untimed call before
   each batch, so every library's threads are awake)

Timing: kiln compiles synchronously (``kiln_compile = "sync"``), so the warm-up call
builds the C code and the timed calls run it; every timed call blocks on its outputs
(``block_until_ready``). Loop counts are calibrated so that each workload spends about
``--budget`` seconds per library (1.5 s; 0.4 s with ``--quick``).

Run from the repository root, with OpenBLAS's environment overrides removed for that
command (they halve OpenBLAS's speed on this machine; a warning is printed if set)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_compiler.py
    python benchmarks/bench_compiler.py --quick --only mlp --only dot

Numbers are for comparison within one run only; CI never gates on them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from dataclasses import dataclass, field

import numpy as np

# Run from a checkout without installing: the repository root holds the kiln package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
MLP_SIZES = (784, 512, 512, 10)
BIG = (5000, 5000)
LSE_SHAPE = (5000, 5000)
DOT_N = 2048
NORMAL_N = 10**7
# One pre-LN transformer block: batch, sequence, model width, heads, MLP hidden width.
XF_B, XF_T, XF_D, XF_H, XF_F = 8, 128, 256, 4, 1024


# ----------------------------------------------------------------------------- libraries

@dataclass
class Lib:
    """One library's entry points, so that each workload is written once for both."""
    name: str
    mod: object
    jnp: object
    nn: object
    random: object
    put: object          # numpy array -> library array (on the device, ready)

    def block(self, tree):
        return self.mod.block_until_ready(tree)

    def leaves(self, tree):
        return self.mod.tree_util.tree_leaves(tree)


def kiln_lib():
    """kiln's entry points, its configuration left as it is."""
    import kiln
    import kiln.numpy as knp
    return Lib("kiln", kiln, knp, kiln.nn, kiln.random, knp.asarray)


def load_kiln():
    import kiln
    kiln.config.update("kiln_compile", os.environ.get("KILN_COMPILE", "sync"))
    return kiln_lib()


def load_jax():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_compilation_cache", False)
    return Lib("jax", jax, jnp, jax.nn, jax.random, jax.device_put)


def wait_for_kiln_compiles():
    try:
        from kiln.backends import cpu
    except Exception:     # noqa: BLE001 - the backend may not exist (yet)
        return
    wait = getattr(cpu, "wait_for_compiles", None)
    if wait is not None:
        wait()


def kiln_build_stats():
    """``kiln.compiler.build.build.stats()`` when kiln has it, else None (never raises)."""
    try:
        from kiln.compiler.build import build
        stats = getattr(build, "stats", None)
        return stats() if stats is not None else None
    except Exception:     # noqa: BLE001 - optional, guarded
        return None


# ----------------------------------------------------------------------------- timing

def calibrate(fn, target_s):
    """Calls per batch so one batch takes about ``target_s`` (at least 1)."""
    n, t = 1, 0.0
    while True:
        t = timeit.timeit(fn, number=n)
        if t >= target_s / 4 or n >= 1_000_000:
            break
        n *= 4
    return max(1, int(round(n * target_s / max(t, 1e-9))))


# Idle time before each timed batch (see measure).
SETTLE_S = 0.05


def measure(thunks, budget_s, rounds, warm=False):
    """Per-call (median, min) of each thunk, the batches of all thunks interleaved.

    ``thunks`` maps a name to a zero-argument callable (already warmed up). Each gets
    ``rounds`` batches (fewer for calls slower than the budget allows; at least 3) of a
    calibrated number of calls, so one library spends about ``budget_s`` in total.
    Each batch starts after ``SETTLE_S`` of idle time: a library's worker threads spin
    for a while after its calls, and measured right after JAX's, kiln's 2048-square
    matrix product took 72 ms instead of 52 (the same holds the other way round).
    With ``warm``, one untimed call precedes each batch (thread pools that went to
    sleep during the pause are awake when timing starts: steady-state throughput).
    """
    plan = {}
    for name, fn in thunks.items():
        t0 = time.perf_counter()
        fn()
        one = time.perf_counter() - t0
        r = rounds if one * rounds <= budget_s else max(3, min(rounds, int(budget_s / one)))
        n = 1 if one >= budget_s / r else calibrate(fn, budget_s / r)
        plan[name] = (r, n)
    per = {name: [] for name in thunks}
    for i in range(max(r for r, _ in plan.values())):
        for name, fn in thunks.items():
            r, n = plan[name]
            if i < r:
                # Let the previous library's worker threads (XLA's, OpenBLAS's) stop
                # spinning, so they do not steal the cores from this batch.
                time.sleep(SETTLE_S)
                if warm:
                    fn()
                per[name].append(timeit.timeit(fn, number=n) / n)
    return {name: (statistics.median(ts), min(ts)) for name, ts in per.items()}


class WorkloadTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise WorkloadTimeout("workload ran past --timeout")


# ----------------------------------------------------------------------------- programs

def mlp_params(rng):
    return [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             (0.1 * rng.standard_normal(n)).astype(np.float32))
            for m, n in zip(MLP_SIZES[:-1], MLP_SIZES[1:])]


def mlp_batch(rng, batch):
    x = rng.standard_normal((batch, MLP_SIZES[0])).astype(np.float32)
    y = np.eye(MLP_SIZES[-1], dtype=np.float32)[rng.integers(0, MLP_SIZES[-1], batch)]
    return x, y


def mlp_loss_fns(L):
    """(loss over a batch, loss of one example) for library ``L``."""
    jnp, nn = L.jnp, L.nn

    def predict(params, inputs):
        for W, b in params[:-1]:
            inputs = jnp.tanh(jnp.dot(inputs, W) + b)
        W, b = params[-1]
        return jnp.dot(inputs, W) + b

    def loss(params, x, y):
        return -jnp.mean(jnp.sum(y * nn.log_softmax(predict(params, x)), axis=-1))

    def loss1(params, x, y):   # one example: x (784,), y (10,)
        return loss(params, x.reshape(1, -1), y.reshape(1, -1))

    return loss, loss1


def put_tree(L, params):
    return [(L.put(W), L.put(b)) for W, b in params]


class Data:
    """Inputs shared by both libraries (NumPy, built once, lazily)."""

    def __init__(self):
        self._cache = {}

    def get(self, key, make):
        if key not in self._cache:
            self._cache[key] = make(np.random.default_rng(0))
        return self._cache[key]

    def big(self):
        return self.get("big", lambda r: r.standard_normal(BIG, dtype=np.float32))

    def lse(self):
        if LSE_SHAPE == BIG:
            return self.big()
        return self.get("lse", lambda r: r.standard_normal(LSE_SHAPE, dtype=np.float32))

    def params(self):
        return self.get("params", mlp_params)

    def batch(self, n):
        return self.get(("batch", n), lambda r: mlp_batch(r, n))


# Each builder takes (library, data) and returns a zero-argument callable that runs the
# workload once and returns its outputs, blocked (ready).

def b_elementwise(L, d):
    f = L.mod.jit(lambda x: x * x + x * 2.0)
    x = L.put(d.big())
    return lambda: f(x).block_until_ready()


def b_sum(L, d):
    jnp = L.jnp
    f = L.mod.jit(lambda x: jnp.sum(x * x))
    x = L.put(d.big())
    return lambda: f(x).block_until_ready()


def b_logsumexp(L, d):
    nn = L.nn
    f = L.mod.jit(lambda x: nn.logsumexp(x, axis=1))
    x = L.put(d.lse())
    return lambda: f(x).block_until_ready()


def b_mlp(batch):
    def build(L, d):
        loss, _ = mlp_loss_fns(L)
        f = L.mod.jit(L.mod.grad(loss))
        params = put_tree(L, d.params())
        x, y = (L.put(a) for a in d.batch(batch))
        return lambda: L.block(f(params, x, y))
    return build


def b_perex(L, d):
    _, loss1 = mlp_loss_fns(L)
    f = L.mod.jit(L.mod.vmap(L.mod.grad(loss1), in_axes=(None, 0, 0)))
    params = put_tree(L, d.params())
    x, y = (L.put(a) for a in d.batch(128))
    return lambda: L.block(f(params, x, y))


def b_normal(L, d):
    random = L.random
    f = L.mod.jit(lambda k: random.normal(k, (NORMAL_N,)))
    key = random.key(0)
    return lambda: f(key).block_until_ready()


def b_jit_call(L, d):
    f = L.mod.jit(lambda x: x + 1.0)
    x = L.put(np.arange(10, dtype=np.float32))
    return lambda: f(x).block_until_ready()


def b_jit_call_tree(L, d):
    # Issue 27: the per-call overhead of a cached jit whose arguments are a dict of
    # parameters (16 layers of {"w", "b"}: 33 leaves), as a training step's are.
    params = {f"layer{i}": {"w": L.put(np.full((8, 8), i, np.float32)),
                            "b": L.put(np.full((8,), i, np.float32))} for i in range(16)}
    x = L.put(np.arange(8, dtype=np.float32))
    f = L.mod.jit(lambda p, x: x + p["layer3"]["b"])
    return lambda: f(params, x).block_until_ready()


def b_eager_add(L, d):
    add = L.jnp.add
    a = L.put(np.arange(10, dtype=np.float32))
    b = L.put(np.ones(10, dtype=np.float32))
    return lambda: add(a, b).block_until_ready()


def b_dot(L, d):
    jnp = L.jnp
    f = L.mod.jit(lambda a, b: jnp.dot(a, b))
    a, b = (L.put(m) for m in dot_inputs(d))
    return lambda: f(a, b).block_until_ready()


def xfmr_params(rng):
    d, f = XF_D, XF_F

    def w(m, n):
        return (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32)

    def v(n, scale=0.1, base=0.0):
        return (base + scale * rng.standard_normal(n)).astype(np.float32)
    return {"ln1_g": v(d, base=1.0), "ln1_b": v(d), "w_qkv": w(d, 3 * d), "b_qkv": v(3 * d),
            "w_o": w(d, d), "b_o": v(d), "ln2_g": v(d, base=1.0), "ln2_b": v(d),
            "w_1": w(d, f), "b_1": v(f), "w_2": w(f, d), "b_2": v(d)}


def xfmr_loss_fn(L):
    """The loss of one pre-LN transformer block, written as a plain JAX user would."""
    jnp, nn = L.jnp, L.nn
    B, T, D, H = XF_B, XF_T, XF_D, XF_H
    hd = D // H

    def layer_norm(x, g, b, eps=1e-5):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + eps) * g + b

    def attention(p, x):
        qkv = x @ p["w_qkv"] + p["b_qkv"]
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q, k, v = (a.reshape(B, T, H, hd).transpose(0, 2, 1, 3) for a in (q, k, v))
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(hd).astype(x.dtype)
        mask = jnp.tril(jnp.ones((T, T), dtype=bool))
        s = jnp.where(mask, s, -jnp.inf)
        a = nn.softmax(s, axis=-1)
        y = jnp.einsum("bhqk,bhkd->bhqd", a, v)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, D)
        return y @ p["w_o"] + p["b_o"]

    def block(p, x):
        x = x + attention(p, layer_norm(x, p["ln1_g"], p["ln1_b"]))
        h = nn.gelu(layer_norm(x, p["ln2_g"], p["ln2_b"]) @ p["w_1"] + p["b_1"])
        return x + h @ p["w_2"] + p["b_2"]

    def loss(p, x):
        return jnp.mean(block(p, x) ** 2)

    return loss


def b_xfmr(L, d):
    f = L.mod.jit(L.mod.grad(xfmr_loss_fn(L)))
    params = {k: L.put(v) for k, v in d.get("xfmr_params", xfmr_params).items()}
    x = L.put(d.get("xfmr_x", lambda r: r.standard_normal((XF_B, XF_T, XF_D), dtype=np.float32)))
    return lambda: L.block(f(params, x))


def b_sdpa(L, d):
    jnp, nn = L.jnp, L.nn

    def loss(q, k, v):
        return jnp.mean(nn.dot_product_attention(q, k, v, is_causal=True) ** 2)
    f = L.mod.jit(L.mod.grad(loss, argnums=(0, 1, 2)))
    shape = (XF_B, XF_T, XF_H, XF_D // XF_H)
    qkv = d.get("sdpa_qkv", lambda r: [r.standard_normal(shape, dtype=np.float32)
                                       for _ in range(3)])
    q, k, v = (L.put(a) for a in qkv)
    return lambda: L.block(f(q, k, v))


def dot_inputs(d):
    return d.get("dot", lambda r: (r.standard_normal((DOT_N, DOT_N), dtype=np.float32),
                                   r.standard_normal((DOT_N, DOT_N), dtype=np.float32)))


@dataclass
class Workload:
    name: str
    title: str
    target: float | None
    build: object
    exact: bool = False      # compare outputs bit for bit (PRNG)


WORKLOADS = [
    Workload("elementwise", "x*x + x*2.0, f32[5000,5000]", 0.25, b_elementwise),
    Workload("sum", "sum(x*x), f32[5000,5000]", 1.0, b_sum),
    Workload("logsumexp", f"logsumexp(x, axis=1), f32[{LSE_SHAPE[0]},{LSE_SHAPE[1]}]", 0.5, b_logsumexp),
    Workload("mlp128", "MLP jit(grad(loss)), batch 128", 1.0, b_mlp(128)),
    Workload("mlp1024", "MLP jit(grad(loss)), batch 1024", 1.0, b_mlp(1024)),
    Workload("perex", "per-example grads jit(vmap(grad)), batch 128", 0.25, b_perex),
    Workload("normal", "jit random.normal(key, (10**7,))", 0.5, b_normal, exact=True),
    Workload("xfmr", f"transformer block jit(grad(loss)), B{XF_B} T{XF_T} d{XF_D} h{XF_H}",
             0.75, b_xfmr),
    Workload("sdpa", f"dot_product_attention causal jit(grad), B{XF_B} T{XF_T} h{XF_H}",
             0.75, b_sdpa),
    Workload("jit_call", "cached jit(x + 1.0) call, f32[10]", 1.5, b_jit_call),
    Workload("jit_call_tree", "cached jit call, dict of 16 layers (33 leaves)", 1.0,
             b_jit_call_tree),
    Workload("eager_add", "eager jnp.add(a, b), f32[10]", 0.5, b_eager_add),
]

# Every kiln program this benchmark runs: the table's workloads and the dot rows (the
# first-call rows build mlp128's program). tests/benchmarks/test_workloads_build.py builds
# each with kiln's real shapes and fails when its C does not build (a row timing the
# reference backend, as the LeNet gradient of bench_loops_conv.py did in session 19).
BUILD_CHECKED = WORKLOADS + [Workload("dot", f"jit dot f32[{DOT_N}]²", None, b_dot)]


# ----------------------------------------------------------------------------- results

@dataclass
class Row:
    title: str
    kiln: tuple | None = None        # (median, min) seconds
    ref: tuple | None = None
    target: float | None = None
    check: str = ""
    ref_name: str = "JAX"
    target_text: str | None = None
    error: str | None = None
    notes: list = field(default_factory=list)


def first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".strip()


def compare(L_k, out_k, L_j, out_j, exact=False):
    """'✓' / '✗ …' for kiln's outputs against JAX's (tree leaves, in order)."""
    try:
        ks = [np.asarray(a) for a in L_k.leaves(out_k)]
        js = [np.asarray(a) for a in L_j.leaves(out_j)]
    except Exception as e:   # noqa: BLE001
        return f"✗ ({first_line(e)[:40]})"
    if len(ks) != len(js):
        return f"✗ ({len(ks)} vs {len(js)} outputs)"
    worst = 0.0
    for k, j in zip(ks, js):
        if k.shape != j.shape:
            return f"✗ (shape {k.shape} vs {j.shape})"
        if exact:
            if not np.array_equal(k, j):
                close = np.allclose(k, j, rtol=1e-5, atol=1e-6)
                return "✗ bits differ" + (" (close)" if close else "")
            continue
        k64, j64 = k.astype(np.float64), j.astype(np.float64)
        scale = float(np.max(np.abs(j64))) if j64.size else 0.0
        err = np.abs(k64 - j64) / (1e-3 * np.abs(j64) + 1e-4 * scale + 1e-30)
        if not np.all(np.isfinite(k64) == np.isfinite(j64)):
            return "✗ (non-finite)"
        worst = max(worst, float(np.max(np.where(np.isfinite(err), err, 0.0), initial=0.0)))
    if worst > 1.0:
        return f"✗ ({worst:.1f}× tol)"
    return "✓ bits" if exact else "✓"


def fmt_t(t):
    if t is None:
        return "—"
    if t < 1e-3:
        return f"{t * 1e6:.2f} µs"
    if t < 1.0:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.3f} s"


def fmt_pair(p):
    return "—" if p is None else f"{fmt_t(p[0])} (min {fmt_t(p[1])})"


def print_table(rows):
    head = ["workload", "kiln time", "JAX time", "kiln÷JAX", "target", "met?", "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        ratio = r.kiln[0] / r.ref[0] if r.kiln and r.ref else None
        ref = fmt_pair(r.ref)
        if r.ref and r.ref_name != "JAX":
            ref = f"{r.ref_name}: {ref}"
        target = r.target_text or ("—" if r.target is None else f"≤ {r.target:g}")
        if r.target is None or ratio is None:
            met = "—"
        else:
            met = "yes" if ratio <= r.target else "no"
        kiln = fmt_pair(r.kiln) if r.error is None else f"ERROR: {r.error[:70]}"
        ratio_s = "—" if ratio is None else f"{ratio:.3f}"
        if r.ref_name != "JAX" and ratio is not None:
            ratio_s += f" (÷{r.ref_name})"
        cells = [r.title, kiln, ref, ratio_s, target, met, r.check or "—"]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    print("\n".join(lines))


# ----------------------------------------------------------------------------- running

def run_workload(w, libs, data, args):
    """Time one workload for kiln and JAX; returns a Row (errors caught per library)."""
    row = Row(w.title, target=w.target)
    thunks, outs, errors = {}, {}, {}
    failed_builds = None
    for L in libs:
        try:
            if L.name == "kiln":
                failed_builds = (kiln_build_stats() or {}).get("failures")
            fn = w.build(L, data)
            t0 = time.perf_counter()
            outs[L.name] = fn()             # first call: trace + compile (+ run)
            if L.name == "kiln":
                wait_for_kiln_compiles()
            outs[L.name] = fn()             # compiled code, also the warm-up
            thunks[L.name] = fn
            if time.perf_counter() - t0 > 30:
                row.notes.append(f"{L.name}: warm-up took {time.perf_counter() - t0:.0f} s")
        except Exception as e:   # noqa: BLE001 - reported in the table, the run goes on
            errors[L.name] = first_line(e)
    if thunks:
        try:
            res = measure(thunks, args.budget, args.rounds)
        except Exception as e:   # noqa: BLE001
            res = {}
            for name in thunks:
                errors.setdefault(name, first_line(e))
        row.kiln, row.ref = res.get("kiln"), res.get("jax")
    if "kiln" in errors:
        row.error = errors["kiln"]
    if "jax" in errors:
        row.notes.append(f"JAX failed: {errors['jax']}")
    if "kiln" in outs and "jax" in outs:
        row.check = compare(libs[0], outs["kiln"], libs[1], outs["jax"], exact=w.exact)
    # A program whose C did not compile runs on the reference backend (with a warning
    # only): the row would time NumPy, so it says so (session 19: the LeNet gradient ran
    # there for a whole session, 3x slower, unnoticed).
    after = (kiln_build_stats() or {}).get("failures")
    if failed_builds is not None and after is not None and after > failed_builds:
        row.check = f"✗ {after - failed_builds} C build(s) failed: reference backend"
    return row


def run_dot(libs, data, args):
    """kiln vs JAX vs np.dot on f32[2048,2048]: two rows (÷JAX, informational; ÷np.dot)."""
    vs_jax = Row(f"jit dot f32[{DOT_N}]², vs JAX", target=None)
    vs_blas = Row(f"jit dot f32[{DOT_N}]², vs np.dot (BLAS)", target=1 / 0.95,
                  ref_name="np.dot", target_text="≥ 95% of BLAS speed (≤ 1.053)")
    a, b = dot_inputs(data)
    from scipy.linalg import blas
    # SciPy's OpenBLAS (what kiln calls with KILN_BLAS=scipy) on the same row-major
    # data: (a @ b).T = b.T @ a.T, with the transposes F-ordered views (no copies).
    thunks = {"blas": lambda: blas.sgemm(1.0, b.T, a.T).T, "numpy": lambda: np.dot(a, b)}
    outs = {"blas": thunks["blas"](), "numpy": thunks["numpy"]()}
    for L in libs:
        try:
            fn = b_dot(L, data)
            fn()
            if L.name == "kiln":
                wait_for_kiln_compiles()
            outs[L.name] = fn()
            thunks[L.name] = fn
        except Exception as e:   # noqa: BLE001
            err = first_line(e)
            if L.name == "kiln":
                vs_jax.error = vs_blas.error = err
            else:
                vs_jax.notes.append(f"JAX failed: {err}")
    res = measure(thunks, args.budget, args.rounds, warm=True)
    vs_jax.kiln = vs_blas.kiln = res.get("kiln")
    vs_jax.ref, vs_blas.ref = res.get("jax"), res.get("numpy")
    if "kiln" in outs and "jax" in outs:
        vs_jax.check = compare(libs[0], outs["kiln"], libs[1], outs["jax"])
    if "kiln" in outs:
        vs_blas.check = compare(libs[0], outs["kiln"], libs[0], outs["numpy"])
    if "kiln" in res:
        # Interleaved with the others, SciPy's sgemm measured up to 2x its speed alone
        # (its threads wake slowly after the other libraries' batches): informational.
        vs_blas.notes.append(f"scipy sgemm {res['blas'][0] * 1e3:.1f} ms: kiln ÷ sgemm = "
                             f"{res['kiln'][0] / res['blas'][0]:.3f}")
    if "jax" in res:
        vs_blas.notes.append(f"JAX ÷ np.dot = {res['jax'][0] / res['numpy'][0]:.3f}")
    return [vs_jax, vs_blas]


# The child process of the first-call workload: imports one library, makes the inputs,
# then times the first call of jit(grad(loss)) and writes the time (and outputs) back.

def first_call_child(lib_name, out_path):
    L = load_kiln() if lib_name == "kiln" else load_jax()
    d = Data()
    loss, _ = mlp_loss_fns(L)
    params = L.block(put_tree(L, d.params()))
    x, y = (L.put(v) for v in d.batch(128))
    L.block((x, y))
    t0 = time.perf_counter()
    g = L.block(L.mod.jit(L.mod.grad(loss))(params, x, y))
    t = time.perf_counter() - t0
    leaves = [np.asarray(v) for v in L.leaves(g)]
    np.savez(out_path, *leaves)
    info = {"t": t}
    if lib_name == "kiln":
        info["build_stats"] = kiln_build_stats()
    print("RESULT " + json.dumps(info, default=str))


def spawn_first_call(lib_name, env, out_path, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--first-call-child", lib_name,
           "--child-out", out_path]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    err = (p.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"child exited {p.returncode}: {err}")


def run_first_call(args):
    """kiln vs JAX on the first call of jit(grad(mlp)) in fresh processes: kiln's default
    tiered mode (the call runs on the reference backend while C builds in the background),
    kiln waiting for its C build (KILN_COMPILE=sync; the program is not in the disk cache,
    kiln's two per-machine libraries are, as after any earlier use of kiln that multiplied
    matrices: the runtime extension and the BLAS glue), and a warm disk cache.

    Children get Python bytecode caches as an installed package has (this machine sets
    PYTHONDONTWRITEBYTECODE=1, which would charge ~20 ms of compiling kiln's own .py files
    to every kiln first call but not to JAX's pip-compiled ones)."""
    tiered = Row("first call jit(grad(mlp)) b128, fresh process, opt-in tiered mode (KILN_COMPILE=async)",
                 target=1.0)
    cold = Row("first call, fresh process, waiting for the C build (program not cached)",
               target=1.0)
    warm = Row("first call, fresh process, warm kiln disk cache", target=0.33)
    n = 1 if args.quick else 3
    base = dict(os.environ)
    base.pop("JAX_COMPILATION_CACHE_DIR", None)
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    base["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    base["KILN_COMPILE"] = "sync"
    tj, tt, tc, tw, builds_cold, builds_warm = [], [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="kiln_bench_") as tmp:
        outs = {k: os.path.join(tmp, k + ".npz") for k in ("jax", "tiered", "cold", "warm")}
        for _ in range(n):
            try:
                tj.append(spawn_first_call("jax", base, outs["jax"], args.timeout)["t"])
            except Exception as e:   # noqa: BLE001
                cold.notes.append(f"JAX child failed: {first_line(e)}")
                break
        subprocess.run([sys.executable, "-m", "compileall", "-q",
                        os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/kiln"],
                       env=base, capture_output=True)
        for i in range(n):
            cache = os.path.join(tmp, f"cache{i}")
            os.makedirs(cache)
            env = dict(base, KILN_CACHE_DIR=cache)
            try:
                subprocess.run([sys.executable, "-c", "import kiln, kiln.numpy as jnp; "
                                "kiln.jit(lambda x: x + 1)(jnp.ones(3)); "
                                "kiln.jit(lambda a: a @ a)(jnp.ones((256, 256)))"],
                               env=env, capture_output=True, timeout=args.timeout)
                r = spawn_first_call("kiln", dict(env, KILN_COMPILE="async"),
                                     outs["tiered"], args.timeout)
                tt.append(r["t"])
                shutil.rmtree(os.path.join(cache, "so"), ignore_errors=True)
                subprocess.run([sys.executable, "-c", "import kiln, kiln.numpy as jnp; "
                                "kiln.jit(lambda x: x + 1)(jnp.ones(3)); "
                                "kiln.jit(lambda a: a @ a)(jnp.ones((256, 256)))"],
                               env=env, capture_output=True, timeout=args.timeout)
                r = spawn_first_call("kiln", env, outs["cold"], args.timeout)
                tc.append(r["t"])
                builds_cold.append(r.get("build_stats"))
                r = spawn_first_call("kiln", env, outs["warm"], args.timeout)
                tw.append(r["t"])
                builds_warm.append(r.get("build_stats"))
            except Exception as e:   # noqa: BLE001
                cold.error = warm.error = tiered.error = first_line(e)
                break

        def pair(ts):
            return (statistics.median(ts), min(ts)) if ts else None

        tiered.ref = cold.ref = warm.ref = pair(tj)
        tiered.kiln, cold.kiln, warm.kiln = pair(tt), pair(tc), pair(tw)
        if tj and tt:
            tiered.check = check_npz(outs["tiered"], outs["jax"])
        if tj and tc:
            cold.check = check_npz(outs["cold"], outs["jax"])
        if tj and tw:
            warm.check = check_npz(outs["warm"], outs["jax"])
    for label, stats in (("cold", builds_cold), ("warm", builds_warm)):
        if any(s is not None for s in stats):
            cold.notes.append(f"kiln build stats ({label} cache, per run): "
                              + "; ".join(json.dumps(s, default=str) for s in stats))
    if tc and not any(s is not None for s in builds_cold):
        cold.notes.append("kiln.compiler.build.build.stats() not available: C build time not split out")
    return [tiered, cold, warm]


def check_npz(path_k, path_j):
    with np.load(path_k) as k, np.load(path_j) as j:
        ks = [k[f"arr_{i}"] for i in range(len(k.files))]
        js = [j[f"arr_{i}"] for i in range(len(j.files))]

    class _NP:      # a stand-in Lib whose leaves are the list itself
        @staticmethod
        def leaves(t):
            return t
    return compare(_NP, ks, _NP, js)


# ----------------------------------------------------------------------------- main

def machine_info():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    lines = [f"machine: {model}, {os.cpu_count()} cores ({usable} usable), "
             f"python {platform.python_version()}"]
    versions = [f"numpy {np.__version__}"]
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        versions[0] += f" ({blas.get('name')} {blas.get('version')})"
    except Exception:    # noqa: BLE001 - informational only
        pass
    for mod in ("jax", "jaxlib", "kiln"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except Exception:   # noqa: BLE001
            versions.append(f"{mod} not importable")
    lines.append("versions: " + ", ".join(versions))
    try:
        lines.append("load average: " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    except OSError:
        pass
    for var in BLAS_ENV:
        if os.environ.get(var) is not None:
            lines.append(f"WARNING: {var}={os.environ[var]} is set; it slows OpenBLAS here. "
                         "Rerun with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python "
                         "benchmarks/bench_compiler.py` for BLAS-bound rows.")
    for var in ("KILN_BACKEND", "KILN_COMPILE", "KILN_CACHE_DIR"):
        if os.environ.get(var) is not None:
            lines.append(f"note: {var}={os.environ[var]}")
    return "\n".join(lines)


ALL_NAMES = [w.name for w in WORKLOADS] + ["first_call", "dot"]


def selected(name, only):
    return not only or any(o in name for o in only)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller budget")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run workloads whose name contains NAME (repeatable): "
                         + ", ".join(ALL_NAMES))
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of timed calls per workload per library (1.5; quick 0.4)")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds before a workload (or first-call child) is abandoned")
    ap.add_argument("--first-call-child", choices=["kiln", "jax"], help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.first_call_child:
        first_call_child(args.first_call_child, args.child_out)
        return
    if args.budget is None:
        args.budget = 0.4 if args.quick else 1.5
    args.rounds = 5 if args.quick else 9
    for o in args.only:
        if not any(o in n for n in ALL_NAMES):
            ap.error(f"--only {o!r} matches no workload; names: {', '.join(ALL_NAMES)}")

    print(machine_info())
    print(f"mode: {'quick' if args.quick else 'full'}, budget {args.budget:g} s per workload "
          f"per library, up to {args.rounds} interleaved rounds; times: median (min) per call\n")
    libs = [load_kiln(), load_jax()]
    data = Data()
    rows = []
    use_alarm = hasattr(signal, "SIGALRM")
    if use_alarm:
        signal.signal(signal.SIGALRM, _alarm)

    def guarded(title, fn, alarm=True):
        if use_alarm and alarm:
            signal.alarm(int(args.timeout))
        try:
            return fn()
        except Exception as e:   # noqa: BLE001 - one failing workload must not stop the run
            return [Row(title, error=first_line(e))]
        finally:
            if use_alarm:
                signal.alarm(0)

    for w in WORKLOADS:
        if selected(w.name, args.only):
            t0 = time.perf_counter()
            rows += guarded(w.title, lambda: [run_workload(w, libs, data, args)])
            print(f"  [{w.name}: {time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    if selected("first_call", args.only):
        t0 = time.perf_counter()
        rows += guarded("first call", lambda: run_first_call(args), alarm=False)
        print(f"  [first_call: {time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    if selected("dot", args.only):
        t0 = time.perf_counter()
        rows += guarded("dot", lambda: run_dot(libs, data, args))
        print(f"  [dot: {time.perf_counter() - t0:.1f} s]", file=sys.stderr)

    print()
    print_table(rows)
    notes = [(r.title, n) for r in rows for n in r.notes]
    notes += [(r.title, "kiln ERROR: " + r.error) for r in rows if r.error and len(r.error) > 70]
    if notes:
        print("\nNotes:")
        for title, n in notes:
            print(f"- {title}: {n}")


if __name__ == "__main__":
    main()
