"""Primitives of ``jax.experimental.sparse`` defined by a ``kiln.numpy`` composition.

JAX defines each sparse operation as a primitive with hand-written rules. kiln computes
them by composing ``kiln.numpy`` ops, and :func:`composite_primitive` turns such a
function into a primitive for code that binds one (``sparse.todense_p.bind(*bufs,
tree=tree)``, ``bcoo_todense_p.bind(data, indices, spinfo=...)``): its impl, shape rule,
JVP, batching rule and ``jit`` lowering are all the function's own (run, ``eval_shape``,
``jvp``, ``vmap``, ``mlir.lower_fun``), so the primitive behaves exactly as the function.
Its JVP is expressed in the composed ops, whose transposes give reverse mode.
"""
from __future__ import annotations

import functools

__all__ = ["composite_primitive"]


def _abstract(fn, multiple_results, avals, params):
    from kiln.core.avals import ShapedArray
    from kiln.shape_eval import ShapeDtypeStruct, eval_shape
    structs = [ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    out = eval_shape(functools.partial(fn, **params), *structs)
    if multiple_results:
        return [ShapedArray(tuple(o.shape), o.dtype) for o in out]
    return ShapedArray(tuple(out.shape), out.dtype)


def composite_primitive(name: str, fn, *, multiple_results: bool = False):
    """A primitive named ``name`` computing ``fn(*operands, **params)``.

    ``fn`` must be built from kiln operations and return one array (a list or tuple of
    arrays with ``multiple_results``).
    """
    from kiln.extend.core import Primitive
    from kiln.interpreters import ad, batching, mlir

    prim = Primitive(name)
    prim.multiple_results = multiple_results

    def impl(*args, **params):
        out = fn(*args, **params)
        return list(out) if multiple_results else out
    prim.def_impl(impl)
    prim.def_abstract_eval(
        lambda *avals, **params: _abstract(fn, multiple_results, avals, params))

    def jvp(primals, tangents, **params):
        from kiln.transformations import jvp as kiln_jvp
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        out, t_out = kiln_jvp(functools.partial(fn, **params), tuple(primals),
                              tuple(tangents))
        if multiple_results:
            return list(out), list(t_out)
        return out, t_out
    ad.primitive_jvps[prim] = jvp

    def batch(vals, dims, **params):
        from kiln.transformations import vmap
        out = vmap(functools.partial(fn, **params), in_axes=tuple(dims))(*vals)
        if multiple_results:
            return list(out), [0] * len(out)
        return out, 0
    batching.primitive_batchers[prim] = batch
    mlir.register_lowering(prim, mlir.lower_fun(fn, multiple_results=multiple_results))
    return prim
