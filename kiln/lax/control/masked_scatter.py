"""A batched ``while`` whose body updates a carried array with a scatter
(``xs.at[step].set(v)`` under ``vmap``) masks the scatter instead of selecting the whole
carry: a lane whose predicate is false gets out-of-bounds indices, so its update is
dropped (``FILL_OR_DROP``) and its row keeps its value, as the select would keep it. The
loop then touches only the updated elements per iteration (and the compiled loop
updates the carry in place), where a select reads and writes the whole array.

What it must not hold: the ``while`` batching rule itself (``loops.py``).
"""
from __future__ import annotations

from kiln.core.jaxpr import Literal


def _scatter_prims() -> tuple:
    from kiln.lax import gather_scatter as gs
    return (gs.scatter_p, gs.scatter_add_p, gs.scatter_sub_p, gs.scatter_mul_p,
            gs.scatter_min_p, gs.scatter_max_p)


def maskable_outputs(jaxpr, n_consts: int) -> dict:
    """``{equation index: carry index}``: top-level scatters of a batched body (carries
    batched at axis 0) whose operand is carry ``j``, whose result is only the body's
    output ``j``, and whose operand and indices are batched along their axis 0."""
    prims = _scatter_prims()
    invars = jaxpr.invars[n_consts:]
    uses: dict = {}
    for eqn in jaxpr.eqns:
        for a in eqn.invars:
            if not isinstance(a, Literal):
                uses[a] = uses.get(a, 0) + 1
    for a in jaxpr.outvars:
        if not isinstance(a, Literal):
            uses[a] = uses.get(a, 0) + 1
    out = {}
    for n, eqn in enumerate(jaxpr.eqns):
        if eqn.primitive not in prims:
            continue
        dn = eqn.params["dimension_numbers"]
        if (tuple(dn.operand_batching_dims) != (0,)
                or tuple(dn.scatter_indices_batching_dims) != (0,)):
            continue
        res = eqn.outvars[0]
        if uses.get(res, 0) != 1:
            continue
        j = next((k for k, o in enumerate(jaxpr.outvars) if o is res), None)
        if j is None or j >= len(invars) or eqn.invars[0] is not invars[j]:
            continue
        out[n] = j
    return out


def _masked_indices(operand, indices, updates, params, pred):
    """``indices`` with every lane whose ``pred`` is false moved out of bounds (after
    the clamping ``CLIP`` mode would apply)."""
    from kiln import lax
    from kiln.core.trace import get_aval
    from kiln.lax.gather_scatter import GatherScatterMode
    dn = params["dimension_numbers"]
    o_shape = get_aval(operand).shape
    u_shape = get_aval(updates).shape
    i_aval = get_aval(indices)
    dt = i_aval.dtype
    window = []
    it = iter(dn.update_window_dims)
    for d in range(len(o_shape)):
        if d in dn.operand_batching_dims or d in dn.inserted_window_dims:
            window.append(1)
        else:
            window.append(u_shape[next(it)])
    sd = tuple(dn.scatter_dims_to_operand_dims)
    vec_shape = (1,) * (i_aval.ndim - 1) + (len(sd),)
    import numpy as np
    if GatherScatterMode.from_any(params["mode"]) == GatherScatterMode.CLIP:
        hi = np.array([o_shape[d] - window[d] for d in sd], dt).reshape(vec_shape)
        indices = lax.clamp(np.array(0, dt), indices, lax.broadcast_in_dim(
            hi, i_aval.shape, tuple(range(i_aval.ndim))))
    oob = lax.broadcast_in_dim(np.array([o_shape[d] for d in sd], dt).reshape(vec_shape),
                               i_aval.shape, tuple(range(i_aval.ndim)))
    which = lax.broadcast_in_dim(pred, i_aval.shape, (0,))
    return lax.select(which, indices, oob)


def eval_masked(closed, args, targets: dict, pred) -> list:
    """Evaluate ``closed`` on ``args`` with the scatters ``targets`` masked by ``pred``."""
    from kiln.lax.gather_scatter import GatherScatterMode
    jaxpr = closed.jaxpr
    env = {}

    def read(a):
        return a.val if type(a) is Literal else env[a]
    for v, x in zip(jaxpr.constvars, closed.consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for n, eqn in enumerate(jaxpr.eqns):
        ins = [read(a) for a in eqn.invars]
        params = eqn.params
        if n in targets:
            ins[1] = _masked_indices(ins[0], ins[1], ins[2], params, pred)
            params = dict(params, mode=GatherScatterMode.FILL_OR_DROP)
        outs = eqn.primitive.bind(*ins, **params)
        if eqn.primitive.multiple_results:
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
        else:
            env[eqn.outvars[0]] = outs
    return [read(a) for a in jaxpr.outvars]
