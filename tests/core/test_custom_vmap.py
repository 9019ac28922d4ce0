"""``jax.custom_batching`` (``custom_vmap``, ``sequential_vmap``) and ``closure_convert``:
JAX's behaviour (its ``CustomVmapTest``), with the expected values computed here."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.custom_batching import custom_vmap, sequential_vmap


def _sin_with_cos_rule(log=None):
    @custom_vmap
    def f(x):
        return jnp.sin(x)

    @f.def_vmap
    def rule(axis_size, in_batched, xs):
        if log is not None:
            log.append((axis_size, in_batched))
        return jnp.cos(xs), in_batched[0]

    return f


def test_eager_jit_and_vmap_use_the_function_or_the_rule():
    log = []
    f = _sin_with_cos_rule(log)
    x, xs = jnp.array(1.), jnp.arange(3.)
    np.testing.assert_allclose(f(x), np.sin(1.), rtol=1e-6)
    np.testing.assert_allclose(kiln.jit(f)(x), np.sin(1.), rtol=1e-6)
    assert log == []
    want = np.cos(np.arange(3.))
    np.testing.assert_allclose(kiln.vmap(f)(xs), want, rtol=1e-6)
    np.testing.assert_allclose(kiln.jit(kiln.vmap(f))(xs), want, rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(kiln.jit(f))(xs), want, rtol=1e-6)
    size, batched = log[0]
    assert type(size) is int and size == 3
    assert type(batched) is list and batched == [True]


def test_mixed_batching_moves_batch_axis_to_front_and_reports_it():
    log = []

    @custom_vmap
    def dot(u, v):
        return u @ v

    @dot.def_vmap
    def rule(axis_size, in_batched, u, v):
        log.append((in_batched, u.shape, v.shape))
        ub, vb = in_batched
        out = jnp.sum(u * v, axis=1) if ub and vb else (u @ v if ub else v @ u)
        return out, ub or vb

    ones = jnp.ones
    np.testing.assert_allclose(kiln.vmap(dot, in_axes=(1, None))(ones((3, 4)), ones(3)),
                               np.full(4, 3.))
    np.testing.assert_allclose(kiln.vmap(dot, in_axes=(None, 0))(ones(3), ones((4, 3))),
                               np.full(4, 3.))
    assert log == [([True, False], (4, 3), (3,)), ([False, True], (3,), (4, 3))]


def test_pytree_arguments_with_nones_and_kwargs():
    @custom_vmap
    def f(t):
        return kiln.tree.map(jnp.sin, t)

    @f.def_vmap
    def rule(axis_size, in_batched, t):
        assert in_batched == [(True, [True, None], None)]
        return kiln.tree.map(jnp.cos, t), in_batched[0]

    xs = jnp.arange(3.)
    out = kiln.vmap(f)((xs, [xs + 1, None], None))
    np.testing.assert_allclose(out[1][0], np.cos(np.arange(3.) + 1), rtol=1e-6)
    assert out[1][1] is None and out[2] is None
    np.testing.assert_allclose(kiln.vmap(lambda t: f(t=t))((xs, [xs, None], None))[0],
                               np.cos(np.arange(3.)), rtol=1e-6)


def test_rule_structure_errors_name_the_rule():
    @custom_vmap
    def f(x):
        return jnp.sin(x)

    @f.def_vmap
    def my_rule(axis_size, in_batched, xs):
        return [jnp.sin(xs), jnp.cos(xs)], in_batched

    with pytest.raises(ValueError, match=r"output batching specification returned by custom "
                                         r"vmap rule \(my_rule\) do not match"):
        kiln.vmap(f)(jnp.arange(3.))

    @f.def_vmap
    def my_rule2(axis_size, in_batched, xs):
        return [jnp.sin(xs)], in_batched

    with pytest.raises(ValueError, match=r"rule \(my_rule2\) does not match that of original "
                                         "custom-vmapped function"):
        kiln.vmap(f)(jnp.arange(3.))


def test_missing_rule_and_unresolvable_arguments():
    @custom_vmap
    def f(x, y, *, z=None):
        return jnp.sin(x) * y

    with pytest.raises(AttributeError, match="No batching rule defined for custom_vmap "
                                             "function f using def_vmap"):
        f(0.5, 1.)
    f.def_vmap(lambda n, b, x, y: (x, True))
    with pytest.raises(TypeError, match=r"custom_vmap-decorated function f(.*)\n"
                                        "missing a required argument: 'y'"):
        f(0.5)
    with pytest.raises(TypeError, match="could not be resolved to positions: z"):
        f(0.5, 0.1, z=1.0)


def test_jvp_of_rule_under_vmap_mutual_and_extra_batching():
    f = _sin_with_cos_rule()
    xs, txs = jnp.arange(3.), jnp.arange(3.) * 2.
    f_jvp = lambda x, t: kiln.jvp(f, [x], [t])  # noqa: E731
    # eager: the function's own derivative
    y, ty = f_jvp(jnp.array(1.), jnp.array(2.))
    np.testing.assert_allclose(ty, np.cos(1.) * 2, rtol=1e-6)
    # primal and tangent batched together: the rule, differentiated
    ys, tys = kiln.vmap(f_jvp)(xs, txs)
    np.testing.assert_allclose(ys, np.cos(np.arange(3.)), rtol=1e-6)
    np.testing.assert_allclose(tys, -np.sin(np.arange(3.)) * np.arange(3.) * 2, rtol=1e-6)
    ys, tys = kiln.jvp(kiln.vmap(f), [xs], [txs])
    np.testing.assert_allclose(tys, -np.sin(np.arange(3.)) * np.arange(3.) * 2, rtol=1e-6)
    # tangents batched only: the rule sees an unbatched primal; the primal stays unbatched
    y, tys = kiln.vmap(f_jvp, in_axes=(None, 0), out_axes=(None, 0))(jnp.array(1.), txs)
    np.testing.assert_allclose(y, np.cos(1.), rtol=1e-6)
    np.testing.assert_allclose(tys, -np.sin(1.) * np.arange(3.) * 2, rtol=1e-6)
    # jacfwd: extra-batched tangents too
    x = jnp.arange(3.) + .72
    np.testing.assert_allclose(kiln.jacfwd(f)(x), -np.diag(np.sin(np.arange(3.) + .72)),
                               rtol=1e-6)


def test_grad_needs_custom_vjp_and_composes_with_one():
    f = _sin_with_cos_rule()
    with pytest.raises(ValueError, match="Linearization failed to produce known values for "
                                         "all output primals"):
        kiln.grad(f)(0.5)

    @kiln.custom_vjp
    @custom_vmap
    def g(x, y):
        return jnp.sin(x) * y

    @g.def_vmap       # forwarded through custom_vjp to the custom_vmap object
    def g_rule(axis_size, in_batched, xs, ys):
        return jnp.cos(xs) * ys, True

    g.defvjp(lambda x, y: (g(x, y), (jnp.cos(x), jnp.sin(x), y)),
             lambda res, ct: (res[0] * ct * res[2], res[1] * ct))
    xs, ys = jnp.linspace(0, 1, 5), jnp.linspace(-0.1, 0.1, 5)
    np.testing.assert_allclose(kiln.vmap(g)(xs, ys), np.cos(xs) * ys, rtol=1e-6)
    np.testing.assert_allclose(kiln.grad(g)(0.3, 2.), np.cos(0.3) * 2, rtol=1e-6)


def test_methods_forward_through_wrappers():
    @custom_vmap
    @kiln.custom_jvp
    def f(x):
        return 2. * x

    f.def_vmap(lambda n, b, xs: (2. * xs, b[0]))
    f.defjvp(lambda p, t: (2. * p[0], 2. * t[0]))
    assert callable(f.defjvp) and callable(f.def_vmap)


def test_staged_equation_and_sequential_vmap_is_a_lax_map():
    f = _sin_with_cos_rule()
    assert "custom_vmap_call" in str(kiln.make_jaxpr(f)(1.))
    assert "custom_vmap_call" not in str(kiln.make_jaxpr(kiln.vmap(f))(jnp.arange(3.)))

    @sequential_vmap
    def g(x, y):
        return x + y

    xs = jnp.arange(3.)
    got = kiln.make_jaxpr(kiln.vmap(g, in_axes=(0, None)))(xs, 4.)
    want = kiln.make_jaxpr(lambda xs, y: lax.map(lambda x: g(x, y), xs))(xs, 4.)
    assert str(got) == str(want)
    np.testing.assert_allclose(kiln.vmap(g, in_axes=(0, None))(xs, 4.), np.arange(3.) + 4)


def test_lax_map_batch_size_zero_or_larger_than_the_axis_vmaps_everything():
    x = np.arange(16)
    for bs in (0, 1, 4, 16, 32):
        out = lax.map(lambda d: {"b": d["a"] ** 2}, {"a": x}, batch_size=bs)
        np.testing.assert_array_equal(out["b"], x ** 2)


def test_closure_convert_hoists_differentiable_closed_over_tracers():
    def outer(x):
        def g(y):
            return x * y + jnp.arange(2.)[0] + 3   # x: a tracer; arange: a constant
        conv, consts = kiln.closure_convert(g, 1.)
        assert len(consts) == 1 and consts[0] is x
        return conv(2., *consts)

    np.testing.assert_allclose(kiln.grad(outer)(1.5), 2.)
    conv, consts = kiln.closure_convert(lambda y: y * 2, 1.)
    assert consts == [] and float(conv(3.)) == 6.

    def pytree_mismatch(x):
        conv, consts = kiln.closure_convert(lambda t: t[0] * x, (1., 2.))
        return conv(1., *consts)

    with pytest.raises(TypeError, match="must have the same Pytree structure as the example "
                                        "arguments"):
        kiln.grad(pytree_mismatch)(1.)


def test_custom_rules_closing_over_a_vmapped_value():
    # JAX's custom_api_test (test_closure_with_vmap2, test_closed_over_vmap_tracer): the
    # custom function and its rules use a value batched by an enclosing vmap while their
    # own arguments are not batched.
    def h(z):
        def f(x):
            @kiln.custom_jvp
            def g(y):
                return x * y

            @g.defjvp
            def g_jvp(primals, tangents):
                return x * primals[0], x * tangents[0]

            return g(z)
        return kiln.vmap(f)(jnp.arange(3.))

    for wrap in (lambda f: f, kiln.jit):
        p, t = wrap(lambda z: kiln.jvp(h, (z,), (jnp.float32(2.),)))(jnp.float32(1.))
        np.testing.assert_allclose(p, [0., 1., 2.])
        np.testing.assert_allclose(t, [0., 2., 4.])

    def outer(x):
        @kiln.custom_vjp
        def f(y):
            return x * y

        f.defvjp(lambda y: (f(y), jnp.cos(y)), lambda cos_y, g: (cos_y * g,))
        return f

    xs = np.arange(3.)
    np.testing.assert_allclose(kiln.vmap(lambda x: outer(x)(3.))(xs), xs * 3)
    np.testing.assert_allclose(kiln.jit(kiln.vmap(lambda x: outer(x)(3.)))(xs), xs * 3)
    g = kiln.vmap(kiln.grad(lambda y, x: outer(x)(y)), in_axes=(None, 0))(3., xs)
    np.testing.assert_allclose(g, np.full(3, np.cos(3.)), rtol=1e-6)    # the custom rule
