"""The hash primitives of JAX's other counter-based PRNGs: ``philox2x32_p``
(``k0, x0, x1 -> (y0, y1)``), ``philox4x32_p`` (``k0, k1, x0..x3 -> y0..y3``) and
``threefry4x32_p`` (``k0..k3, x0..x3 -> y0..y3``), Random123's Philox-2x32-10,
Philox-4x32-10 and Threefry-4x32-20 on uint32 lanes.

Operands broadcast as JAX's ``lax.broadcasting_shape_rule`` says: rank-0 operands go
anywhere; the others share one rank and their size-1 axes stretch. Each primitive has
abstract evaluation (JAX's TypeErrors), a NumPy impl (``_counter_prngs``' hashes, run
eagerly), a broadcasting batching rule, a zero JVP and an ``expand`` into ``lax``
operations (``mul``/``mulhi``, shifts, xors), which ``jit`` inlines so the hash compiles
natively and the reference backend runs the same arithmetic: eager, ``jit`` and
``vmap`` give the same bits.

What it must not hold: key types or the PRNG implementations (``_keys``,
``_counter_prngs``).
"""
from __future__ import annotations

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching, staging
from kiln.lax._factory import standard_primitive
from kiln.random import _counter_prngs as _np_hashes

_U32 = np.dtype(np.uint32)

# Random123's constants.
_PHILOX2_M = 0xD256D193
_PHILOX4_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def _broadcast_shape(name: str, shapes) -> tuple:
    """The common shape of operand shapes under JAX's broadcasting rule for these
    primitives (scalars broadcast; the rest need one rank; size-1 axes stretch)."""
    shapes = [tuple(s) for s in shapes if len(s)]
    if not shapes:
        return ()
    ranks = {len(s) for s in shapes}
    if len(ranks) != 1:
        raise TypeError(f"{name}: arrays must have the same number of dimensions, got {ranks}")
    out = []
    for ds in zip(*shapes):
        big = {d for d in ds if d != 1}
        if len(big) > 1:
            raise TypeError(f"{name} got incompatible shapes for broadcasting: "
                            f"{', '.join(map(str, shapes))}.")
        out.append(big.pop() if big else 1)
    return tuple(out)


def _abstract_eval_for(name: str, nargs: int, nouts: int):
    def abstract_eval(*avals):
        if len(avals) != nargs:
            raise TypeError(f"{name}_p expects {nargs} arguments, got {len(avals)}.")
        shape = _broadcast_shape(name, [a.shape for a in avals])
        if any(a.dtype != _U32 for a in avals):
            raise TypeError(f"Arguments to {name} must have uint32 type, got "
                            f"({', '.join(a.str_short() for a in avals)})")
        return [ShapedArray(shape, _U32)] * nouts
    return abstract_eval


def _full(x, shape):
    """``x`` (a NumPy result of broadcasting) as a fresh contiguous array of ``shape``."""
    return np.array(np.broadcast_to(x, shape), _U32, order="C")


def _impl_for(hash_np):
    def impl(*args):
        args = [np.asarray(a, _U32) for a in args]
        shape = np.broadcast_shapes(*(a.shape for a in args))
        return [_full(y, shape) for y in hash_np(*args)]
    return impl


def _np_philox2x32(k0, x0, x1):
    return _np_hashes.philox2x32(k0, x0, x1)


def _np_philox4x32(k0, k1, x0, x1, x2, x3):
    return _np_hashes.philox4x32_hash(k0, k1, x0, x1, x2, x3)


def _np_threefry4x32(k0, k1, k2, k3, x0, x1, x2, x3):
    return _np_hashes.threefry4x32([k0, k1, k2, k3], [x0, x1, x2, x3])


# -- the hashes in lax operations (the expansion) ----------------------------------------------

def _lax_philox2x32(k0, x0, x1):
    from kiln import lax
    m = np.uint32(_PHILOX2_M)
    for rnd in range(10):
        if rnd:
            k0 = lax.add(k0, np.uint32(_PHILOX_W[0]))
        lo, hi = lax.mul(x0, m), lax.mulhi(x0, m)
        x0, x1 = lax.bitwise_xor(lax.bitwise_xor(hi, x1), k0), lo
    return [x0, x1]


def _lax_philox4x32(k0, k1, x0, x1, x2, x3):
    from kiln import lax
    m0, m1 = np.uint32(_PHILOX4_M[0]), np.uint32(_PHILOX4_M[1])
    xor = lax.bitwise_xor
    for rnd in range(10):
        if rnd:
            k0 = lax.add(k0, np.uint32(_PHILOX_W[0]))
            k1 = lax.add(k1, np.uint32(_PHILOX_W[1]))
        lo0, hi0 = lax.mul(x0, m0), lax.mulhi(x0, m0)
        lo1, hi1 = lax.mul(x2, m1), lax.mulhi(x2, m1)
        x0, x1, x2, x3 = xor(xor(hi1, x1), k0), lo1, xor(xor(hi0, x3), k1), lo0
    return [x0, x1, x2, x3]


