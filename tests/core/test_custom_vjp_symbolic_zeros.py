"""``custom_vjp.defvjp(..., symbolic_zeros=True)`` as in JAX: the forward rule gets
``CustomVJPPrimal(value, perturbed)`` leaves, the backward rule gets ``SymbolicZero`` for
output cotangents that are zero and may return ``SymbolicZero``/``None``; under ``grad``,
``jit``, ``vmap`` and their compositions. Also ``zero_from_primal`` and
``custom_vjp_primal_tree_values``. JAX (when installed) is the oracle for the numbers and
the perturbation flags."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.numpy as kjnp


def _make(jax, jnp, seen):
    cd = jax.custom_derivatives

    @jax.custom_vjp
    def f(x, y):
        return jnp.sin(x) * y, x + y

    def fwd(x, y):
        assert type(x) is cd.CustomVJPPrimal and type(y) is cd.CustomVJPPrimal
        seen.append(("fwd", x.perturbed, y.perturbed))
        xv, yv = cd.custom_vjp_primal_tree_values((x, y))
        return f(xv, yv), (xv, yv)

    def bwd(res, cts):
        x, y = res
        ca, cb = cts
        seen.append(("bwd", type(ca) is cd.SymbolicZero, type(cb) is cd.SymbolicZero))
        gx = 0.0 * x if type(ca) is cd.SymbolicZero else ca * jnp.cos(x) * y
        gy = cd.SymbolicZero(jax.typeof(y)) if type(ca) is cd.SymbolicZero else ca * jnp.sin(x)
        if type(cb) is not cd.SymbolicZero:
            gx = gx + cb
            gy = cb if type(gy) is cd.SymbolicZero else gy + cb
        return gx, gy

    f.defvjp(fwd, bwd, symbolic_zeros=True)
    return f


CASES = {
    # name: (loss over f's outputs, argnums)
    "first_output_wrt_x": (lambda a, b: a.sum(), 0),
    "second_output_wrt_x": (lambda a, b: b.sum(), 0),
    "both_outputs_wrt_xy": (lambda a, b: (a * b).sum(), (0, 1)),
    "first_output_wrt_y": (lambda a, b: a.sum(), 1),
}
HOWS = ["grad", "jit_grad", "grad_jit", "vmap_grad", "jit_vmap_grad"]


def _run(jax, jnp, case, how):
    seen = []
    f = _make(jax, jnp, seen)
    loss_of, argnums = CASES[case]

    def loss(x, y):
        return loss_of(*f(x, y))

    g = jax.grad(loss, argnums=argnums)
    if how == "grad_jit":
        g = jax.grad(jax.jit(loss), argnums=argnums)
    if how.startswith("jit"):
        g = jax.jit(g)
    x = jnp.asarray(np.linspace(0.1, 0.9, 6).reshape(2, 3), jnp.float32)
    y = jnp.asarray(np.linspace(1.0, 2.0, 6).reshape(2, 3), jnp.float32)
    if "vmap" in how:
        g = jax.vmap(g)
    out = g(x, y)
    leaves = jax.tree_util.tree_leaves(out)
    return [np.asarray(v) for v in leaves], sorted(set(seen))


def _expected(case, how):
    jax = pytest.importorskip("jax")
    return _run(jax, jax.numpy, case, how)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_symbolic_zeros_match_jax(case, how):
    got, seen = _run(kiln, kjnp, case, how)
    want, want_seen = _expected(case, how)
    assert seen == want_seen
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_perturbed_flags_follow_argnums():
    seen = []
    f = _make(kiln, kjnp, seen)
    kiln.grad(lambda x, y: f(x, y)[0], argnums=1)(1.0, 2.0)
    assert ("fwd", False, True) in seen and ("bwd", False, True) in seen


def test_without_symbolic_zeros_rules_get_plain_values():
    @kiln.custom_vjp
    def f(x):
        return x * 2.0, x * 3.0

    seen = []
    f.defvjp(lambda x: (seen.append(type(x)) or f(x), None),
             lambda r, cts: (seen.append(tuple(type(c).__name__ for c in cts)) or
                             cts[0] * 2.0 + cts[1] * 3.0,))
    assert float(kiln.grad(lambda x: f(x)[0])(1.0)) == 2.0
    assert seen[0] is not kiln.custom_derivatives.CustomVJPPrimal
    assert "SymbolicZero" not in seen[1]


def test_bwd_symbolic_zero_of_wrong_shape_is_an_error():
    cd = kiln.custom_derivatives

    @kiln.custom_vjp
    def f(x):
        return x

    f.defvjp(lambda x: (x.value, None),
             lambda r, ct: (cd.SymbolicZero(kiln.core.ShapedArray((5,), kjnp.float32)),),
             symbolic_zeros=True)
    with pytest.raises(ValueError, match="SymbolicZero"):
        kiln.grad(lambda x: f(x).sum())(kjnp.ones(3))


def test_zero_from_primal_and_symbolic_zero_attributes():
    cd = kiln.custom_derivatives
    tree = {"a": kjnp.ones((2, 3)), "b": kjnp.arange(3)}
    z = cd.zero_from_primal(tree, symbolic_zeros=True)
    assert type(z["a"]) is cd.SymbolicZero and z["a"].shape == (2, 3)
    assert z["a"].dtype == np.float32 and z["a"].ndim == 2
    assert z["b"].dtype == kiln.dtypes.float0
    dense = cd.zero_from_primal(tree)
    assert np.asarray(dense["a"]).sum() == 0 and dense["a"].dtype == np.float32
    assert dense["b"].dtype == kiln.dtypes.float0
    with pytest.raises(TypeError, match="unexpected leaf type"):
        cd.custom_vjp_primal_tree_values({"a": 1.0})


@pytest.mark.parametrize("how", ["grad", "jit_grad", "vmap_grad"])
def test_non_array_residuals_reach_bwd_unchanged(how):
    """As in JAX, residuals that are not arrays (here Python bools and a string) are
    given to ``bwd`` as ``fwd`` returned them."""
    seen = []

    @kiln.custom_vjp
    def f(x):
        return x * 2.0

    def fwd(x):
        return f(x), (x, True, "tag")

    def bwd(res, ct):
        x, flag, tag = res
        seen.append((type(flag), tag))
        return (ct * 2.0 if flag is True else ct,)

    f.defvjp(fwd, bwd)
    g = kiln.grad(lambda x: f(x).sum())
    if how == "jit_grad":
        g = kiln.jit(g)
    x = jnp.ones(3)
    out = kiln.vmap(g)(jnp.ones((2, 3))) if how == "vmap_grad" else g(x)
    np.testing.assert_allclose(out, np.full(np.shape(out), 2.0))
    assert seen and all(s == (bool, "tag") for s in seen)


@pytest.mark.parametrize("how", ["grad", "jit_grad"])
def test_bwd_none_matches_none_inside_arguments(how):
    """A ``None`` in the bwd output stands for a whole subtree of zeros, and matches a
    ``None`` inside the argument (a pytree with no leaves there), as in JAX."""
    @kiln.custom_vjp
    def f(t):
        a, _, b = t
        return a * b

    def fwd(t):
        return f(t), t

    def bwd(t, ct):
        a, _, b = t
        return ((ct * b, None, None),)

    f.defvjp(fwd, bwd)
    g = kiln.grad(lambda a, b: f((a, None, b)), argnums=(0, 1))
    if how == "jit_grad":
        g = kiln.jit(g)
    ga, gb = g(jnp.float32(2.0), jnp.float32(3.0))
    assert float(ga) == 3.0 and float(gb) == 0.0
    want = _jax_none_case()
    assert (float(ga), float(gb)) == want


def _jax_none_case():
    jax = pytest.importorskip("jax")

    @jax.custom_vjp
    def f(t):
        a, _, b = t
        return a * b

    f.defvjp(lambda t: (f(t), t), lambda t, ct: ((ct * t[2], None, None),))
    ga, gb = jax.grad(lambda a, b: f((a, None, b)), argnums=(0, 1))(2.0, 3.0)
    return float(ga), float(gb)


def test_symbolic_zeros_survive_vmap_inside_grad():
    # JAX's custom_api_test: a symbolic_zeros rule under vmap sees SymbolicZero (of one
    # element's type) for an unperturbed input / unused output, not batched zeros.
    from functools import partial

    from kiln.custom_derivatives import SymbolicZero
    seen = []

    @kiln.custom_jvp
    def f(x, y):
        return x * y

    @partial(f.defjvp, symbolic_zeros=True)
    def f_jvp(primals, tangents):
        seen.append(tangents[1])
        return f(*primals), tangents[1]

    kiln.grad(lambda x, y: kiln.vmap(f)(x, y).sum())(jnp.ones(3), jnp.ones(3))
    assert type(seen[-1]) is SymbolicZero and seen[-1].shape == ()

    @kiln.custom_vjp
    def g(x, y):
        return x, y

    def fwd(x, y):
        assert x.perturbed and not y.perturbed
        return g(x.value, y.value), None

    def bwd(_, ct):
        seen.append(ct[1])
        return ct

    g.defvjp(fwd, bwd, symbolic_zeros=True)
    for wrap in (lambda h: h, kiln.jit):
        out = kiln.grad(lambda x, y: wrap(kiln.vmap(g))(x, y)[0].sum())(jnp.ones(3), jnp.ones(3))
        np.testing.assert_array_equal(out, np.ones(3))
        assert type(seen[-1]) is SymbolicZero and seen[-1].shape == ()
