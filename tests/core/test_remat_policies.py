"""``checkpoint`` policies: the outputs of equations the policy saves are residuals of
the forward pass; the backward pass recomputes only the rest (JAX's counts of ``sin``/
``cos``/``dot_general`` in the linearized jaxpr); ``checkpoint_name`` binds ``name``;
debug prints are replayed as JAX's rule says."""
import contextlib
import io

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import ad_checkpoint, lax
from kiln.ad_checkpoint import checkpoint_name


def _lin_text(f, x):
    return str(kiln.make_jaxpr(kiln.linearize(f, x)[1])(x))


def test_policies_decide_what_is_recomputed():
    g = lambda x: jnp.sin(jnp.sin(x))   # noqa: E731
    save_cos = lambda prim, *_, **__: str(prim) == "cos"   # noqa: E731
    save_sin = lambda prim, *_, **__: str(prim) == "sin"   # noqa: E731
    t = _lin_text(kiln.checkpoint(g, policy=save_cos), 1.)
    assert t.count(" sin ") == 0 and t.count(" cos ") == 0
    t = _lin_text(kiln.checkpoint(g, policy=save_sin), 1.)
    assert t.count(" sin ") == 0 and t.count(" cos ") == 2
    t = _lin_text(kiln.checkpoint(g), 1.)
    assert t.count(" sin ") == 1 and t.count(" cos ") == 2
    t = _lin_text(kiln.checkpoint(g, policy=ad_checkpoint.everything_saveable), 1.)
    assert t.count(" sin ") == 0 and t.count(" cos ") == 0
    for pol in (save_cos, save_sin, None):
        f = kiln.checkpoint(g, policy=pol)
        np.testing.assert_allclose(kiln.grad(f)(1.), np.cos(np.sin(1.)) * np.cos(1.),
                                   rtol=1e-6)


def test_checkpoint_dots():
    @kiln.checkpoint
    def plain(x):
        return x

    def f(x):
        for _ in range(3):
            x = jnp.sin(jnp.dot(x, x, precision=lax.Precision.HIGHEST))
        return x
    c = kiln.checkpoint(f, policy=kiln.checkpoint_policies.checkpoint_dots)
    t = _lin_text(c, jnp.ones((2, 2)))
    assert t.count(" sin ") == 2 and t.count(" dot_general") == 6
    x = jnp.ones((2, 2)) * 0.3
    np.testing.assert_allclose(kiln.grad(lambda x: c(x).sum())(x),
                               kiln.grad(lambda x: f(x).sum())(x), rtol=1e-5)


def test_names_and_save_only_these_names():
    sin = lambda x: checkpoint_name(jnp.sin(x), "sin")   # noqa: E731
    f = kiln.checkpoint(lambda x: sin(sin(x) * sin(x)),
                        policy=kiln.checkpoint_policies.save_only_these_names("sin"))
    t = _lin_text(f, 1.)
    assert " sin " not in t and " cos " in t
    assert "name[name=sin]" in str(kiln.make_jaxpr(sin)(1.))
    np.testing.assert_allclose(kiln.jit(sin)(1.), np.sin(1.), rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(sin)(jnp.ones(3)), np.sin(np.ones(3)), rtol=1e-6)
    np.testing.assert_allclose(kiln.grad(f)(1.), kiln.grad(lambda x: jnp.sin(
        jnp.sin(x) ** 2))(1.), rtol=1e-6)


def test_debug_print_replayed_as_jax_decides():
    def f_(x):
        y = checkpoint_name(x + 1., "y")
        z = checkpoint_name(y * 2., "z")
        kiln.debug.print("y: {}, z: {}", y, z)
        return checkpoint_name(jnp.exp(z), "w")

    def but(*names):
        return lambda prim, *_, **p: (p["name"] not in names
                                      if prim is ad_checkpoint.name_p else True)

    for policy, times in [(ad_checkpoint.everything_saveable, 1),
                          (ad_checkpoint.nothing_saveable, 2), (None, 2),
                          (but("y"), 1), (but("y", "z"), 2)]:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            kiln.grad(kiln.checkpoint(f_, policy=policy))(2.)
        assert buf.getvalue() == "y: 3.0, z: 6.0\n" * times, policy


def test_saved_residuals_follows_the_policy():
    from kiln.ad_checkpoint import saved_residuals

    def f(x):
        y = checkpoint_name(jnp.multiply(2., 2.), "y")
        z = checkpoint_name(jnp.multiply(2., 2.), "z")
        return ((x * y) * z) * jnp.multiply(2., 2.)
    pol = kiln.checkpoint_policies.save_only_these_names
    assert len(saved_residuals(kiln.checkpoint(f, policy=pol("y", "z")), 1.)) == 2
    assert len(saved_residuals(kiln.checkpoint(f, policy=pol("z")), 1.)) == 1
    assert len(saved_residuals(kiln.checkpoint(f, policy=pol()), 1.)) == 0
    res = saved_residuals(lambda x, y: jnp.sin(x[0]) * y, (2., 3.), y=4.)
    srcs = [s for _, s in res]
    assert "from the argument y" in srcs and any(s.startswith("output of cos") for s in srcs)
    zeros = kiln.checkpoint(lambda x: jnp.zeros_like(x) * x, policy=lambda *_, **__: False)
    assert saved_residuals(zeros, jnp.ones((2, 2))) == []
