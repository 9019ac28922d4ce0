"""Parity of NumPy-style indexing and ``.at[]`` updates with ``jax``.

Every case is a function of the operand and of index arrays; the index arrays are passed
as arguments, so under ``jit`` they are traced (the gather/scatter paths) while the eager
run takes the NumPy fast paths. Checked: values and dtypes eagerly and under ``jit``;
``vmap`` over the operand, over the indices and over the update values; ``grad`` with
respect to the operand and the values; out-of-bound behaviour of every mode; error classes.
"""
from __future__ import annotations

import functools
import warnings
import zlib

import numpy as np
import pytest
from _oracle import jax_result
from _sampling import sample_cover

import kiln
import kiln.numpy as knp
from kiln.errors import ConcretizationTypeError, NonConcreteBooleanIndexError

jax = pytest.importorskip("jax")
jnp = jax.numpy

pytestmark = pytest.mark.parity

RNG = np.random.default_rng(1)
X = RNG.normal(size=(3, 4, 5)).astype(np.float32)
XI = RNG.integers(-20, 20, size=(3, 4, 5)).astype(np.int32)
I3 = np.array([2, 0, -1, 2], np.int32)              # axis 0 (size 3), negative, repeated
I4 = np.array([[1, 3], [0, -4]], np.int32)          # axis 1 (size 4), 2-d
J5 = np.array([4, 0, 2, -2], np.int32)              # axis 2 (size 5)
OOB = np.array([0, 3, -4, 7, -1], np.int32)         # axis 0 with out-of-bound entries
U3 = np.array([2, 0, 1], np.int32)                  # unique permutation of axis 0
S = np.int32(1)
MASK = RNG.random(size=(3, 4)) < 0.5
MASK1 = np.array([True, False, True])

# (name, expression in x and the index arrays a, b, c, index arrays)
GET_CASES = [
    ("int_array", "x[a]", (I3,)),
    ("int_array_2d", "x[:, a]", (I4,)),
    ("two_adjacent", "x[:, a, b]", (I4, np.array([[0], [4]], np.int32))),
    ("separated", "x[a, :, b]", (I3, J5)),
    ("separated_by_int", "x[a, 1, b]", (I3, J5)),
    ("int_then_array", "x[1, a]", (I4,)),
    ("array_then_int", "x[a, 2]", (I3,)),
    ("slice_int_array", "x[:, 1, a]", (J5,)),
    ("int_slice_array", "x[-1, ::2, a]", (J5,)),
    ("three_arrays", "x[a, b, c]", (I3, np.array([3, 0, 1, 2], np.int32), J5)),
    ("broadcast_arrays", "x[a[:, None], b]", (U3, np.array([0, 3], np.int32))),
    ("ellipsis_array", "x[..., a]", (J5,)),
    ("newaxis_array", "x[None, a, None]", (I3,)),
    ("newaxis_between", "x[a, None, :, b]", (I3, J5)),
    ("reversed_slice_array", "x[::-1, a, 1:4]", (I4,)),
    ("strided_slice_array", "x[a, 3:0:-2]", (I3,)),
    ("oob_clamp", "x[a]", (OOB,)),
    ("oob_two", "x[a, a]", (OOB,)),
    ("scalar_int_traced", "x[a]", (S,)),
    ("scalar_int_traced_slice", "x[a, 1:3]", (S,)),
    ("scalar_and_array", "x[a, b]", (S, I4)),
    ("empty_array", "x[a]", (np.zeros((0,), np.int32),)),
    ("uint8_index", "x[a]", (np.array([2, 0], np.uint8),)),
    ("int64_index", "x[:, a]", (np.array([3, -1], np.int64),)),
    ("scalar_array_index", "x[a]", (np.array(2, np.int32),)),
]

# Basic (static) and mask cases: no index arrays to trace.
STATIC_GET_CASES = [
    "x[1]", "x[-1, 2]", "x[1:3, ::-1]", "x[-1, ..., 2]", "x[..., None]", "x[None]",
    "x[7]", "x[-9, 1]", "x[mask]", "x[mask, 1]", "x[:, mask[0]]", "x[mask1, :, 1:3]",
    "x[True]", "x[False]", "x[()]", "x[np.array([2, 0])]", "x[[1, 0], ]",
]


def _eval_fun(expr, nargs, extra=None):
    names = "abc"[:nargs]
    env = {"np": np, "mask": MASK, "mask1": MASK1, "MASK": MASK}
    env.update(extra or {})
    return eval(f"lambda x, {', '.join(names)}: {expr}" if nargs else f"lambda x: {expr}", env)


