"""Collectives over named axes (kiln.lax.parallel) inside ``vmap(axis_name=...)``.

Every collective is checked against a NumPy reference computed from the stacked input
(table-driven over shapes, axes, ``tiled`` and ``axis_index_groups``), in nested vmaps with
two names (both orders, each name alone), with unbatched and non-leading mapped operands,
under ``jit``; derivatives against exact Jacobians of the (linear) references and finite
differences; transposes with ``linear_transpose``; and against ``jax.vmap`` wherever JAX
supports the case. The NumPy references follow JAX's pmap/shard_map semantics (position
``k`` of a multi-name axis is the row-major flattened index; a group member's rank is its
place in the group's list), which ``test_references_match_jax_pmap`` checks in a JAX
subprocess with 8 CPU devices.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
from kiln import lax

# ================================================================================================
# NumPy references: ``X`` is the stack ``[T, ...]`` of the operands of the T (flattened)
# positions; each returns the stack of the results.
# ================================================================================================


def _tables(groups, total):
    gs = groups if groups is not None else (tuple(range(total)),)
    members, rank = {}, {}
    for g in gs:
        for r, k in enumerate(g):
            members[k] = list(g)
            rank[k] = r
    return members, rank


def ref_reduce(fn):
    def op(X, groups):
        members, _ = _tables(groups, len(X))
        return np.stack([fn(X[members[k]], axis=0) for k in range(len(X))]).astype(X.dtype)
    return op


def ref_pmean(X, groups):
    n = len(groups[0]) if groups is not None else len(X)   # JAX divides by the first group
    members, _ = _tables(groups, len(X))
    s = np.stack([X[members[k]].sum(0) for k in range(len(X))])
    return (s / n).astype(np.float32)


def ref_all_gather(axis, tiled):
    def op(X, groups):
        members, _ = _tables(groups, len(X))
        parts = lambda k: [X[q] for q in members[k]]  # noqa: E731
        if tiled:
            return np.stack([np.concatenate(parts(k), axis) for k in range(len(X))])
        return np.stack([np.stack(parts(k), axis) for k in range(len(X))])
    return op


def ref_psum_scatter(sd, tiled):
    def op(X, groups):
        members, rank = _tables(groups, len(X))
        out = []
        for k in range(len(X)):
            s = X[members[k]].sum(0).astype(X.dtype)
            chunk = np.split(s, len(members[k]), axis=sd)[rank[k]]
            out.append(chunk if tiled else np.squeeze(chunk, sd))
        return np.stack(out)
    return op


def ref_all_to_all(split, concat, tiled):
    def op(X, groups):
        members, rank = _tables(groups, len(X))
        out = []
        for k in range(len(X)):
            if tiled:
                out.append(np.concatenate(
                    [np.split(X[q], len(members[k]), split)[rank[k]] for q in members[k]],
                    concat))
            else:
                out.append(np.stack([np.take(X[q], rank[k], split) for q in members[k]],
                                    concat))
        return np.stack(out)
    return op


def ref_ppermute(perm):
    def op(X, groups):
        out = np.zeros_like(X)
        for s, d in perm:
            out[d] = X[s]
        return out
    return op


def ref_pbroadcast(source):
    def op(X, groups):
        return np.stack([X[source]] * len(X))
    return op


def ref_axis_index(X, groups):
    return np.arange(len(X), dtype=np.int32)


def apply_ref(X, frames, names, op, groups=None):
    """The reference over nested frames: ``X``'s leading axes are the vmapped ``frames``
    (outermost first); the collective acts over ``names`` (flattened in that order)."""
    nf = len(frames)
    others = [f for f in frames if f not in names]
    order = [frames.index(f) for f in others] + [frames.index(n) for n in names]
    Y = np.transpose(X, order + list(range(nf, X.ndim)))
    so = [X.shape[frames.index(f)] for f in others]
    sn = [X.shape[frames.index(n)] for n in names]
    Y = Y.reshape((int(np.prod(so)), int(np.prod(sn))) + X.shape[nf:])
    outs = np.stack([op(Y[o], groups) for o in range(Y.shape[0])])
    out = outs.reshape(tuple(so) + tuple(sn) + outs.shape[2:])
    inv = list(np.argsort(order))
    return np.transpose(out, inv + list(range(nf, out.ndim)))


# ================================================================================================
# The table: name -> (kiln/jax builder, reference, per-position shape given the group size,
# dtype, groups allowed: "any" (also uneven), "equal", or "none")
# ================================================================================================

def _case(build, ref, shape, dtype=np.float32, groups="equal", linear=True):
    return dict(build=build, ref=ref, shape=shape, dtype=dtype, groups=groups, linear=linear)


CASES = {
    "psum": _case(lambda L, a, g: lambda v: L.psum(v, a, axis_index_groups=g),
                  ref_reduce(np.sum), lambda G: (3,), groups="any"),
    "psum_int": _case(lambda L, a, g: lambda v: L.psum(v, a, axis_index_groups=g),
                      ref_reduce(np.sum), lambda G: (2, 3), np.int32, groups="any",
                      linear=False),
    "pmax": _case(lambda L, a, g: lambda v: L.pmax(v, a, axis_index_groups=g),
                  ref_reduce(np.max), lambda G: (3,), groups="any", linear=False),
    "pmin": _case(lambda L, a, g: lambda v: L.pmin(v, a, axis_index_groups=g),
                  ref_reduce(np.min), lambda G: (2, 2), groups="any", linear=False),
    "pmean": _case(lambda L, a, g: lambda v: L.pmean(v, a, axis_index_groups=g),
                   ref_pmean, lambda G: (3,), groups="any"),
    "all_gather": _case(lambda L, a, g: lambda v: L.all_gather(v, a, axis_index_groups=g),
                        ref_all_gather(0, False), lambda G: (3,)),
    "all_gather_ax1": _case(
        lambda L, a, g: lambda v: L.all_gather(v, a, axis_index_groups=g, axis=1),
        ref_all_gather(1, False), lambda G: (2, 3)),
    "all_gather_ax-1": _case(
        lambda L, a, g: lambda v: L.all_gather(v, a, axis_index_groups=g, axis=-1),
        ref_all_gather(2, False), lambda G: (2, 3)),
    "all_gather_tiled0": _case(
        lambda L, a, g: lambda v: L.all_gather(v, a, axis_index_groups=g, tiled=True),
        ref_all_gather(0, True), lambda G: (2, 3)),
    "all_gather_tiled1": _case(
        lambda L, a, g: lambda v: L.all_gather(v, a, axis_index_groups=g, axis=1,
                                               tiled=True),
        ref_all_gather(1, True), lambda G: (2, 3)),
    "psum_scatter": _case(lambda L, a, g: lambda v: L.psum_scatter(v, a, axis_index_groups=g),
                          ref_psum_scatter(0, False), lambda G: (G, 3)),
    "psum_scatter_d1": _case(
        lambda L, a, g: lambda v: L.psum_scatter(v, a, scatter_dimension=1,
                                                 axis_index_groups=g),
        ref_psum_scatter(1, False), lambda G: (2, G)),
    "psum_scatter_tiled0": _case(
        lambda L, a, g: lambda v: L.psum_scatter(v, a, axis_index_groups=g, tiled=True),
        ref_psum_scatter(0, True), lambda G: (2 * G, 3)),
    "psum_scatter_tiled1": _case(
        lambda L, a, g: lambda v: L.psum_scatter(v, a, scatter_dimension=1,
                                                 axis_index_groups=g, tiled=True),
        ref_psum_scatter(1, True), lambda G: (3, 2 * G)),
    "all_to_all_00": _case(lambda L, a, g: lambda v: L.all_to_all(v, a, 0, 0,
                                                                  axis_index_groups=g),
                           ref_all_to_all(0, 0, False), lambda G: (G, 3)),
    "all_to_all_01": _case(lambda L, a, g: lambda v: L.all_to_all(v, a, 0, 1,
                                                                  axis_index_groups=g),
                           ref_all_to_all(0, 1, False), lambda G: (G, 3)),
    "all_to_all_10": _case(lambda L, a, g: lambda v: L.all_to_all(v, a, 1, 0,
                                                                  axis_index_groups=g),
                           ref_all_to_all(1, 0, False), lambda G: (2, G)),
    "all_to_all_20": _case(lambda L, a, g: lambda v: L.all_to_all(v, a, 2, 0,
                                                                  axis_index_groups=g),
                           ref_all_to_all(2, 0, False), lambda G: (2, 3, G)),
    "all_to_all_02": _case(lambda L, a, g: lambda v: L.all_to_all(v, a, 0, 2,
                                                                  axis_index_groups=g),
                           ref_all_to_all(0, 2, False), lambda G: (G, 2, 3)),
    "all_to_all_tiled01": _case(
        lambda L, a, g: lambda v: L.all_to_all(v, a, 0, 1, axis_index_groups=g, tiled=True),
        ref_all_to_all(0, 1, True), lambda G: (2 * G, 3)),
    "all_to_all_tiled10": _case(
        lambda L, a, g: lambda v: L.all_to_all(v, a, 1, 0, axis_index_groups=g, tiled=True),
        ref_all_to_all(1, 0, True), lambda G: (3, 2 * G)),
    "all_to_all_tiled00": _case(
        lambda L, a, g: lambda v: L.all_to_all(v, a, 0, 0, axis_index_groups=g, tiled=True),
        ref_all_to_all(0, 0, True), lambda G: (2 * G, 3)),
    "pswapaxes0": _case(lambda L, a, g: lambda v: L.pswapaxes(v, a, 0, axis_index_groups=g),
                        ref_all_to_all(0, 0, False), lambda G: (G, 3)),
    "pswapaxes1": _case(lambda L, a, g: lambda v: L.pswapaxes(v, a, 1, axis_index_groups=g),
                        ref_all_to_all(1, 1, False), lambda G: (2, G)),
    "ppermute_cycle": _case(
        lambda L, a, g: lambda v: L.ppermute(v, a, [(k, (k + 1) % g) for k in range(g)]),
        None, lambda G: (3,), groups="none"),
    "ppermute_partial": _case(lambda L, a, g: lambda v: L.ppermute(v, a, [(0, 1), (1, 0)]),
                              ref_ppermute([(0, 1), (1, 0)]), lambda G: (2,), groups="none"),
    "pshuffle": _case(lambda L, a, g: lambda v: L.pshuffle(v, a, [(k + 1) % g
                                                                 for k in range(g)]),
                      None, lambda G: (3,), groups="none"),
    "pbroadcast": _case(lambda L, a, g: lambda v: L.pbroadcast(v, a, 1),
                        ref_pbroadcast(1), lambda G: (3,), groups="none"),
    "axis_index": _case(lambda L, a, g: lambda v: L.axis_index(a), ref_axis_index,
                        lambda G: (), groups="none", linear=False),
}


def _ref_for(name, total):
    """The reference op of a case; the permutation cases depend on the axis size."""
    if name == "ppermute_cycle":
        return ref_ppermute([(k, (k + 1) % total) for k in range(total)])
    if name == "pshuffle":
        return ref_ppermute([((k + 1) % total, k) for k in range(total)])
    return CASES[name]["ref"]


def _builder_arg(name, groups, total):
    # the permutation cases take the axis size where the others take the groups
    return total if CASES[name]["groups"] == "none" else groups


N = 4
GROUPS_EQUAL = [((0, 1), (2, 3)), ((3, 0), (1, 2)), ((0, 2), (3, 1)), ((2, 1, 0, 3),)]
GROUPS_UNEVEN = [((0,), (3, 1, 2))]


def _group_params():
    out = []
    for name, c in CASES.items():
        out.append(pytest.param(name, None, id=f"{name}-nogroups"))
        if c["groups"] == "none":
            continue
        gl = GROUPS_EQUAL + (GROUPS_UNEVEN if c["groups"] == "any" else [])
        for k, g in enumerate(gl):
            out.append(pytest.param(name, g, id=f"{name}-groups{k}"))
    return out


def _input(shape, dtype, seed=0):
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return r.integers(-5, 6, size=shape).astype(dtype)
    # distinct values (no ties for pmax/pmin)
    n = int(np.prod(shape))
    return (r.permutation(n).reshape(shape) * 0.25 - n / 8).astype(dtype)


def _gsize(groups, total):
    return len(groups[0]) if groups is not None else total


def _close(got, exp, tol=1e-5):
    got = np.asarray(got)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    assert got.dtype == exp.dtype, (got.dtype, exp.dtype)
    np.testing.assert_allclose(got, exp, rtol=tol, atol=tol)


# ================================================================================================
# One named axis
# ================================================================================================

@pytest.mark.parametrize("name,groups", _group_params())
def test_single_axis_vs_numpy(name, groups):
    c = CASES[name]
    G = _gsize(groups, N)
    X = _input((N,) + c["shape"](G), c["dtype"])
    f = c["build"](lax, "i", _builder_arg(name, groups, N))
    exp = apply_ref(X, ("i",), ("i",), _ref_for(name, N), groups)
    _close(kiln.vmap(f, axis_name="i")(X), exp)
    # the mapped axis elsewhere, in and out
    Xt = np.moveaxis(X, 0, -1)
    got = kiln.vmap(f, in_axes=-1, out_axes=-1, axis_name="i")(Xt)
    _close(got, np.moveaxis(exp, 0, -1))
    # the operand unmapped by the named axis (the same on every position; traced by an
    # outer unnamed vmap, as psum of an untraced value takes JAX's constant path)
    got = kiln.vmap(kiln.vmap(lambda _, v: f(v), in_axes=(0, None), axis_name="i"),
                    in_axes=(None, 0))(X, X[1][None])
    _close(got[0], apply_ref(np.stack([X[1]] * N), ("i",), ("i",), _ref_for(name, N), groups))


_JIT_CASES = ["psum", "pmax", "all_gather_tiled1", "psum_scatter_d1", "all_to_all_02",
              "all_to_all_tiled10", "ppermute_partial", "pbroadcast"]


@pytest.mark.parametrize("name", _JIT_CASES)
def test_single_axis_jit(name):
    c = CASES[name]
    groups = None if c["groups"] == "none" else ((3, 0), (1, 2))
    G = _gsize(groups, N)
    X = _input((N,) + c["shape"](G), c["dtype"])
    f = c["build"](lax, "i", _builder_arg(name, groups, N))
    exp = apply_ref(X, ("i",), ("i",), _ref_for(name, N), groups)
    _close(kiln.jit(kiln.vmap(f, axis_name="i"))(X), exp)
    _close(kiln.vmap(kiln.jit(f), axis_name="i")(X), exp)


_JAX_SINGLE = [n for n in CASES if n not in ("ppermute_partial",)]


@pytest.mark.parametrize("name", _JAX_SINGLE)
def test_single_axis_vs_jax_vmap(name):
    jax = pytest.importorskip("jax")
    c = CASES[name]
    X = _input((N,) + c["shape"](N), c["dtype"])
    arg = _builder_arg(name, None, N)
    got = kiln.vmap(c["build"](lax, "i", arg), axis_name="i")(X)
    exp = jax.vmap(c["build"](jax.lax, "i", arg), axis_name="i")(X)
    _close(got, np.asarray(exp))
    if hasattr(exp, "weak_type"):   # JAX's vmap returns some results as NumPy arrays
        assert got.weak_type == exp.weak_type


# ================================================================================================
# Two named axes (nested vmaps)
# ================================================================================================

FRAMES = ("i", "j")
SIZES = (2, 4)
NAME_SETS = [("i", "j"), ("j", "i"), ("i",), ("j",)]
MULTI_GROUPS = {("i", "j"): ((0, 5), (1, 4), (2, 7), (3, 6)),
                ("j", "i"): ((7, 0, 5, 2), (1, 6, 3, 4)),
                ("i",): ((1, 0),), ("j",): ((3, 0), (1, 2))}
_MULTI_CASES = ["psum", "pmax", "pmean", "all_gather_ax1", "all_gather_tiled0",
                "psum_scatter_d1", "psum_scatter_tiled0", "all_to_all_01", "all_to_all_10",
                "all_to_all_tiled01", "all_to_all_tiled00", "ppermute_cycle",
                "ppermute_partial", "pshuffle", "pbroadcast", "axis_index"]


def _multi_params():
    out = []
    for name in _MULTI_CASES:
        for names in NAME_SETS:
            nid = "".join(names)
            out.append(pytest.param(name, names, False, id=f"{name}-{nid}"))
            if CASES[name]["groups"] != "none":
                out.append(pytest.param(name, names, True, id=f"{name}-{nid}-groups"))
    return out


def _nested(f, in_axes=0):
    return kiln.vmap(kiln.vmap(f, in_axes=in_axes, axis_name="j"), in_axes=in_axes,
                     axis_name="i")


@pytest.mark.parametrize("name,names,use_groups", _multi_params())
def test_two_axes_vs_numpy(name, names, use_groups):
    c = CASES[name]
    total = int(np.prod([SIZES[FRAMES.index(n)] for n in names]))
    groups = MULTI_GROUPS[names] if use_groups else None
    G = _gsize(groups, total)
    X = _input(SIZES + c["shape"](G), c["dtype"], seed=1)
    a = names if len(names) > 1 else names[0]
    f = c["build"](lax, a, _builder_arg(name, groups, total))
    exp = apply_ref(X, FRAMES, names, _ref_for(name, total), groups)
    _close(_nested(f)(X), exp)
    # an operand mapped by the outer vmap only / by the inner one only
    got = kiln.vmap(kiln.vmap(lambda _, v: f(v), in_axes=(0, None), axis_name="j"),
                    in_axes=(0, 0), axis_name="i")(X, X[:, 1])
    _close(got, apply_ref(np.broadcast_to(X[:, 1:2], X.shape).copy(), FRAMES, names,
                          _ref_for(name, total), groups))
    got = kiln.vmap(kiln.vmap(lambda _, v: f(v), in_axes=(0, 0), axis_name="j"),
                    in_axes=(0, None), axis_name="i")(X, X[1])
    _close(got, apply_ref(np.broadcast_to(X[1:2], X.shape).copy(), FRAMES, names,
                          _ref_for(name, total), groups))


@pytest.mark.parametrize("name", ["psum", "all_gather_tiled0", "all_to_all_10",
                                  "psum_scatter_d1"])
def test_two_axes_jit(name):
    c = CASES[name]
    names = ("j", "i")
    groups = MULTI_GROUPS[names]
    X = _input(SIZES + c["shape"](_gsize(groups, 8)), c["dtype"], seed=2)
    f = c["build"](lax, names, groups)
    exp = apply_ref(X, FRAMES, names, c["ref"], groups)
    _close(kiln.jit(_nested(f))(X), exp)
    _close(_nested(kiln.jit(f))(X), exp)


@pytest.mark.parametrize("name,names", [
    ("psum", ("i", "j")), ("psum", ("j", "i")), ("pmax", ("i", "j")), ("pmean", ("j", "i")),
    ("all_to_all_01", ("i", "j")), ("all_to_all_tiled10", ("j", "i")),
    ("all_to_all_00", ("i", "j")), ("axis_index", ("i", "j")), ("axis_index", ("j", "i")),
    ("psum", ("i",)), ("all_gather_tiled1", ("j",)), ("psum_scatter_tiled0", ("i",))])
def test_two_axes_vs_jax_vmap(name, names):
    jax = pytest.importorskip("jax")
    c = CASES[name]
    total = int(np.prod([SIZES[FRAMES.index(n)] for n in names]))
    X = _input(SIZES + c["shape"](total), c["dtype"], seed=3)
    a = names if len(names) > 1 else names[0]
    got = _nested(c["build"](lax, a, None))(X)
    jf = c["build"](jax.lax, a, None)
    exp = jax.vmap(jax.vmap(jf, axis_name="j"), axis_name="i")(X)
    _close(got, np.asarray(exp))


def test_axis_index_and_size_tuple():
    def f(_):
        return (lax.axis_index(("i", "j")), lax.axis_index(("j", "i")),
                lax.axis_size(("i", "j")) + 0 * lax.axis_index("i"))
    a, b, s = _nested(f)(np.zeros(SIZES))
    np.testing.assert_array_equal(a, np.arange(8).reshape(2, 4))
    np.testing.assert_array_equal(b, np.arange(8).reshape(4, 2).T)
    np.testing.assert_array_equal(s, np.full(SIZES, 8))
    assert a.dtype == np.int32 and b.dtype == np.int32


def _bodies(K, L):
    c = np.float32(2.0)
    return {
        "jit_psum": lambda x: K.jit(lambda v: L.psum(v, "i"))(c),
        "jit_axis_index": lambda x: K.jit(lambda v: v * L.axis_index("i"))(c),
        "jit_all_gather": lambda x: K.jit(lambda v: L.all_gather(v * L.axis_index("i"), "i"))(c),
        "fori": lambda x: L.fori_loop(0, 3, lambda i, v: v + L.axis_index("i"), 0),
        "cond": lambda x: L.cond(True, lambda v: v * L.axis_index("i"), lambda v: v, c),
        "scan": lambda x: L.scan(lambda v, _: (v + L.psum(v * 1.0, "i"), v), c, None,
                                 length=2)[0],
        "checkpoint": lambda x: K.checkpoint(lambda v: v * L.axis_index("i"))(c),
        "jit_in_jit": lambda x: K.jit(lambda v: K.jit(lambda u: u + L.axis_index("i"))(v))(c),
    }


@pytest.mark.parametrize("name", sorted(_bodies(kiln, lax)))
def test_collectives_in_sub_jaxprs_with_unbatched_operands(name):
    """A jit/cond/scan/checkpoint whose operands are all unbatched still runs batched when
    its body uses the named axis (its result depends on the position)."""
    jax = pytest.importorskip("jax")
    X = np.ones(4, np.float32)
    got = kiln.vmap(_bodies(kiln, lax)[name], axis_name="i")(X)
    exp = jax.vmap(_bodies(jax, jax.lax)[name], axis_name="i")(X)
    _close(got, np.asarray(exp))
    got = kiln.vmap(kiln.vmap(_bodies(kiln, lax)[name], axis_name="j"), axis_name="i")(
        np.ones((4, 2), np.float32))
    _close(got, np.repeat(np.asarray(exp)[:, None], 2, 1))


# ================================================================================================
# Constants: psum of values that are not traced, axis_size
# ================================================================================================

def _const_results(L):
    seen = {}

    def f(x):
        seen["psum1"] = L.psum(1, "i")
        seen["axis_size"] = L.axis_size("i")
        seen["axis_size2"] = L.axis_size(("i",))
        seen["psum2.0"] = L.psum(2.0, "i")
        seen["psum_np"] = L.psum(np.ones(2, np.int8), "i")
        seen["pmean1"] = L.pmean(1, "i")
        seen["psum_groups"] = L.psum(1, "i", axis_index_groups=[[0, 1], [2, 3]])
        seen["psum_bool"] = L.psum(True, "i")
        return x
    return f, seen


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_psum_of_constants_vs_jax(wrap):
    jax = pytest.importorskip("jax")
    X = np.zeros((4, 2), np.float32)
    kf, kseen = _const_results(lax)
    jf, jseen = _const_results(jax.lax)
    if wrap == "jit":
        kiln.jit(kiln.vmap(kf, axis_name="i"))(X)
        jax.jit(jax.vmap(jf, axis_name="i"))(X)
    else:
        kiln.vmap(kf, axis_name="i")(X)
        jax.vmap(jf, axis_name="i")(X)
    for k in ("psum1", "axis_size", "axis_size2", "psum2.0", "pmean1", "psum_groups"):
        assert type(kseen[k]) is type(jseen[k]), k
        assert kseen[k] == jseen[k], k
    assert type(kseen["psum_np"]) is np.ndarray
    np.testing.assert_array_equal(kseen["psum_np"], np.full(2, 4, np.int8))
    assert kseen["psum_np"].dtype == np.int8
    if wrap == "eager":
        assert kseen["psum_bool"].dtype == np.int32 and int(kseen["psum_bool"]) == 4
    # the vmapped outputs
    out = kiln.vmap(lambda x: (lax.psum(1, "i"), lax.psum(np.float32(1), "i")),
                    axis_name="i")(X)
    jout = jax.vmap(lambda x: (jax.lax.psum(1, "i"), jax.lax.psum(np.float32(1), "i")),
                    axis_name="i")(X)
    for o, j in zip(out, jout):
        _close(o, np.asarray(j))
        assert o.weak_type == j.weak_type


def test_psum_bool_and_traced_int_dtypes():
    x = np.array([True, False, True, True])
    got = kiln.vmap(lambda v: lax.psum(v, "i"), axis_name="i")(x)
    _close(got, np.full(4, 3, np.int32))
    got = kiln.vmap(lambda v: lax.pmean(v, "i"), axis_name="i")(np.arange(4, dtype=np.int32))
    _close(got, np.full(4, 1.5, np.float32))


# ================================================================================================
# Derivatives and transposes
# ================================================================================================

_LINEAR = [n for n, c in CASES.items() if c["linear"]]


def _linear_params():
    out = []
    for name in _LINEAR:
        out.append(pytest.param(name, None, id=f"{name}-nogroups"))
        if CASES[name]["groups"] != "none":
            out.append(pytest.param(name, ((3, 0), (1, 2)), id=f"{name}-groups"))
    return out


def _jacobian(fn, shape):
    """The exact Jacobian of a linear NumPy function, column by column."""
    n = int(np.prod(shape))
    cols = []
    for i in range(n):
        e = np.zeros(n, np.float64)
        e[i] = 1.0
        cols.append(np.asarray(fn(e.reshape(shape)), np.float64).ravel())
    return np.stack(cols, 1)


@pytest.mark.parametrize("name,groups", _linear_params())
def test_transpose_and_grad_vs_exact_jacobian(name, groups):
    c = CASES[name]
    G = _gsize(groups, N)
    X = _input((N,) + c["shape"](G), np.float32)
    f = c["build"](lax, "i", _builder_arg(name, groups, N))
    ref = _ref_for(name, N)
    J = _jacobian(lambda x: apply_ref(x, ("i",), ("i",), ref, groups), X.shape)
    F = kiln.vmap(f, axis_name="i")
    out_shape = np.asarray(F(X)).shape
    ct = _input(out_shape, np.float32, seed=5)
    exp = (J.T @ ct.ravel().astype(np.float64)).reshape(X.shape)
    # transpose of the whole vmapped function
    (got,) = kiln.linear_transpose(F, X)(ct)
    np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)
    # transposed inside the named axis (the collective's own transpose rule runs batched)
    got = kiln.vmap(lambda x, t: kiln.linear_transpose(f, x)(t)[0], axis_name="i")(X, ct)
    np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)
    # vjp / grad
    got = kiln.grad(lambda x: kiln.numpy.sum(F(x) * ct))(X)
    np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)
    # jvp is the collective of the tangent
    t = _input(X.shape, np.float32, seed=6)
    _, tout = kiln.jvp(F, (X,), (t,))
    np.testing.assert_allclose(tout, (J @ t.ravel()).reshape(out_shape), rtol=1e-5, atol=1e-5)


def _fd_grad(fn, x, eps=1e-3):
    g = np.zeros(x.shape, np.float64)
    for i in np.ndindex(x.shape):
        xp, xm = x.astype(np.float64), x.astype(np.float64)
        xp[i] += eps
        xm[i] -= eps
        g[i] = (fn(xp) - fn(xm)) / (2 * eps)
    return g


_GRAD_CASES = ["psum", "pmax", "pmin", "pmean", "all_gather_tiled1", "psum_scatter_d1",
               "all_to_all_01", "all_to_all_tiled10", "ppermute_partial", "pbroadcast"]


@pytest.mark.parametrize("name,grouped", [
    pytest.param(n, g, id=f"{n}-{'groups' if g else 'nogroups'}") for n in _GRAD_CASES
    for g in ((False, True) if CASES[n]["groups"] != "none" else (False,))])
def test_grad_vs_finite_differences(name, grouped):
    """Per-position gradients inside the named axis (``vmap(grad)``) are the gradient of the
    sum over positions (JAX's convention: psum transposes to psum), checked by central
    differences of the NumPy reference."""
    c = CASES[name]
    groups = ((3, 0), (1, 2)) if grouped else None
    G = _gsize(groups, N)
    X = _input((N,) + c["shape"](G), np.float32)
    f = c["build"](lax, "i", _builder_arg(name, groups, N))
    ref = _ref_for(name, N)
    w = None

    def total_np(x):
        y = apply_ref(x, ("i",), ("i",), ref, groups).astype(np.float64)
        return float(np.sum(np.sin(y) * w))

    jnp = kiln.numpy
    out_shape = np.asarray(kiln.vmap(f, axis_name="i")(X)).shape
    w = _input(out_shape, np.float32, seed=7) + 0.5
    exp = _fd_grad(total_np, X)
    got = kiln.vmap(kiln.grad(lambda x, wk: jnp.sum(jnp.sin(f(x)) * wk)), axis_name="i")(X, w)
    np.testing.assert_allclose(got, exp, rtol=2e-3, atol=2e-3)
    got = kiln.grad(lambda x: jnp.sum(jnp.sin(kiln.vmap(f, axis_name="i")(x)) * w))(X)
    np.testing.assert_allclose(got, exp, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("names,use_groups", [(("i", "j"), False), (("j", "i"), True),
                                              (("j",), True)])
@pytest.mark.parametrize("name", ["psum", "pmax", "all_gather_tiled0", "psum_scatter_d1",
                                  "all_to_all_10", "ppermute_cycle", "pbroadcast"])
def test_two_axes_grad_vs_finite_differences(name, names, use_groups):
    c = CASES[name]
    total = int(np.prod([SIZES[FRAMES.index(n)] for n in names]))
    groups = MULTI_GROUPS[names] if use_groups and c["groups"] != "none" else None
    X = _input(SIZES + c["shape"](_gsize(groups, total)), np.float32, seed=4)
    a = names if len(names) > 1 else names[0]
    f = c["build"](lax, a, _builder_arg(name, groups, total))
    ref = _ref_for(name, total)
    jnp = kiln.numpy
    out_shape = np.asarray(_nested(f)(X)).shape
    w = _input(out_shape, np.float32, seed=8) + 0.5
    exp = _fd_grad(lambda x: float(np.sum(np.sin(apply_ref(x, FRAMES, names, ref, groups))
                                          * w)), X)
    got = _nested(kiln.grad(lambda x, wk: jnp.sum(jnp.sin(f(x)) * wk)))(X, w)
    np.testing.assert_allclose(got, exp, rtol=2e-3, atol=2e-3)
    got = kiln.jit(kiln.grad(lambda x: jnp.sum(jnp.sin(_nested(f)(x)) * w)))(X)
    np.testing.assert_allclose(got, exp, rtol=2e-3, atol=2e-3)


# Not compared with JAX: the untiled all_to_all with split_axis != concat_axis (JAX's
# transpose rule gives a cotangent of the wrong shape under vmap(grad)) and pbroadcast (JAX's
# transpose rule calls full with a non-scalar fill value); kiln's are checked against exact
# Jacobians and finite differences above.
_JAX_GRAD = ["psum", "pmean", "all_gather_ax1", "all_gather_tiled1", "psum_scatter",
             "psum_scatter_tiled1", "all_to_all_00", "all_to_all_tiled10", "pswapaxes1",
             "ppermute_cycle", "pshuffle"]


@pytest.mark.parametrize("name", _JAX_GRAD)
def test_grads_vs_jax_vmap(name):
    jax = pytest.importorskip("jax")
    import jax.numpy as jjnp
    jnp = kiln.numpy
    c = CASES[name]
    X = _input((N,) + c["shape"](N), np.float32)
    arg = _builder_arg(name, None, N)
    kf, jf = c["build"](lax, "i", arg), c["build"](jax.lax, "i", arg)
    out_shape = np.asarray(kiln.vmap(kf, axis_name="i")(X)).shape
    w = _input(out_shape, np.float32, seed=9)
    got = kiln.vmap(kiln.grad(lambda x, wk: jnp.sum(jnp.sin(kf(x)) * wk)), axis_name="i")(X, w)
    exp = jax.jit(jax.vmap(jax.grad(lambda x, wk: jjnp.sum(jjnp.sin(jf(x)) * wk)),
                           axis_name="i"))(X, w)
    np.testing.assert_allclose(got, np.asarray(exp), rtol=1e-5, atol=1e-5)
    got = kiln.grad(lambda x: jnp.sum(jnp.cos(kiln.vmap(kf, axis_name="i")(x)) * w))(X)
    exp = jax.jit(jax.grad(lambda x: jjnp.sum(jjnp.cos(jax.vmap(jf, axis_name="i")(x)) * w)))(X)
    np.testing.assert_allclose(got, np.asarray(exp), rtol=1e-5, atol=1e-5)


def test_second_order_and_vmap_of_vmap_grad():
    jnp = kiln.numpy
    X = _input((N, 3), np.float32)

    def g(x):
        return jnp.sum(lax.psum(x * x, "i", axis_index_groups=[[0, 3], [1, 2]]) ** 2)

    def g_np(x):
        s = apply_ref(x * x, ("i",), ("i",), ref_reduce(np.sum), ((0, 3), (1, 2)))
        return float(np.sum(s ** 2))

    got = kiln.vmap(kiln.grad(g), axis_name="i")(X)
    np.testing.assert_allclose(got, _fd_grad(g_np, X), rtol=2e-3, atol=2e-3)
    # Hessian-vector product through the collective: forward over reverse
    v = _input(X.shape, np.float32, seed=3)
    hv = kiln.vmap(lambda x, t: kiln.jvp(kiln.grad(g), (x,), (t,))[1], axis_name="i")(X, v)
    gf = lambda x: _fd_grad(g_np, x)  # noqa: E731
    fd = (gf(X.astype(np.float64) + 1e-3 * v) - gf(X.astype(np.float64) - 1e-3 * v)) / 2e-3
    np.testing.assert_allclose(hv, fd, rtol=2e-2, atol=2e-2)


# ================================================================================================
# Primitives, jaxprs and errors
# ================================================================================================

def test_jaxprs_match_jax():
    jax = pytest.importorskip("jax")
    x = np.ones((4, 4), np.float32)
    cases = [lambda L, v: L.psum(v, ("i", "j")),
             lambda L, v: L.pmin(v, "i", axis_index_groups=[[0, 1], [2, 3]]),
             lambda L, v: L.all_gather(v, "i", axis=1, tiled=True),
             lambda L, v: L.psum_scatter(v, "i"),
             lambda L, v: L.psum_scatter(v, ("j",), scatter_dimension=1, tiled=True),
             lambda L, v: L.all_to_all(v, "i", 0, 1),
             lambda L, v: L.all_to_all(v, "i", 1, 1, tiled=True),
             lambda L, v: L.ppermute(v, "i", [(0, 1), (1, 0)]),
             lambda L, v: L.pshuffle(v, "i", [1, 2, 3, 0]),
             lambda L, v: L.pswapaxes(v, "i", 0),
             lambda L, v: L.pbroadcast(v, "i", 2),
             lambda L, v: L.axis_index("j")]
    env = [("i", 4), ("j", 2)]
    for case in cases:
        got = str(kiln.make_jaxpr(lambda v: case(lax, v), axis_env=env)(x))
        exp = str(jax.make_jaxpr(lambda v: case(jax.lax, v), axis_env=env)(x))
        assert got.split() == exp.split(), (got, exp)


def test_new_primitives_are_exported():
    for name in ("all_to_all_p", "reduce_scatter_p", "pbroadcast_p", "psum_p", "all_gather_p",
                 "ppermute_p", "axis_index_p", "pmax_p", "pmin_p"):
        assert getattr(lax, name).name == name[:-2]
    for name in ("all_to_all", "psum_scatter", "pshuffle", "pswapaxes", "axis_size",
                 "pbroadcast"):
        assert callable(getattr(lax, name))


def _vm(f, x=None):
    return kiln.vmap(f, axis_name="i")(np.ones((4, 4), np.float32) if x is None else x)


def test_errors():
    g_bad = [[0, 1], [1, 2]]
    with pytest.raises(ValueError, match="cover all indices exactly once"):
        _vm(lambda v: lax.psum(v, "i", axis_index_groups=g_bad))
    with pytest.raises(ValueError, match="cover all indices exactly once"):
        lax.psum(1, "i", axis_index_groups=g_bad)
    with pytest.raises(ValueError, match="cover all 4 indices"):
        _vm(lambda v: lax.pmax(v, "i", axis_index_groups=[[0, 1]]))
    with pytest.raises(ValueError, match="same size"):
        _vm(lambda v: lax.all_gather(v, "i", axis_index_groups=[[0], [1, 2, 3]]))
    with pytest.raises(ValueError, match="same size"):
        _vm(lambda v: lax.psum_scatter(v, "i", axis_index_groups=[[0], [1, 2, 3]]))
    with pytest.raises(ValueError, match="same size"):
        _vm(lambda v: lax.all_to_all(v, "i", 0, 0, axis_index_groups=[[0], [1, 2, 3]]))
    with pytest.raises(ValueError, match="all_to_all requires the size"):
        _vm(lambda v: lax.all_to_all(v[:3], "i", 0, 0))
    with pytest.raises(ValueError, match="divisible"):
        _vm(lambda v: lax.all_to_all(v[:3], "i", 0, 1, tiled=True),
            np.ones((4, 4, 2), np.float32))
    with pytest.raises(ValueError, match="must match shard count"):
        _vm(lambda v: lax.psum_scatter(v[:3], "i"))
    with pytest.raises(ValueError, match="divisible by shard_count"):
        _vm(lambda v: lax.psum_scatter(v[:3], "i", tiled=True))
    with pytest.raises(ValueError, match="unique"):
        _vm(lambda v: lax.ppermute(v, "i", [(0, 1), (2, 1)]))
    with pytest.raises(ValueError, match="in \\[0, 4\\)"):
        _vm(lambda v: lax.ppermute(v, "i", [(0, 4)]))
    with pytest.raises(ValueError, match="does not represent a permutation"):
        _vm(lambda v: lax.pshuffle(v, "i", [0, 0, 1, 2]))
    with pytest.raises(ValueError, match="out of range"):
        _vm(lambda v: lax.pbroadcast(v, "i", 4))
    with pytest.raises(ValueError, match="out of bounds"):
        _vm(lambda v: lax.all_gather(v, "i", axis=3))
    with pytest.raises(ValueError, match="unexpected `to`"):
        _vm(lambda v: lax.all_gather(v, "i", to="bad"))
    with pytest.raises(ValueError, match="only accepts inputs that are varying"):
        _vm(lambda v: lax.all_gather(v, "i", to="reduced"))     # no manual axes: JAX's
    with pytest.raises(NotImplementedError, match="positional"):
        _vm(lambda v: lax.psum(v, 0))
    with pytest.raises(ValueError, match="just named axes"):
        _vm(lambda v: lax.psum(v, 0, axis_index_groups=[[0, 1, 2, 3]]))
    for fn in (lambda v: lax.psum(v, "k"), lambda v: lax.all_to_all(v, "k", 0, 0),
               lambda v: lax.psum_scatter(v, "k"), lambda v: lax.axis_size("k"),
               lambda v: lax.ppermute(v, "k", [(0, 1)]), lambda v: lax.axis_index("k")):
        with pytest.raises(NameError):
            _vm(fn)
    with pytest.raises(NameError):
        lax.all_gather(np.ones(3, np.float32), "i")


def test_errors_match_jax_classes():
    jax = pytest.importorskip("jax")
    cases = [lambda L, v: L.all_to_all(v[:3], "i", 0, 0),
             lambda L, v: L.all_to_all(v[:3][:, None], "i", 0, 1, tiled=True),
             lambda L, v: L.pshuffle(v, "i", [0, 0, 1, 2]),
             lambda L, v: L.psum(v, "i", axis_index_groups=[[0, 1], [1, 2]]),
             lambda L, v: L.all_gather(v, "i", to="bad"),
             lambda L, v: L.all_gather(v, "i", axis=3),
             lambda L, v: L.psum(v, "k"),
             lambda L, v: L.all_to_all(v, "k", 0, 0)]
    x = np.ones((4, 4), np.float32)
    for case in cases:
        with pytest.raises(Exception) as ej:
            jax.vmap(lambda v: case(jax.lax, v), axis_name="i")(x)
        with pytest.raises(Exception) as ek:
            kiln.vmap(lambda v: case(lax, v), axis_name="i")(x)
        assert ek.type is ej.type, (ek.value, ej.value)


# ================================================================================================
# The references against JAX's pmap/shard_map (8 CPU devices, in a subprocess)
# ================================================================================================

_ORACLE = r"""
import os, sys, importlib.util
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import numpy as np, jax
from jax import lax
from jax.sharding import PartitionSpec as P
spec = importlib.util.spec_from_file_location("tc", sys.argv[1])
tc = importlib.util.module_from_spec(spec); spec.loader.exec_module(tc)
checked = 0
# one axis of 8 (pmap), with groups
G8 = [None, ((3, 0), (1, 2), (7, 6), (5, 4)), ((0, 2, 4, 6), (1, 3, 5, 7))]
UNEVEN = [((0, 1, 2), (7, 3, 4, 5, 6))]
for name, c in tc.CASES.items():
    if name == "pbroadcast":   # JAX lowers pbroadcast on GPU only
        continue
    gl = {"none": [None], "equal": G8, "any": G8 + UNEVEN}[c["groups"]]
    for groups in gl:
        G = tc._gsize(groups, 8)
        X = tc._input((8,) + c["shape"](G), c["dtype"])
        f = c["build"](lax, "i", tc._builder_arg(name, groups, 8))
        got = np.asarray(jax.pmap(f, axis_name="i")(X))
        exp = tc.apply_ref(X, ("i",), ("i",), tc._ref_for(name, 8), groups)
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5, err_msg=f"{name} {groups}")
        checked += 1