def _lax_threefry4x32(k0, k1, k2, k3, x0, x1, x2, x3):
    from kiln import lax

    def rotl(v, d):
        return lax.bitwise_or(lax.shift_left(v, np.uint32(d)),
                              lax.shift_right_logical(v, np.uint32(32 - d)))
    add, xor = lax.add, lax.bitwise_xor
    parity = np.uint32(_np_hashes.T4_PARITY)
    ks = [k0, k1, k2, k3, xor(xor(xor(xor(k0, k1), k2), k3), parity)]
    x = [add(x0, k0), add(x1, k1), add(x2, k2), add(x3, k3)]
    for rnd in range(20):
        r0, r1 = _np_hashes.T4_ROT[rnd % 8]
        # even rounds mix lanes (0, 1) and (2, 3); odd rounds (0, 3) and (2, 1)
        a, b, c, d = (0, 1, 2, 3) if rnd % 2 == 0 else (0, 3, 2, 1)
        x[a] = add(x[a], x[b])
        x[b] = xor(rotl(x[b], r0), x[a])
        x[c] = add(x[c], x[d])
        x[d] = xor(rotl(x[d], r1), x[c])
        if rnd % 4 == 3:
            j = rnd // 4
            x = [add(x[i], ks[(i + 1 + j) % 5]) for i in range(4)]
            x[3] = add(x[3], np.uint32(j + 1))
    return x


def _lax_operands(args, shape):
    """The operands broadcast to ``shape`` (scalars stay scalars: lax takes them)."""
    from kiln import lax
    out = []
    for a in args:
        s = get_aval(a).shape
        if s == () or tuple(s) == tuple(shape):
            out.append(a)
            continue
        keep = tuple(i for i, d in enumerate(s) if d == shape[i])
        a = lax.reshape(a, tuple(s[i] for i in keep))
        out.append(lax.broadcast_in_dim(a, tuple(shape), keep))
    return out


def _expand_for(hash_lax):
    cache: dict = {}

    def expand(eqn) -> ClosedJaxpr:
        in_avals = tuple(v.aval for v in eqn.invars)
        key = tuple((a.shape, a.dtype, a.weak_type) for a in in_avals)
        if key not in cache:
            shape = eqn.outvars[0].aval.shape

            def fun(*args):
                outs = hash_lax(*_lax_operands(args, shape))
                return [_to_shape(o, shape) for o in outs]
            jaxpr, consts = staging.trace_to_jaxpr(fun, list(in_avals))
            cache[key] = ClosedJaxpr(jaxpr, consts)
        return cache[key]
    return expand


def _to_shape(x, shape):
    from kiln import lax
    if get_aval(x).shape != tuple(shape):
        x = lax.broadcast_in_dim(x, tuple(shape), ())
    return x


# -- batching ------------------------------------------------------------------------------------

def _batch_rule_for(prim, nouts: int):
    def rule(axis_data, vals, dims):
        from kiln import lax
        unbatched = []
        for v, d in zip(vals, dims):
            s = get_aval(v).shape
            unbatched.append(s if d is None else s[:d] + s[d + 1:])
        rank = max(len(s) for s in unbatched)
        args = []
        for v, d, s in zip(vals, dims, unbatched):
            if d is None:
                # a scalar broadcasts anywhere; an array gets a unit batch axis
                args.append(v if s == () else lax.reshape(v, (1,) + tuple(s)))
                continue
            v = batching.moveaxis(v, d, 0)
            if s == () and rank:
                v = lax.reshape(v, (get_aval(v).shape[0],) + (1,) * rank)
            args.append(v)
        return prim.bind(*args), [0] * nouts
    return rule


def _define(name: str, nargs: int, nouts: int, hash_np, hash_lax):
    prim = standard_primitive(name, _abstract_eval_for(name, nargs, nouts),
                              _impl_for(hash_np),
                              weak_type_rule=lambda *a, **k: [False] * nouts,
                              multiple_results=True)
    prim.expand = _expand_for(hash_lax)
    batching.batch_rules[prim] = _batch_rule_for(prim, nouts)
    ad.defjvp_zero(prim)
    return prim


philox2x32_p = _define("philox2x32", 3, 2, _np_philox2x32, _lax_philox2x32)
philox4x32_p = _define("philox4x32", 6, 4, _np_philox4x32, _lax_philox4x32)
threefry4x32_p = _define("threefry4x32", 8, 4, _np_threefry4x32, _lax_threefry4x32)
