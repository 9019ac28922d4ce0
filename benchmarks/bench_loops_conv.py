"""Loops and convolutions compiled natively: kiln vs JAX, measured back to back in one run.

Workloads (issue "compiler part 2") and targets (kiln time ÷ JAX time):

1. ``fori``     ``jit(fori_loop(0, 10_000, body, x))``, a few scalar ops per step on a
   f32[16] carry (``c * 0.99 + tanh(c) * 0.01 + 0.001``); reported per iteration  ≤ 1
   (before session 16, with ``sin`` instead of ``tanh`` kiln called the C library's
   scalar ``sinf``: 0.075 µs per iteration against JAX's 0.045)
1b. ``fori_sin`` the same with ``sin`` instead of ``tanh``: kiln's vectorizable
   ``ksin32`` (glibc's bits, ``kiln/compiler/render/trig_math.py``)               ≤ 1
1c. ``sin_array`` ``jit(jnp.sin)`` of a f32[2^22] array of normal(0, 10) values  ≤ 1
1d. ``pow_array`` ``jit(jnp.power)`` of f32[2^22] bases |normal(0, 10)| and exponents
   normal(0, 3): kiln's vectorizable ``kpow32`` (glibc's ``powf`` bits,
   ``kiln/compiler/render/binary_math.py``)                                   ≤ 1
1e. ``atan2_array`` ``jit(jnp.arctan2)`` of two f32[2^22] normal(0, 10) arrays
   (``katan2_32``, glibc's ``atan2f`` bits)                                    ≤ 1
2. ``rnn``      ``jit(grad(loss))`` of a scan RNN: hidden 128, 100 steps, batch 32
   (``h = tanh(h @ Wh + x_t @ Wx)``), gradient w.r.t. both weights           ≤ 1
3. ``lenet``    ``jit(grad(loss))`` of a LeNet-like net: two 5x5 'SAME' convolutions
   (32 and 64 channels, NHWC), relu, 2x2 max-pool after each, dense to 10 classes,
   softmax cross-entropy; batch 64 of 28x28x1                                  ≤ 1
4. ``trips``    compile time of the ``fori`` program at 10, 10⁴ and 10⁶ iterations:
   kiln's C build and JAX's lower + compile, to show it does not grow with the
   trip count (no target; the table lists the times)

Same timing rules as ``bench_compiler.py`` (interleaved batches, medians; kiln compiles
synchronously). Run from the repository root::

    python benchmarks/bench_loops_conv.py [--quick] [--only NAME]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_compiler as bc  # noqa: E402

FORI_N = 10_000
RNN = dict(hidden=128, steps=100, batch=32)
TRIPS = (10, 10**4, 10**6)      # the trip counts of the compile-time table


def fori_fn(L, n, coef=0.99, fn="tanh"):
    lax, jnp = L.mod.lax, L.jnp
    f = getattr(jnp, fn)

    def body(i, c):
        return c * coef + f(c) * 0.01 + 0.001
    return L.mod.jit(lambda x: lax.fori_loop(0, n, body, x))


def b_fori(L, d, fn="tanh"):
    f = fori_fn(L, FORI_N, fn=fn)
    x = L.put(np.linspace(0, 1, 16, dtype=np.float32))
    return lambda: f(x).block_until_ready()


def b_fori_sin(L, d):
    return b_fori(L, d, fn="sin")


def b_sin_array(L, d):
    f = L.mod.jit(L.jnp.sin)
    x = L.put((np.random.default_rng(0).standard_normal(1 << 22) * 10).astype(np.float32))
    return lambda: f(x).block_until_ready()


def _two_arrays(pow_):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(1 << 22) * 10).astype(np.float32)
    b = (rng.standard_normal(1 << 22) * (3 if pow_ else 10)).astype(np.float32)
    return (np.abs(a), b) if pow_ else (a, b)


def b_pow_array(L, d):
    f = L.mod.jit(L.jnp.power)
    x, y = (L.put(a) for a in _two_arrays(True))
    return lambda: f(x, y).block_until_ready()


def b_atan2_array(L, d):
    f = L.mod.jit(L.jnp.arctan2)
    x, y = (L.put(a) for a in _two_arrays(False))
    return lambda: f(x, y).block_until_ready()


def rnn_inputs(d):
    h, s, b = RNN["hidden"], RNN["steps"], RNN["batch"]

    def make(r):
        return ((r.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32),
                (r.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32),
                r.standard_normal((s, b, h)).astype(np.float32))
    return d.get("rnn", make)


def b_rnn(L, d):
    lax, jnp = L.mod.lax, L.jnp

    def loss(wh, wx, xs):
        def step(h, x):
            h = jnp.tanh(h @ wh + x @ wx)
            return h, jnp.sum(h)
        h, ys = lax.scan(step, jnp.zeros((RNN["batch"], RNN["hidden"]), jnp.float32), xs)
        return jnp.sum(h * h) + jnp.sum(ys) * 1e-3
    f = L.mod.jit(L.mod.grad(loss, argnums=(0, 1)))
    wh, wx, xs = (L.put(a) for a in rnn_inputs(d))
    return lambda: L.block(f(wh, wx, xs))


def lenet_params(d):
    def make(r):
        def he(*shape):
            fan_in = int(np.prod(shape[:-1]))
            return (r.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        return [he(5, 5, 1, 32), np.zeros(32, np.float32), he(5, 5, 32, 64),
                np.zeros(64, np.float32), he(7 * 7 * 64, 10), np.zeros(10, np.float32)]
    return d.get("lenet", make)


def lenet_batch(d):
    def make(r):
        x = r.standard_normal((64, 28, 28, 1)).astype(np.float32)
        y = np.eye(10, dtype=np.float32)[r.integers(0, 10, 64)]
        return x, y
    return d.get("lenet_batch", make)


def lenet_loss_fn(L):
    lax, jnp, nn = L.mod.lax, L.jnp, L.nn
    dn = ("NHWC", "HWIO", "NHWC")

    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss(params, x, y):
        w1, b1, w2, b2, w3, b3 = params
        h = pool(nn.relu(lax.conv_general_dilated(x, w1, (1, 1), "SAME",
                                                  dimension_numbers=dn) + b1))
        h = pool(nn.relu(lax.conv_general_dilated(h, w2, (1, 1), "SAME",
                                                  dimension_numbers=dn) + b2))
        logits = h.reshape(h.shape[0], -1) @ w3 + b3
        return -jnp.mean(jnp.sum(nn.log_softmax(logits) * y, axis=-1))
    return loss


def b_lenet(L, d):
    f = L.mod.jit(L.mod.grad(lenet_loss_fn(L)))
    params = [L.put(a) for a in lenet_params(d)]
    x, y = (L.put(a) for a in lenet_batch(d))
    return lambda: L.block(f(params, x, y))


WORKLOADS = [
    bc.Workload("fori", f"fori_loop of {FORI_N:,} small steps, f32[16] carry "
                "(time per call; ÷ is per iteration too)", 1.0, b_fori),
    bc.Workload("fori_sin", f"fori_loop of {FORI_N:,} steps with sin, f32[16] carry",
                1.0, b_fori_sin),
    bc.Workload("sin_array", "jit(jnp.sin) of f32[2^22], normal(0, 10)", 1.0, b_sin_array),
    bc.Workload("pow_array", "jit(jnp.power) of f32[2^22], |normal(0, 10)| ** normal(0, 3)",
                1.0, b_pow_array),
    bc.Workload("atan2_array", "jit(jnp.arctan2) of two f32[2^22], normal(0, 10)", 1.0,
                b_atan2_array),
    bc.Workload("rnn", f"scan RNN jit(grad), hidden {RNN['hidden']}, {RNN['steps']} steps, "
                f"batch {RNN['batch']}", 1.0, b_rnn),
    bc.Workload("lenet", "LeNet-like jit(grad), batch 64 of 28x28x1", 1.0, b_lenet),
]


def b_trips(n):
    """The program whose compile time the trips table gives for ``n`` iterations."""
    def build(L, d):
        f = fori_fn(L, n, coef=0.98)     # not the program the fori workload built
        x = L.put(np.linspace(0, 1, 16, dtype=np.float32))
        return lambda: f(x).block_until_ready()
    return build


# Every kiln program this benchmark runs, for tests/benchmarks/test_workloads_build.py
# (see bench_compiler.BUILD_CHECKED): the workloads and the trips table's programs.
BUILD_CHECKED = WORKLOADS + [bc.Workload(f"trips{n}", f"fori_loop of {n:,} steps (trips)",
                                         None, b_trips(n)) for n in TRIPS]


def compile_times(libs, trips=TRIPS):
    """Seconds to compile the fori program per trip count: kiln's C build and its whole
    first call (sync mode), JAX's lower + compile."""
    out = {}
    x = np.linspace(0, 1, 16, dtype=np.float32)
    # A first program in the fresh cache directory pays for the compiler-flag probe and
    # the runtime extension; not part of any trip count's time.
    libs[0].mod.jit(lambda v: v * 2.0 + 1.0)(x).block_until_ready()
    for L in libs:
        for n in trips:
            f = fori_fn(L, n, coef=0.98)     # not the program the fori workload built
            if L.name == "kiln":
                from kiln.compiler.build import build
                before = build.stats()["seconds"]
                t0 = time.perf_counter()
                f(x).block_until_ready()
                total = time.perf_counter() - t0
                out[(L.name, n)] = (build.stats()["seconds"] - before, total)
            else:
                t0 = time.perf_counter()
                f.lower(x).compile()
                out[(L.name, n)] = (None, time.perf_counter() - t0)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", action="append", default=[], metavar="NAME")
    args = ap.parse_args(argv)
    args.budget = 0.4 if args.quick else 1.5
    args.rounds = 5 if args.quick else 9
    print(bc.machine_info())
    libs = [bc.load_kiln(), bc.load_jax()]
    data = bc.Data()
    rows = []
    for w in WORKLOADS:
        if bc.selected(w.name, args.only):
            rows.append(bc.run_workload(w, libs, data, args))
    bc.print_table(rows)
    for r in rows:
        if r.title.startswith("fori") and r.kiln and r.ref:
            print(f"\nper iteration ({r.title.split(' (')[0]}): kiln {r.kiln[0] / FORI_N * 1e6:.3f} µs, "
                  f"JAX {r.ref[0] / FORI_N * 1e6:.3f} µs")
    if bc.selected("trips", args.only):
        # Fresh cache directory so that kiln really builds.
        import tempfile

        import kiln
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["KILN_CACHE_DIR"] = tmp
            kiln.config.update("kiln_compile", "sync")
            times = compile_times(libs)
        print("\n| trip count | kiln C build | kiln first call (sync) | JAX lower+compile |")
        print("|---|---|---|---|")
        for n in TRIPS:
            kb, kt = times[("kiln", n)]
            _, jt = times[("jax", n)]
            print(f"| {n:,} | {kb * 1e3:.0f} ms | {kt * 1e3:.0f} ms | {jt * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