# two axes (shard_map over a 2x4 mesh), without and with groups
mesh = jax.make_mesh((2, 4), ("i", "j"))
for name in tc._MULTI_CASES:
    if name == "pbroadcast":
        continue
    c = tc.CASES[name]
    for names in tc.NAME_SETS:
        if name.startswith(("ppermute", "pshuffle")) and names == ("j", "i"):
            # JAX's ppermute numbers the positions of several axes in mesh order (it sorts
            # the device ids), whatever the order of the names; kiln uses the names' order.
            continue
        for groups in [None] + ([tc.MULTI_GROUPS[names]] if c["groups"] != "none" else []):
            total = int(np.prod([tc.SIZES[tc.FRAMES.index(n)] for n in names]))
            X = tc._input(tc.SIZES + c["shape"](tc._gsize(groups, total)), c["dtype"], seed=1)
            a = names if len(names) > 1 else names[0]
            f = c["build"](lax, a, tc._builder_arg(name, groups, total))
            g = lambda v: f(v[0, 0])[None, None]
            sm = jax.jit(jax.shard_map(g, mesh=mesh, in_specs=P("i", "j"),
                                       out_specs=P("i", "j"), check_vma=False))
            got = np.asarray(sm(jax.device_put(X, jax.NamedSharding(mesh, P("i", "j")))))
            exp = tc.apply_ref(X, tc.FRAMES, names, tc._ref_for(name, total), groups)
            np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name} {names} {groups}")
            checked += 1
print("CHECKED", checked)
"""


@pytest.mark.slow
def test_references_match_jax_pmap(tmp_path):
    pytest.importorskip("jax")
    script = tmp_path / "oracle.py"
    script.write_text(textwrap.dedent(_ORACLE))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, str(script), os.path.abspath(__file__)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "CHECKED" in r.stdout
