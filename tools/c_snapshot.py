"""Byte-identity harness for the C renderer: render a fixed corpus of programs to C.

Each program of :data:`CORPUS` is traced, optimised, lowered, buffer-planned and rendered
exactly as ``kiln.compiler.pipeline.compile_program`` does, without building; its C text
is written to ``<dir>/<name>.c``. With ``--compare REF`` each text is compared with
``REF/<name>.c`` and the names that differ are listed (exit status 1). Refactors of
``kiln/compiler/render/`` keep every file byte for byte (the C text is the build cache's
key and the bits the tests check)::

    python tools/c_snapshot.py --write /work/scratch/c_snap_main        # before a change
    python tools/c_snapshot.py --compare /work/scratch/c_snap_main      # after it

The renderer's machine-dependent attributes (translation units, cores for convolution
tiles) are pinned so that the text depends only on the program and the BLAS/libm
available.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
from collections.abc import Callable

import numpy as np

import kiln
import kiln.lax as lax
import kiln.numpy as jnp
from kiln import random


def _f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- the corpus --------------------------------------------------------------------------
def _mlp_train_step():
    def loss(params, x, y):
        (w1, b1), (w2, b2) = params
        h = jnp.maximum(x @ w1 + b1, 0.0)
        logits = h @ w2 + b2
        logp = logits - kiln.nn.logsumexp(logits, axis=1, keepdims=True)
        return -jnp.mean(jnp.sum(logp * y, axis=1))

    def step(params, x, y):
        g = kiln.grad(loss)(params, x, y)
        return kiln.tree_util.tree_map(lambda p, d: p - 0.01 * d, params, g)

    params = ((_f32(784, 256), _f32(256)), (_f32(256, 10), _f32(10)))
    y = np.eye(10, dtype=np.float32)[np.arange(128) % 10]
    return step, (params, _f32(128, 784), y)


def _conv():
    def f(x, w, b):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(jnp.maximum(y + b, 0.0) ** 2)
    return kiln.grad(f, argnums=(0, 1)), (_f32(8, 16, 16, 4), _f32(3, 3, 4, 8), _f32(8))


def _scan_rnn_grad():
    def loss(w, xs):
        def cell(h, x):
            h = jnp.tanh(h @ w + x)
            return h, jnp.sum(h)
        _, ys = lax.scan(cell, jnp.zeros(32, jnp.float32), xs)
        return jnp.sum(ys)
    return kiln.grad(loss), (_f32(32, 32), _f32(20, 32))


def _logsumexp():
    def f(x, y, z):
        return (kiln.nn.logsumexp(x, axis=1), kiln.nn.logsumexp(y, axis=-1),
                kiln.vmap(lambda r: kiln.nn.logsumexp(r, axis=-1))(z))
    return f, (_f32(512, 1024), _f32(64, 4096), _f32(3, 40, 512))


def _reductions():
    def f(x, i, b):
        return (jnp.sum(x, axis=0), jnp.sum(x, axis=1), jnp.sum(x, axis=2),
                jnp.max(x, axis=(0, 2)), jnp.min(x, axis=2), jnp.prod(x, axis=1),
                jnp.argmax(x, axis=1), jnp.argmin(x, axis=2), jnp.sum(i, axis=0),
                jnp.max(i, axis=1), jnp.any(b, axis=1), jnp.all(b, axis=0),
                jnp.sum(jnp.exp(x)), jnp.sum(x[0], axis=0))
    i = np.arange(96 * 300, dtype=np.int32).reshape(96, 300)
    return f, (_f32(64, 300, 70), i, i % 3 == 0)


def _scatter_gather():
    def f(x, idx, v):
        y = x.at[idx].add(v)
        z = x.at[idx[:4]].set(v[:4] * 2.0, mode="drop")
        return y, z, jnp.take(x, idx, axis=0) * 3.0, jnp.take_along_axis(
            x, jnp.argsort(x, axis=1)[:, :2], axis=1)
    return f, (_f32(50, 8), np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int32), _f32(8, 8))


def _loops():
    def f(x, n):
        y = lax.fori_loop(0, 10, lambda i, c: c * 0.9 + x * i, x)
        z = lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5 + 1.0),
                           (0, x))[1]
        w = lax.cond(n > 3, lambda a: a + 1.0, lambda a: a * 2.0, y)
        s = lax.switch(n, [jnp.sin, jnp.cos, jnp.tanh], z)
        d = lax.dynamic_slice(x, (n,), (4,))
        return y, z, w, s, lax.dynamic_update_slice(x, d * 2.0, (n + 1,))
    return f, (_f32(16), np.int32(5))


def _sort():
    def f(x):
        return jnp.sort(x, axis=1) + 1.0, jnp.argsort(x[0])
    return f, (_f32(10, 20),)


def _random_bits():
    def f(key):
        k1, k2 = random.split(key)
        return (random.normal(k1, (1000,)), random.uniform(k2, (8, 100)),
                random.bits(k1, (64,)), random.randint(k2, (32,), 0, 10))
    return f, (random.PRNGKey(0),)


def _int_ops():
    def f(a, b, u):
        return (a // b, a % b, a << 3, a >> 2, lax.shift_right_logical(u, np.uint32(3)),
                lax.population_count(a), lax.clz(u), jnp.abs(a), jnp.sign(a),
                (a & b) | (a ^ 7), a.astype(jnp.float32) / 3.0, jnp.maximum(a, b),
                jnp.clip(a, -5, 5), (_f32(256) * 1000).astype(jnp.int32) + a)
    a = np.arange(-128, 128, dtype=np.int32)
    return f, (a, (a % 7) - 3, a.astype(np.uint32) * np.uint32(2654435761))


def _dot_epilogue():
    def f(x, w, b):
        return jnp.tanh(x @ w + b), jnp.einsum("bij,bjk->bik", x.reshape(16, 32, 64),
                                               w.reshape(16, 64, 32))
    return f, (_f32(128, 256), _f32(256, 128), _f32(128))


def _row_softmax():
    def f(x, y):
        return kiln.nn.softmax(x, axis=-1), kiln.nn.softmax(y, axis=-1)
    return f, (_f32(256, 2048), _f32(8, 100))


def _cumsum():
    def f(x):
        return (jnp.cumsum(x, axis=0), jnp.cumsum(x, axis=1), jnp.cumprod(x, axis=1),
                lax.cummax(x, axis=0, reverse=True), lax.cumsum(x, axis=1, reverse=True))
    return f, (_f32(64, 300),)


def _multi_output():
    def adam(p, m, v, g):
        m2 = 0.9 * m + 0.1 * g
        v2 = 0.999 * v + 0.001 * g * g
        return p - 1e-3 * m2 / (jnp.sqrt(v2) + 1e-8), m2, v2
    s = (512, 512)
    return adam, (_f32(*s), _f32(*s, seed=1), np.abs(_f32(*s, seed=2)), _f32(*s, seed=3))


def _layer_norm():
    def norm(x, g, b):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * g + b

    def f(x, g, b, y):
        return norm(x, g, b), norm(y, 1.0, 0.0)
    return f, (_f32(128, 768), _f32(768), _f32(768), _f32(16, 4096))


def _large_streams():
    def f(x, y):
        return jnp.exp(x) * 2.0, jnp.sum(jnp.exp(y)), jnp.sum(y.reshape(1024, 1024), axis=0)
    return f, (_f32(4096, 1024), _f32(1 << 20))


def _row_groups_misc():
    def f(x, y, i, v):
        p = jnp.prod(x, axis=1, keepdims=True)
        e = jnp.sum(jnp.exp(x * p), axis=1)
        mu = jnp.mean(y, axis=-1, keepdims=True)
        var = jnp.mean((y - mu) ** 2, axis=-1)
        return e, var, y.at[i].set(v)
    return f, (_f32(16, 4096), _f32(16, 4096), np.int32(3), _f32(4096))


#: name -> (function, example arguments) builder.
CORPUS: dict[str, Callable] = {
    "mlp_train_step": _mlp_train_step, "conv": _conv, "scan_rnn_grad": _scan_rnn_grad,
    "logsumexp": _logsumexp, "reductions": _reductions, "scatter_gather": _scatter_gather,
    "loops": _loops, "sort": _sort, "random_bits": _random_bits, "int_ops": _int_ops,
    "dot_epilogue": _dot_epilogue, "row_softmax": _row_softmax, "cumsum": _cumsum,
    "multi_output": _multi_output, "layer_norm": _layer_norm, "large_streams": _large_streams,
    "row_groups_misc": _row_groups_misc,
}


# ---- rendering -------------------------------------------------------------------------
def render_source(fn: Callable, args: tuple) -> str:
    """The C text ``compile_program`` would build for ``jit(fn)(*args)`` ("" when
    nothing runs natively)."""
    from kiln.compiler.lower import blas_support
    from kiln.compiler.lower.lower import lower
    from kiln.compiler.lower.plan_buffers import plan
    from kiln.compiler.passes.passes import optimize
    from kiln.compiler.render import cmath_support
    from kiln.compiler.render.render_c import CRenderer
    from kiln.core.physical import physical_closed

    closed = physical_closed(kiln.make_jaxpr(fn)(*args))
    prog = lower(optimize(closed))
    if prog.native_steps == 0:
        return ""
    plan(prog)
    src_math, fns = cmath_support.math()
    renderer = CRenderer(src_math, fns, blas_support.declarations())
    renderer.build_units = 2
    renderer.conv_cores = 2
    source, _ = renderer.render(prog)
    return source


def render_corpus(names=None) -> dict[str, str]:
    """``{name: C text}`` for the corpus (or the given names of it)."""
    out = {}
    for name in names or CORPUS:
        fn, args = CORPUS[name]()
        out[name] = render_source(fn, args)
    return out


def write(texts: dict[str, str], directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for name, text in texts.items():
        with open(os.path.join(directory, f"{name}.c"), "w") as f:
            f.write(text)


def compare(texts: dict[str, str], directory: str, show: int = 0) -> list[str]:
    """Names whose text differs from ``directory``'s (a missing file differs); with
    ``show``, print up to that many lines of each unified diff."""
    bad = []
    for name, text in texts.items():
        path = os.path.join(directory, f"{name}.c")
        ref = open(path).read() if os.path.exists(path) else None
        if ref != text:
            bad.append(name)
            if show and ref is not None:
                diff = difflib.unified_diff(ref.splitlines(), text.splitlines(),
                                            f"{path}", f"{name}.c (now)", lineterm="")
                print("\n".join(list(diff)[:show]))
    return bad


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", metavar="DIR", help="write each program's C to DIR/<name>.c")
    p.add_argument("--compare", metavar="DIR", help="compare with DIR/<name>.c")
    p.add_argument("--diff", type=int, default=40, help="diff lines shown per program")
    p.add_argument("names", nargs="*", help="programs of the corpus (default: all)")
    a = p.parse_args(argv)
    texts = render_corpus(a.names or None)
    if a.write:
        write(texts, a.write)
    if a.compare:
        bad = compare(texts, a.compare, a.diff)
        print(f"{len(texts) - len(bad)}/{len(texts)} identical" +
              (f"; differ: {', '.join(bad)}" if bad else ""))
        return 1 if bad else 0
    if not a.write:
        write(texts, tempfile.mkdtemp(prefix="c_snapshot_"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
