"""Helpers for checking integer arithmetic on kiln's three paths against JAX.

A *program* is a function ``f(np_mod, lax_mod, *args) -> tuple`` written once against
a ``numpy`` and a ``lax`` module, so the same text runs on JAX (the oracle) and on kiln.
``run_kiln_paths`` runs it eagerly (each primitive's NumPy ``impl`` through
``EvalTrace``), on the reference backend (``run_jaxpr``: what ``KILN_BACKEND=reference``,
``jax_debug_nans`` and the no-compiler fallback run) and compiled (the C backend).
"""
from __future__ import annotations

import numpy as np

import kiln
import kiln.numpy as kjnp
from kiln import lax as klax
from kiln.backends import cpu, reference
from kiln.config import config_context


def edge_values(dtype, n_random: int = 48, seed: int = 0) -> np.ndarray:
    """Sorted distinct values of an integer ``dtype``: every value for 8-bit types, else
    the extremes and their neighbours, small values of both signs, the bit width and its
    neighbours (shift amounts), halves of the range, and ``n_random`` random values."""
    dt = np.dtype(dtype)
    info = np.iinfo(dt)
    if dt.itemsize == 1:
        return np.arange(info.min, info.max + 1).astype(dt)
    bits = dt.itemsize * 8
    edge = [info.min, info.min + 1, info.min + 2, info.min // 2, info.min // 2 - 1,
            -bits - 1, -bits, -100, -7, -3, -2, -1, 0, 1, 2, 3, 7, 100,
            bits - 1, bits, bits + 1, 2 * bits, info.max // 2, info.max // 2 + 1,
            info.max - 1, info.max]
    edge = [e for e in edge if info.min <= e <= info.max]
    rnd = np.random.default_rng(seed).integers(info.min, info.max, n_random, dtype=dt,
                                               endpoint=True)
    return np.unique(np.concatenate([np.array(edge, dt), rnd]))


def all_pairs(values):
    """Every ordered pair of ``values`` as two flat arrays."""
    a, b = np.meshgrid(values, values, indexing="ij")
    return a.ravel(), b.ravel()


def jax_values(jax, program, args, x64: bool):
    """The program's outputs under ``jax.jit``, as NumPy arrays."""
    import jax.numpy as jjnp
    from jax import lax as jlax
    with jax.enable_x64(x64):
        out = jax.jit(lambda *a: program(jjnp, jlax, *a))(*args)
        return [np.asarray(o) for o in out]


def run_kiln_paths(program, args, x64: bool, native: bool = True) -> dict:
    """``{"eager": outs, "reference": outs, "compiled": outs}`` for ``program``.

    ``native=False`` for programs the compiler leaves to the reference backend (float16
    and bfloat16 have no C type): then there is no "compiled" entry."""
    with config_context(jax_enable_x64=x64):
        eager = program(kjnp, klax, *[kjnp.asarray(a) for a in args])
        closed = kiln.make_jaxpr(lambda *a: program(kjnp, klax, *a))(*args)
        flat = [np.asarray(a) for a in args]
        ref = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
        exe = cpu.executable_for(closed)
        assert (exe is not None) == native, "compiled or not, unexpectedly"
        compiled = exe(flat) if native else None
    out = {"eager": [np.asarray(o) for o in eager], "reference": [np.asarray(o) for o in ref]}
    if native:
        out["compiled"] = [np.asarray(o) for o in compiled]
    return out


def mismatches(names, args, want, paths) -> list[str]:
    """One line per (path, output) that differs from JAX's in dtype or any value."""
    bad = []
    for path, got in paths.items():
        for name, g, w in zip(names, got, want):
            if g.dtype != w.dtype or g.shape != w.shape:
                bad.append(f"{path} {name}: {g.dtype}{g.shape} != JAX's {w.dtype}{w.shape}")
                continue
            same = (g == w) | ((g != g) & (w != w))
            if not same.all():
                i = np.flatnonzero(~same.ravel())[:5]
                ins = ", ".join(f"{np.broadcast_to(a, g.shape).ravel()[i].tolist()}"
                                for a in args)
                bad.append(f"{path} {name}: {(~same).sum()} values differ; inputs {ins}: "
                           f"got {g.ravel()[i].tolist()}, JAX {w.ravel()[i].tolist()}")
    return bad
