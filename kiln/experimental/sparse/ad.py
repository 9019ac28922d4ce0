"""Sparse-aware differentiation: ``sparse.grad``, ``value_and_grad``, ``jacfwd``,
``jacrev``/``jacobian``.

Each differentiates with respect to the *stored values* of sparse arguments (their
indices are held fixed), and returns those derivatives as sparse arrays with the
argument's sparsity pattern (a Jacobian's extra leading dimensions become batch
dimensions). Dense arguments are differentiated as by the plain transformations.
"""
from __future__ import annotations

import functools
import operator

from kiln.experimental.sparse._base import JAXSparse
from kiln.tree_util import tree_flatten, tree_unflatten

__all__ = ["grad", "jacfwd", "jacobian", "jacrev", "value_and_grad"]


def _is_sparse(x) -> bool:
    return isinstance(x, JAXSparse)


def _argnums_tuple(argnums):
    if isinstance(argnums, (tuple, list)):
        return tuple(operator.index(a) for a in argnums), True
    return (operator.index(argnums),), False


def _prepare(fun, argnums, args):
    """Flatten the selected arguments so that each sparse one contributes only its
    values; returns the flat function, its argnums, its arguments and a function that
    rebuilds derivatives in the shape of the selected arguments."""
    nums, multiple = _argnums_tuple(argnums)
    for a in nums:
        if not -len(args) <= a < len(args):
            raise ValueError(f"argnums {argnums} out of range for {len(args)} arguments")
    nums = tuple(a % len(args) for a in nums)
    # Level 1: each argument's leaves, stopping at sparse arrays.
    per_arg = [tree_flatten(a, is_leaf=_is_sparse) for a in args]
    flat_args, slots = [], []
    for leaves, _ in per_arg:
        arg_slots = []
        for leaf in leaves:
            if _is_sparse(leaf):
                bufs, tree = tree_flatten(leaf)
                arg_slots.append(("sparse", len(flat_args), len(bufs), tree, bufs))
                flat_args.extend(bufs)
            else:
                arg_slots.append(("dense", len(flat_args)))
                flat_args.append(leaf)
        slots.append(arg_slots)

    def flat_fun(*flat, **kwargs):
        rebuilt = []
        for (_, tree), arg_slots in zip(per_arg, slots):
            vals = []
            for s in arg_slots:
                if s[0] == "sparse":
                    _, start, n, stree, _ = s
                    vals.append(tree_unflatten(stree, list(flat[start:start + n])))
                else:
                    vals.append(flat[s[1]])
            rebuilt.append(tree_unflatten(tree, vals))
        return fun(*rebuilt, **kwargs)

    diff = [s[1] for a in nums for s in slots[a]]        # the values buffer of sparse leaves

    def rebuild(flat_grads):
        from kiln.transformations import vmap
        grads = iter(flat_grads)
        out = []
        for a in nums:
            vals = []
            for s in slots[a]:
                g = next(grads)
                if s[0] == "sparse":
                    _, _, _, stree, bufs = s

                    def wrap(v, stree=stree, bufs=bufs):
                        return tree_unflatten(stree, [v, *bufs[1:]])
                    f = wrap
                    for _ in range(g.ndim - bufs[0].ndim):
                        f = vmap(f)
                    vals.append(f(g))
                else:
                    vals.append(g)
            out.append(tree_unflatten(per_arg[a][1], vals))
        return tuple(out) if multiple else out[0]
    return flat_fun, tuple(diff), flat_args, rebuild


def _wrap(transform, name):
    def make(fun, argnums=0, has_aux: bool = False, **kwargs):
        @functools.wraps(fun)
        def wrapped(*args, **kw):
            flat_fun, diff, flat_args, rebuild = _prepare(fun, argnums, args)
            out = transform(functools.partial(flat_fun, **kw), argnums=diff, has_aux=has_aux,
                            **kwargs)(*flat_args)
            if name == "value_and_grad":
                value, grads = out
                return value, rebuild(grads)
            if has_aux:
                return rebuild(out[0]), out[1]
            return rebuild(out)
        return wrapped
    make.__name__ = name
    make.__doc__ = (f"Sparse-aware ``{name}``: as ``kiln.{name}``, differentiating sparse "
                    "arguments with respect to their stored values only (the result is "
                    "sparse with the argument's pattern).")
    return make


def _kiln(name):
    import kiln
    return getattr(kiln, name)


grad = _wrap(lambda *a, **k: _kiln("grad")(*a, **k), "grad")
value_and_grad = _wrap(lambda *a, **k: _kiln("value_and_grad")(*a, **k), "value_and_grad")
jacfwd = _wrap(lambda *a, **k: _kiln("jacfwd")(*a, **k), "jacfwd")
jacrev = _wrap(lambda *a, **k: _kiln("jacrev")(*a, **k), "jacrev")
jacobian = jacrev