def _kv(f, in_axes=0):
    """``kiln.vmap(f)`` called with kiln arrays (unmapped arguments are passed as they are,
    so NumPy operands are converted first)."""
    vf = kiln.vmap(f, in_axes=in_axes)
    return lambda *args: vf(*[knp.asarray(a) for a in args])


def _jv(f, in_axes=0):
    """The reference for ``vmap(f)``: a loop of eager kiln calls (whose values are checked
    against jax elsewhere), stacked."""
    def run(*args):
        n = next(np.shape(a)[0] for a, ax in zip(args, in_axes if isinstance(in_axes, tuple)
                                                  else (in_axes,) * len(args)) if ax == 0)
        axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        outs = [np.asarray(f(*[knp.asarray(a[k] if ax == 0 else a)
                               for a, ax in zip(args, axes)])) for k in range(n)]
        return np.stack(outs)
    return run


def _rng(*tag):
    """A generator seeded by ``tag``: test-time inputs (hence the stored JAX oracle's keys,
    tests/_oracle.py) do not depend on which tests ran before."""
    return np.random.default_rng(zlib.crc32(repr(tag).encode()))


def _assert_same(k, j, what, exact=False):
    k, j = np.asarray(k), np.asarray(j)
    assert k.shape == j.shape, f"{what}: shape {k.shape} vs jax {j.shape}"
    assert k.dtype == j.dtype, f"{what}: dtype {k.dtype} vs jax {j.dtype}"
    if k.dtype.kind in "fc" and not exact:
        np.testing.assert_allclose(k, j, rtol=2e-6, atol=2e-6, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(k, j, err_msg=what)


@functools.cache
def _jax_get(i, xname):
    name, expr, idx = GET_CASES[i]
    x = X if xname == "X" else XI
    return np.asarray(jax_result(
        f"get.{expr}", lambda: jax.jit(_eval_fun(expr, len(idx)))(jnp.asarray(x), *idx),
        (x, idx)))


@pytest.mark.parametrize("i", range(len(GET_CASES)), ids=[c[0] for c in GET_CASES])
def test_get(i):
    name, expr, idx = GET_CASES[i]
    f = _eval_fun(expr, len(idx))
    for xname, x in (("X", X), ("XI", XI)):
        ref = _jax_get(i, xname)
        _assert_same(f(knp.asarray(x), *idx), ref, f"eager {expr}", exact=True)
        _assert_same(kiln.jit(f)(x, *idx), ref, f"jit {expr}", exact=True)
    text = str(kiln.make_jaxpr(f)(X, *idx))
    if name not in ("scalar_int_traced", "scalar_int_traced_slice", "empty_array",
                    "scalar_array_index"):
        assert "gather[" in text, text


@pytest.mark.parametrize("expr", STATIC_GET_CASES)
def test_static_get(expr):
    f = _eval_fun(expr, 0)
    ref, ref_grad = jax_result(f"static.{expr}", lambda: (
        jax.jit(f)(jnp.asarray(X)) if "mask" not in expr else f(jnp.asarray(X)),
        jax.jit(jax.grad(lambda x: jnp.sum(f(x) * 1.5)))(X)), (X, MASK, MASK1))
    _assert_same(f(knp.asarray(X)), ref, f"eager {expr}", exact=True)
    _assert_same(kiln.jit(f)(X), ref, f"jit {expr}", exact=True)
    g = kiln.grad(lambda x: knp.sum(f(x) * 1.5))(X)
    _assert_same(g, ref_grad, f"grad {expr}")


@pytest.mark.parametrize("i", range(len(GET_CASES)), ids=[c[0] for c in GET_CASES])
def test_get_transforms(i):
    name, expr, idx = GET_CASES[i]
    f = _eval_fun(expr, len(idx))
    w = _rng("get_transforms", name).normal(size=_jax_get(i, "X").shape).astype(np.float32)

    def loss(mod):
        return lambda x, *a: mod.sum(f(x, *a) * w)

    gk = kiln.grad(loss(knp))(X, *idx)
    gj = jax_result(f"get_grad.{expr}", lambda: jax.jit(jax.grad(loss(jnp)))(X, *idx),
                    (X, w, idx))
    _assert_same(gk, gj, f"grad {expr}")
    _assert_same(kiln.jit(kiln.grad(loss(knp)))(X, *idx), gj, f"jit(grad) {expr}")
    xs = np.stack([X, X * 2, -X])
    _assert_same(_kv(f, (0,) + (None,) * len(idx))(xs, *idx),
                 _jv(f, (0,) + (None,) * len(idx))(xs, *idx), f"vmap x {expr}")
    if idx and all(np.ndim(a) >= 0 for a in idx):
        stacked = [np.stack([a, a[::-1] if np.ndim(a) else a]) for a in idx]
        ka = _kv(f, (None,) + (0,) * len(idx))(X, *stacked)
        ja = _jv(f, (None,) + (0,) * len(idx))(X, *stacked)
        _assert_same(ka, ja, f"vmap indices {expr}")
        kb = _kv(f)(xs[:2], *stacked)
        jb = _jv(f)(xs[:2], *stacked)
        _assert_same(kb, jb, f"vmap both {expr}")


# -- .at[] -------------------------------------------------------------------------------------

AT_INDEX = [
    ("int_array", "a", (I3,)),
    ("dup_rows", "a", (np.array([1, 1, 0, 1], np.int32),)),
    ("oob", "a", (OOB,)),
    ("separated", "a, :, b", (I3, J5)),
    ("contiguous_2d", ":, a, b", (I4, np.array([[0], [4]], np.int32))),
    ("int_and_array", "1, a", (I4,)),
    ("slice_strided_array", "::2, a, 3:0:-1", (I4,)),
    ("scalar_traced", "a", (S,)),
    ("scalar_traced_oob", "a", (np.int32(5),)),
    ("scalar_traced_neg", "a, 2", (np.int32(-1),)),
    ("newaxis", "None, a, ..., b", (I3, J5)),
    ("unique", "a", (U3,)),
]
AT_OPS = ["set", "add", "subtract", "multiply", "divide", "power", "min", "max"]


def _at_fun(index, nidx, op, mode=None):
    names = "abc"[:nidx]
    kw = "" if mode is None else f", mode={mode!r}"
    return eval(f"lambda x, v, {', '.join(names)}: x.at[{index}].{op}(v{kw})")


@functools.cache
def _values_shape(k):
    name, index, idx = AT_INDEX[k]
    f = eval(f"lambda x, {', '.join('abc'[:len(idx)])}: x[{index}]")
    return tuple(jax_result(f"values_shape.{index}",
                            lambda: list(np.shape(f(jnp.asarray(X), *idx))), (X, idx)))


def _values(k, dtype=np.float32, positive=False):
    shape = _values_shape(k)
    v = np.random.default_rng(k).normal(size=shape)
    if positive:
        v = np.abs(v) + 0.5
    return v.astype(dtype)


def _at_cases(ops, salt, valid=lambda name, op: True):
    """(index kind, op) pairs, sampled by KILN_NUM_GENERATED_CASES (tests/_sampling.py) so
    that every index kind and every op keeps a case; ids as ``kind-op``."""
    cases = [pytest.param(k, op, id=f"{AT_INDEX[k][0]}-{op}")
             for k in range(len(AT_INDEX)) for op in ops if valid(AT_INDEX[k][0], op)]
    return sample_cover(cases, lambda p: p.values, salt=salt)


@pytest.mark.parametrize("k,op", _at_cases(AT_OPS, "indexing.at"))
def test_at(k, op):
    name, index, idx = AT_INDEX[k]
    f = _at_fun(index, len(idx), op)
    x = np.abs(X) + 0.5 if op == "power" else X
    v = _values(k, positive=op in ("power", "divide"))
    ref = jax_result(f"at.{index}.{op}", lambda: jax.jit(f)(jnp.asarray(x), v, *idx), (x, v, idx))
    _assert_same(f(knp.asarray(x), v, *idx), ref, f"eager x.at[{index}].{op}")
    _assert_same(kiln.jit(f)(x, v, *idx), ref, f"jit x.at[{index}].{op}")
    if op in ("set", "add", "subtract", "min", "max") or name == "unique":
        # vmap over the operand, the values and both
        xs = np.stack([x, x + 1.0])
        vs = np.stack([v, v * -1.0])
        nid = (None,) * len(idx)
        for axes in [(0, None) + nid, (None, 0) + nid, (0, 0) + nid]:
            _assert_same(_kv(f, axes)(xs if axes[0] == 0 else x,
                                                   vs if axes[1] == 0 else v, *idx),
                         _jv(f, axes)(xs if axes[0] == 0 else x,
                                                   vs if axes[1] == 0 else v, *idx),
                         f"vmap{axes} x.at[{index}].{op}")
        if idx:
            stacked = [np.stack([a, a[::-1] if np.ndim(a) else a]) for a in idx]
            axes = (None, None) + (0,) * len(idx)
            _assert_same(_kv(f, axes)(x, v, *stacked),
                         _jv(f, axes)(x, v, *stacked),
                         f"vmap indices x.at[{index}].{op}")


GRAD_OPS = ["set", "add", "subtract", "min", "max", "get"]


def _grad_valid(name, op):
    # scatter_mul value gradients need unique indices (as in JAX)
    return op not in ("multiply", "divide") or name in ("unique", "int_array", "oob",
                                                       "separated")


@pytest.mark.parametrize("k,op", _at_cases(GRAD_OPS + ["multiply", "divide"],
                                           "indexing.at_grad", _grad_valid))
def test_at_grad(k, op):
    name, index, idx = AT_INDEX[k]
    if op == "get":
        f = eval(f"lambda x, v, {', '.join('abc'[:len(idx)])}: x.at[{index}].get() * v")
    else:
        f = _at_fun(index, len(idx), op)
    v = _values(k, positive=op == "divide")
    rng = _rng("at_grad", name, op)
    w = rng.normal(size=X.shape if op != "get" else _values_shape(k)).astype(np.float32)
    t = rng.normal(size=X.shape).astype(np.float32)
    tv = rng.normal(size=v.shape).astype(np.float32)

    def loss(mod, fn):
        return lambda x, v, *a: mod.sum(fn(x, v, *a) * w)

    argnums = (0, 1)
    if op in ("multiply", "divide") and name != "unique":
        # concrete repeated indices: JAX raises; kiln checks uniqueness of concrete indices
        argnums = (0,)
    fj = f
    if op in ("multiply", "divide") and argnums == (0, 1):
        # JAX needs the promise unique_indices=True; kiln checks concrete indices itself.
        fj = eval(f"lambda x, v, {', '.join('abc'[:len(idx)])}: "
                  f"x.at[{index}].{op}(v, unique_indices=True)")
    def ref():
        gj = jax.jit(jax.grad(loss(jnp, fj), argnums=argnums))(X, v, *idx)
        if argnums != (0, 1):
            return gj, None
        return gj, jax.jit(lambda x, v, t, tv: jax.jvp(lambda x, v: fj(x, v, *idx), (x, v),
                                                       (t, tv)))(X, v, t, tv)
    gj, pj = jax_result(f"at_grad.{index}.{op}", ref, (X, v, w, t, tv, idx))
    gk = kiln.grad(loss(knp, f), argnums=argnums)(X, v, *idx)
    for a, b in zip(gk, gj):
        _assert_same(a, b, f"grad x.at[{index}].{op}")
    # Traced indices cannot be checked for uniqueness: there kiln needs the promise too.
    gk = kiln.jit(kiln.grad(loss(knp, fj), argnums=argnums))(X, v, *idx)
    for a, b in zip(gk, gj):
        _assert_same(a, b, f"jit(grad) x.at[{index}].{op}")
    if argnums == (0, 1):
        pk = kiln.jvp(lambda x, v: f(x, v, *idx), (X, v), (t, tv))
        for a, b in zip(pk, pj):
            _assert_same(a, b, f"jvp x.at[{index}].{op}")


MODES_INDEX = [("oob", "a", (OOB,)), ("oob_2d", "a, b", (OOB, np.array([1, 9, -9, 0, 4])))]


@pytest.mark.parametrize("k,op,mode", sample_cover(
    [pytest.param(k, op, mode, id=f"{MODES_INDEX[k][0]}-{op}-{mode}")
     for k in range(len(MODES_INDEX)) for op in ["set", "add", "min", "get"]
     for mode in [None, "clip", "drop", "fill", "promise_in_bounds"]],
    lambda p: p.values, salt="indexing.modes"))
def test_modes(k, op, mode):
    name, index, idx = MODES_INDEX[k]
    names = ", ".join("abc"[:len(idx)])
    if op == "get":
        f = eval(f"lambda x, v, {names}: x.at[{index}].get(mode={mode!r})")
    else:
        f = eval(f"lambda x, v, {names}: x.at[{index}].{op}(v, mode={mode!r})")
    fx = eval(f"lambda x, {names}: x[{index}]")
    shape = tuple(jax_result(f"modes_shape.{index}",
                             lambda: list(np.shape(fx(jnp.asarray(X), *idx))), (X, idx)))
    v = _rng("modes", name, op, mode).normal(size=shape).astype(np.float32)
    ref = jax_result(f"modes.{index}.{op}.{mode}", lambda: jax.jit(f)(jnp.asarray(X), v, *idx),
                     (X, v, idx))
    _assert_same(f(knp.asarray(X), v, *idx), ref, f"eager {op} mode={mode}")
    _assert_same(kiln.jit(f)(X, v, *idx), ref, f"jit {op} mode={mode}")
    if op != "get" or mode in ("clip", "fill"):
        g = kiln.grad(lambda x: knp.sum(f(x, v, *idx) * 2.0))(X)
        if op == "min" and mode == "clip":
            # JAX counts clamped duplicates with a dropping scatter here and gets the
            # derivative wrong (1 where an update wins); check the exact one instead.
            won = np.asarray(f(knp.asarray(X), v, *idx)) != X
            np.testing.assert_array_equal(np.asarray(g), np.where(won, 0.0, 2.0))
            return
        gj = jax_result(f"modes_grad.{index}.{op}.{mode}",
                        lambda: jax.jit(jax.grad(lambda x: jnp.sum(f(x, v, *idx) * 2.0)))(X),
                        (X, v, idx))
        _assert_same(g, gj, f"grad {op} mode={mode}")


def test_get_fill_value():
    fvs = (-1.0, 7, np.float32(2.5))
    f = lambda x, i: x.at[i].get(mode="fill")  # noqa: E731
    g = lambda x, i: x.at[i, 1].get(mode="fill", fill_value=0.0)  # noqa: E731
    h = lambda x: x.at[5].get(mode="fill")  # noqa: E731
    xb = XI > 0
    xu = XI.astype(np.uint8)
    ref = jax_result("fill_value", lambda: [
        [jnp.asarray(X).at[OOB].get(mode="fill", fill_value=fv) for fv in fvs],
        f(jnp.asarray(XI), OOB), f(jnp.asarray(xb), OOB), f(jnp.asarray(xu), OOB),
        jax.grad(lambda x: jnp.sum(g(x, OOB)))(X), h(jnp.asarray(X))], (X, XI, OOB))
    for fv, r in zip(fvs, ref[0]):
        fk = lambda x, i, fv=fv: x.at[i].get(mode="fill", fill_value=fv)  # noqa: E731
        _assert_same(fk(knp.asarray(X), OOB), r, f"fill_value={fv}")
        _assert_same(kiln.jit(fk)(X, OOB), r, f"jit fill_value={fv}")
    _assert_same(f(knp.asarray(XI), OOB), ref[1], "int default fill")
    _assert_same(f(knp.asarray(xb), OOB), ref[2], "bool default fill")
    _assert_same(f(knp.asarray(xu), OOB), ref[3], "uint default fill")
    _assert_same(kiln.jit(kiln.grad(lambda x: knp.sum(g(x, OOB))))(X), ref[4], "grad fill")
    _assert_same(h(knp.asarray(X)), ref[5], "static oob fill")


def test_wrap_negative_indices_false():
    for expr in ["x.at[a].get(wrap_negative_indices=False)",
                 "x.at[a].get(wrap_negative_indices=False, mode='fill')",
                 "x.at[a].set(1.0, wrap_negative_indices=False)",
                 "x.at[-1].set(1.0, wrap_negative_indices=False)"]:
        f = eval(f"lambda x, a: {expr}")
        ref = jax_result(f"wrap_negative.{expr}", lambda f=f: f(jnp.asarray(X), OOB), (X, OOB))
        _assert_same(f(knp.asarray(X), OOB), ref, expr)
        _assert_same(kiln.jit(f)(X, OOB), ref, f"jit {expr}")


def test_at_duplicates_set_last_wins_and_apply():
    i = np.array([1, 1, 0, 1, 2, 0], np.int32)
    v = np.arange(6, dtype=np.float32)
    x1 = np.arange(3.0, dtype=np.float32)
    cases = [
        (lambda m, x: x.at[i[:4]].set(v[:4]), "set dup"),
        (lambda m, x: x.at[i].add(v), "add dup"),
        (lambda m, x: x.at[i].multiply(v + 1), "mul dup"),
        (lambda m, x: x.at[i].min(-v), "min dup"),
        (lambda m, x: x.at[i].apply(lambda r: r * 2 + 1), "apply dup"),
        (lambda m, x: x.at[i].apply(m.sin), "apply sin"),
        (lambda m, x: x.at[np.array([0, 0, 5])].apply(lambda r: r - 1), "apply oob"),
        (lambda m, x: x.at[1:].apply(m.exp), "apply slice"),
        (lambda m, x: x.at[x > 0.5].apply(m.exp), "apply mask"),
    ]
    f = lambda x, i: x.at[i].apply(lambda r: r * 2 + 1)  # noqa: E731
    refs = jax_result("duplicates_apply", lambda: [fn(jnp, jnp.asarray(x1)) for fn, _ in cases]
                      + [f(jnp.asarray(x1), i)], (i, v, x1))
    for (fn, what), ref in zip(cases, refs):
        _assert_same(fn(knp, knp.asarray(x1)), ref, what)
        _assert_same(kiln.jit(lambda x, fn=fn: fn(knp, x))(x1), ref, f"jit {what}")
    # traced indices with apply: repeated application in a loop
    _assert_same(kiln.jit(f)(x1, i), refs[-1], "jit traced apply")
    _assert_same(_kv(f, (None, 0))(x1, np.stack([i, i[::-1]])),
                 _jv(f, (None, 0))(x1, np.stack([i, i[::-1]])), "vmap apply")


DTYPE_CASES = [
    ("int_set_float", lambda x: x.at[1].set(3.7), "i"),
    ("int_add_float", lambda x: x.at[np.array([0, 0])].add(1.5), "i"),
    ("int_mul_float", lambda x: x.at[0].multiply(1.5), "i"),
    ("int_divide", lambda x: x.at[0].divide(2), "i"),
    ("int_power", lambda x: x.at[0, 0].power(2), "i"),
    ("uint8_add_wrap", lambda x: x.at[np.array([0, 0])].add(300), "u"),
    ("bool_set", lambda x: x.at[np.array([0, 2])].set(True), "b"),
    ("bool_min", lambda x: x.at[np.array([0, 1])].min(False), "b"),
    ("bool_max", lambda x: x.at[np.array([0, 1])].max(True), "b"),
    ("float_add_int_array", lambda x: x.at[1].add(np.arange(5, dtype=np.int32)), "f"),
    ("float16_add", lambda x: x.at[np.array([1, 1])].add(np.float16(0.1)), "h"),
    ("complex_set", lambda x: x.at[0, 1].set(1j), "c"),
    ("weak_float", lambda x: x.at[0].add(1.0), "w"),
    ("set_list", lambda x: x.at[0, 0].set([1.0, 2.0, 3.0, 4.0, 5.0]), "f"),
    ("mask_set_scalar", lambda x: x.at[x > 0].set(0), "f"),
    ("mask_add_scalar", lambda x: x.at[x > 0].add(100), "i"),
    ("mask_set_values", lambda x: x.at[np.asarray(MASK)].set(np.arange(int(MASK.sum() * 5),
                                                                       dtype=np.float32
                                                                       ).reshape(-1, 5)),
     "f"),
]


def _typed(kind, mod):
    if kind == "i":
        return mod.asarray(XI)
    if kind == "u":
        return mod.asarray(XI.astype(np.uint8))
    if kind == "b":
        return mod.asarray(XI > 0)
    if kind == "h":
        return mod.asarray(X.astype(np.float16))
    if kind == "c":
        return mod.asarray(X.astype(np.complex64))
    if kind == "w":
        return mod.asarray(1.0) * mod.ones((3, 4))
    return mod.asarray(X)


@pytest.mark.parametrize("name,fn,kind", DTYPE_CASES, ids=[c[0] for c in DTYPE_CASES])
def test_at_dtypes(name, fn, kind):
    def jax_ref():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return fn(_typed(kind, jnp))
    ref = jax_result(f"at_dtypes.{name}", jax_ref, (X, XI, MASK))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        out = fn(_typed(kind, knp))
        jitted = kiln.jit(fn)(_typed(kind, knp))
    _assert_same(out, ref, name, exact=True)
    _assert_same(jitted, ref, f"jit {name}", exact=True)
    assert getattr(out, "weak_type", False) == getattr(ref, "weak_type", False), name


def test_unsafe_cast_warns():
    with pytest.warns(FutureWarning, match="scatter inputs have incompatible types"):
        knp.asarray(XI).at[0].add(1.5)


def test_errors():
    x = knp.asarray(X)
    with pytest.raises(NonConcreteBooleanIndexError, match="jnp.where"):
        kiln.jit(lambda x: x[x > 0])(X)
    with pytest.raises(NonConcreteBooleanIndexError):
        kiln.jit(lambda x: x.at[x > 0].set(knp.ones(3)))(X[0, 0, :3])
    with pytest.raises(TypeError, match="Indexer must have integer or boolean type"):
        x[1.0]
    with pytest.raises(TypeError, match="Indexer must have integer or boolean type"):
        kiln.jit(lambda x, i: x[i])(X, np.array([1.0]))
    with pytest.raises(TypeError, match="non-tuple sequence"):
        x[[0, 1]]
    with pytest.raises(IndexError, match="Too many indices"):
        x[0, 0, 0, 0]
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
        x[np.array([0, 1]), np.array([0, 1, 2])]
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
        x.at[np.array([0, 1])].set(knp.ones((1, 2, 4, 5)))
    with pytest.raises(ConcretizationTypeError):
        kiln.jit(lambda x, f: x.at[np.array([5])].get(mode="fill", fill_value=f))(X, 1.0)
    with pytest.raises(ValueError, match="Unknown gather mode"):
        x.at[0].get(mode="wrap")
    with pytest.raises(ValueError, match="Unknown gather mode"):
        x.at[0].set(1.0, mode="wrap")
    with pytest.raises(TypeError, match="bool"):
        knp.asarray(XI > 0).at[np.array([0])].add(True)
    with pytest.raises(ValueError, match="Invalid mode"):
        knp.take(x, np.array([1]), mode="promise_in_bounds")
    with pytest.raises(TypeError, match="Slice size"):
        knp.zeros((0, 3))[np.array([0])]
    with pytest.raises(IndexError, match="slice"):
        kiln.jit(lambda x, i: x[i:i + 1])(X, 1)
    with pytest.raises(NotImplementedError, match="unique_indices"):
        kiln.grad(lambda v: knp.sum(knp.asarray(X).at[np.array([0, 0])].multiply(v)))(
            np.ones((2, 4, 5), np.float32))


def test_jaxprs_use_gather_and_scatter():
    text = str(kiln.make_jaxpr(lambda x, i: x[i])(X, I3))
    assert "gather[" in text and "GatherScatterMode.PROMISE_IN_BOUNDS" in text
    text = str(kiln.make_jaxpr(lambda x, i: x.at[i].add(1.0))(X, I3))
    assert "scatter-add[" in text and "FILL_OR_DROP" in text
    text = str(kiln.make_jaxpr(lambda x, i: x.at[i].set(1.0))(X, I3))
    assert "scatter[" in text
    # the reverse pass of a gather is a scatter-add
    text = str(kiln.make_jaxpr(kiln.grad(lambda x, i: knp.sum(x[i])))(X, I3))
    assert "scatter-add[" in text


def test_take_and_take_along_axis():
    cases = [
        lambda m, x: m.take(x, np.array([0, 5, -1, -9]), axis=1),
        lambda m, x: m.take(x, np.array([[0, 5], [-1, 2]]), axis=2, mode="clip"),
        lambda m, x: m.take(x, np.array([0, 7, -1]), axis=0, mode="wrap"),
        lambda m, x: m.take(x, np.array([0, 70]), fill_value=-2.0),
        lambda m, x: m.take(x, 2, axis=1),
        lambda m, x: m.take_along_axis(x, np.array([[[0], [3], [9], [-1]]]), axis=1),
        lambda m, x: m.take_along_axis(x, np.array([[[0, 4, 7]]]), axis=2, mode="clip"),
        lambda m, x: m.take_along_axis(x, np.array([[[1]], [[0]], [[-3]]]), axis=0,
                                       fill_value=9.0),
        lambda m, x: m.take_along_axis(x[0, 0], np.array([4, 0]), axis=None),
    ]
    for n, fn in enumerate(cases):
        ref, gj = jax_result(f"take.{n}", lambda fn=fn: (
            fn(jnp, jnp.asarray(X)),
            jax.jit(jax.grad(lambda x: jnp.sum(jnp.nan_to_num(fn(jnp, x)) * 3.0)))(X)), X)
        _assert_same(fn(knp, knp.asarray(X)), ref, f"take case {n}", exact=True)
        _assert_same(kiln.jit(lambda x, fn=fn: fn(knp, x))(X), ref, f"jit take case {n}",
                     exact=True)
        gk = kiln.grad(lambda x, fn=fn: knp.sum(knp.nan_to_num(fn(knp, x)) * 3.0))(X)
        _assert_same(gk, gj, f"grad take case {n}")
    # traced indices
    idx = np.array([[[0], [3], [2], [-1]]], np.int32)
    f = lambda m: lambda x, i: m.take_along_axis(x, i, axis=1)  # noqa: E731
    g = lambda m: lambda x, i: m.take(x, i, axis=1)  # noqa: E731
    ref_f, ref_g = jax_result("take_traced", lambda: (f(jnp)(X, idx), g(jnp)(X, I4)),
                              (X, idx, I4))
    _assert_same(kiln.jit(f(knp))(X, idx), ref_f, "jit take_along_axis traced")
    _assert_same(_kv(f(knp), (None, 0))(X, np.stack([idx, idx])),
                 _jv(f(knp), (None, 0))(X, np.stack([idx, idx])),
                 "vmap take_along_axis")
    _assert_same(kiln.jit(g(knp))(X, I4), ref_g, "jit take traced")


def test_eager_fast_paths_are_concrete():
    x = knp.asarray(X)
    for out in [x[I3], x[:, I4], x[MASK], x.at[I3].get(mode="fill"), x[np.array([1]), 2]]:
        assert type(out) is kiln.array.ArrayImpl


# -- lax.gather / lax.scatter* directly ----------------------------------------------------------

def _lax_cases():
    G, S = "GatherDimensionNumbers", "ScatterDimensionNumbers"
    return [
        ("gather", G, ((1,), (0,), (0,)), (5, 4), (3, 1), (1, 4), None),
        ("gather", G, ((), (0, 1), (0, 1)), (4, 5), (6, 2), (1, 1), "clip"),
        ("gather", G, ((2, 3), (), (0, 1)), (6, 7), (2, 3, 2), (2, 3), "fill"),
        ("gather", G, ((2,), (1,), (1,), (0,), (0,)), (3, 5, 4), (3, 2, 1), (1, 1, 4), "fill"),
        ("scatter", S, ((1,), (0,), (0,)), (5, 4), (4, 1), (4, 4), None),
        ("scatter_add", S, ((), (0, 1), (0, 1)), (4, 5), (6, 2), (6,), "clip"),
        ("scatter_mul", S, ((1, 2), (), (0, 1)), (6, 7), (2, 2), (2, 2, 3), None),
        ("scatter_min", S, ((), (1,), (1,), (0,), (0,)), (3, 5), (3, 2, 1), (3, 2), None),
        ("scatter_max", S, ((0,), (1,), (1,)), (4, 6), (3, 1), (2, 3), "promise_in_bounds"),
        ("scatter_sub", S, ((1,), (0,), (0,)), (5, 4), (4, 1), (4, 4), "drop"),
    ]


@pytest.mark.parametrize("case", _lax_cases(), ids=lambda c: f"{c[0]}-{c[6]}-{c[3]}")
def test_lax_gather_scatter_parity(case):
    fn, dn_cls, dn, oshape, ishape, third, mode = case
    rng = np.random.default_rng(len(oshape) * 7 + len(ishape))
    x = rng.normal(size=oshape).astype(np.float32)
    hi = max(oshape) + 2
    idx = rng.integers(-2, hi, size=ishape).astype(np.int32)

    def run(lax_mod):
        d = getattr(lax_mod, dn_cls)(*dn)
        if fn == "gather":
            return lambda x, i: lax_mod.gather(x, i, d, third, mode=mode)
        u = rng_u
        return lambda x, i: getattr(lax_mod, fn)(x, i, u, d, mode=mode)

    rng_u = np.random.default_rng(5).normal(size=third).astype(np.float32) \
        if fn != "gather" else None
    ref = jax_result(f"lax.{fn}.{dn}.{mode}", lambda: run(jax.lax)(x, idx), (x, idx, rng_u))
    _assert_same(run(kiln.lax)(x, idx), ref, f"{fn} {dn} {mode}")
    _assert_same(kiln.jit(run(kiln.lax))(x, idx), ref, f"jit {fn} {dn} {mode}")


def test_lax_index_take_and_scatter_apply():
    x = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    idxs = (np.array([0, 1, -1], np.int32), np.array([2, 5, 1], np.int32))
    _assert_same(kiln.lax.index_take(x, idxs, (0, 2)),
                 jax_result("index_take", lambda: jax.lax.index_take(x, idxs, (0, 2)), (x, idxs)),
                 "index_take")
    dn = (), (0,), (0,)
    i = np.array([[1], [1], [4], [9]], np.int32)
    y = np.arange(6.0, dtype=np.float32)
    k = kiln.lax.scatter_apply(y, i, lambda v: v * 2 + 1,
                               kiln.lax.ScatterDimensionNumbers(*dn), update_shape=(4,))
    j = jax_result("scatter_apply", lambda: jax.lax.scatter_apply(
        y, i, lambda v: v * 2 + 1, jax.lax.ScatterDimensionNumbers(*dn), update_shape=(4,)),
        (y, i))
    _assert_same(k, j, "scatter_apply")
