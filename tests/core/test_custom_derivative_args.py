"""How ``custom_jvp``/``custom_vjp`` functions bind their arguments, against JAX: defaults of
omitted parameters (also ``nondiff_argnums`` ones), keywords moved to their positions,
keyword-only parameters, ``nondiff_argnames``, ``functools.partial``; under ``grad``,
``jit``, ``vmap``."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import kiln

jax = pytest.importorskip("jax")


def _defaults_jvp(m):
    @functools.partial(m.custom_jvp, nondiff_argnums=(1, 2))
    def f(x, a=None, b=None):
        return 2 * x if a is None else a * x + (0 if b is None else b)

    @f.defjvp
    def f_jvp(a, b, primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x, a, b), (2 * t if a is None else a * t)
    return f


def _defaults_vjp(m):
    @functools.partial(m.custom_vjp, nondiff_argnums=(1,))
    def g(x, a=3.0, *, c=5.0):
        return a * x * c

    def g_fwd(x, a=3.0, *, c=5.0):
        return g(x, a), x

    def g_bwd(a, res, ct):
        return (a * ct,)
    g.defvjp(g_fwd, g_bwd)
    return g


def _defaults_vjp2(m):
    @m.custom_vjp
    def h(x, y=2.0):
        return x * y
    h.defvjp(lambda x, y=2.0: (x * y, (x, y)), lambda r, ct: (r[1] * ct, r[0] * ct))
    return h


def _argnames(m):
    @functools.partial(m.custom_jvp, nondiff_argnames=("a",))
    def k(x, a=2.0):
        return a * x
    k.defjvp(lambda a, p, t: (k(p[0], a), a * t[0]))
    return k


CALLS = [
    # (builder, call on (module, function, x))
    ("jvp_all_defaults", _defaults_jvp, lambda m, f, x: f(x)),
    ("jvp_positional", _defaults_jvp, lambda m, f, x: f(x, 4.0)),
    ("jvp_keyword_b", _defaults_jvp, lambda m, f, x: f(x, b=1.0)),
    ("jvp_keywords", _defaults_jvp, lambda m, f, x: f(b=1.0, a=3.0, x=x)),
    ("vjp_kwonly_default", _defaults_vjp, lambda m, f, x: f(x)),
    ("vjp_keyword_a", _defaults_vjp, lambda m, f, x: f(x, a=1.5)),
    ("vjp_both_defaults", _defaults_vjp2, lambda m, f, x: f(x)),
    ("vjp_keyword_diff_arg", _defaults_vjp2, lambda m, f, x: f(1.5, y=x)),
    ("argnames", _argnames, lambda m, f, x: f(x, a=5.0)),
    ("argnames_default", _argnames, lambda m, f, x: f(x)),
]


@pytest.mark.parametrize("name, build, call", CALLS, ids=[c[0] for c in CALLS])
def test_matches_jax_under_transformations(name, build, call):
    kf, jf = build(kiln), build(jax)
    assert kf.nondiff_argnums == jf.nondiff_argnums

    def run(m, f):
        one = lambda x: call(m, f, x)   # noqa: E731
        xs = np.array([1.0, -2.0, 3.0], np.float32)
        return [float(one(3.0)), float(m.grad(one)(3.0)), float(m.jit(m.grad(one))(3.0)),
                np.asarray(m.vmap(m.grad(one))(xs)), np.asarray(m.jit(m.vmap(one))(xs)),
                float(m.grad(m.grad(one))(3.0)) if name.startswith("jvp") else 0.0]

    for k, j in zip(run(kiln, kf), run(jax, jf)):
        np.testing.assert_allclose(k, j, rtol=1e-6)


def test_issue_example_defaults():
    f = _defaults_jvp(kiln)
    assert float(f(3.0)) == 6.0
    assert float(kiln.grad(f)(3.0)) == 2.0


def test_binding_errors_match_jax():
    cases = [
        (_defaults_vjp, lambda f: f(2.0, c=1.0)),          # a keyword-only argument
        (_defaults_jvp, lambda f: f(2.0, 1.0, 2.0, 3.0)),   # too many
        (_defaults_jvp, lambda f: f(2.0, z=1.0)),          # unknown keyword
    ]
    for build, call in cases:
        with pytest.raises(TypeError) as k:
            kiln.grad(lambda x: call(build(kiln)))(1.0)
        with pytest.raises(TypeError) as j:
            jax.grad(lambda x: call(build(jax)))(1.0)
        assert str(k.value).replace("custom_jvp", "X").replace("custom_vjp", "X") == \
            str(j.value).replace("custom_jvp", "X").replace("custom_vjp", "X")


def test_partial_is_opaque():
    for m in (kiln, jax):
        pf = m.custom_jvp(functools.partial(lambda x, y=3.0: x * y))
        pf.defjvp(lambda p, t, pf=pf: (pf(*p), t[0] * 3.0))
        assert float(pf(2.0)) == 6.0 and float(m.grad(pf)(2.0)) == 3.0
        with pytest.raises(TypeError, match="could not be resolved to positions: y"):
            pf(2.0, y=1.0)
