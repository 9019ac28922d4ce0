"""NumPyro on kiln: the causes of NumPyro test failures, fixed in kiln, checked without
NumPyro (multiplying by a boolean array as XLA does, shapes given as any iterable), and
NumPyro's eight-schools example through ``kiln.as_jax`` in a subprocess (skipped when
NumPyro is not installed)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln as jax
import kiln.numpy as jnp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

INF, NAN = np.inf, np.nan


# ---------------------------------------------------------------------------------------------
# x * boolean array: XLA rewrites x * convert(b) into select(b, x, 0) (JAX's values).

def _xb():
    return (jnp.array([INF, NAN, 1.0, -INF], jnp.float32),
            jnp.array([False, False, True, True]))


def test_multiply_by_bool_array_is_select():
    x, b = _xb()
    want = np.array([0.0, 0.0, 1.0, -INF], np.float32)
    np.testing.assert_array_equal(x * b, want)
    np.testing.assert_array_equal(b * x, want)
    np.testing.assert_array_equal(x * np.asarray(b), want)
    assert (x * b).dtype == jnp.float32 and not (x * b).weak_type
    assert float(INF * jnp.array(False)) == 0.0  # scalar times a scalar bool array
    # A scalar other operand broadcasts: still a select (XLA: mul(broadcast(x), convert(b))).
    np.testing.assert_array_equal(jnp.float32(INF) * b, [0.0, 0.0, INF, INF])
    # complex: 0 as well.
    assert complex(jnp.array([1 + 1j * INF])[0] * jnp.array([False])[0]) == 0


def test_multiply_by_bool_constant_or_broadcast_bool_multiplies():
    x, b = _xb()
    # A Python/NumPy bool scalar is a constant: inf * 0 is NaN, as on JAX.
    assert np.isnan(np.asarray(x * False)[[0, 1, 3]]).all()
    assert np.isnan(np.asarray(x * np.bool_(False))[[0, 1, 3]]).all()
    # A bool array that must broadcast to the result multiplies (XLA sees a broadcast).
    assert np.isnan(np.asarray(x * jnp.array(False))[0])
    # bfloat16 is computed in float32 by XLA's CPU code: no rewrite, NaN.
    assert np.isnan(float(jnp.asarray(INF, jnp.bfloat16) * jnp.array(False)))
    assert float(jnp.float16(INF) * jnp.array(False)) == 0.0
    # Integers and booleans are unchanged.
    assert int(jnp.int32(5) * jnp.array(True)) == 5
    assert (jnp.array([True, False]) * jnp.array([True, True])).dtype == jnp.bool_


def test_multiply_by_bool_array_under_transformations():
    x, b = _xb()
    want = np.array([0.0, 0.0, 1.0, -INF], np.float32)
    np.testing.assert_array_equal(jax.jit(lambda x, b: x * b)(x, b), want)
    np.testing.assert_array_equal(jax.vmap(lambda x, b: x * b)(x, b), want)
    np.testing.assert_array_equal(jax.grad(lambda x: jnp.sum(x * b))(x), [0, 0, 1, 1])
    y = jnp.array([2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(jax.grad(lambda y: jnp.sum(y * b * y))(y), [0, 0, 8, 10])


def test_binary_cross_entropy_pattern():
    """NumPyro's binary_cross_entropy_with_logits: ``inf * logical_xor(y, x > 0)``."""
    def bce(x, y):
        x = jnp.asarray(x, jnp.float32)
        ok = jnp.isfinite(x)
        sx = jnp.where(ok, x, jnp.zeros_like(x))
        usual = jnp.clip(sx, 0) + jnp.log1p(jnp.exp(-jnp.abs(sx))) - sx * y
        return jnp.where(ok, usual, jnp.inf * jnp.logical_xor(y, x > 0))
    assert float(bce(-INF, 0)) == 0 and float(bce(INF, 1)) == 0
    assert float(bce(INF, 0)) == INF and float(bce(-INF, 1)) == INF
    assert float(jax.jit(bce)(-INF, 0)) == 0


# ---------------------------------------------------------------------------------------------
# A shape may be any iterable of dimensions (TensorFlow Probability's TensorShape).

class _Shape:
    """An iterable shape that is neither a tuple nor a list (as TFP's ``TensorShape``)."""

    def __init__(self, dims):
        self.dims = list(dims)

    def __iter__(self):
        return iter(self.dims)

    def __len__(self):
        return len(self.dims)


def test_shape_from_any_iterable():
    assert jnp.broadcast_to(jnp.float32(1), _Shape([])).shape == ()
    assert jnp.broadcast_to(jnp.arange(3), _Shape([2, 3])).shape == (2, 3)
    assert jnp.zeros(_Shape([4])).shape == (4,)
    assert jnp.reshape(jnp.arange(6), _Shape([3, 2])).shape == (3, 2)
    out = jax.jit(lambda x: jnp.broadcast_to(x, _Shape([2, 3])))(jnp.arange(3.0))
    assert out.shape == (2, 3)
    assert jax.vmap(lambda x: jnp.broadcast_to(x, _Shape([2])))(jnp.arange(3.0)).shape == (3, 2)
    with pytest.raises(TypeError, match="Shapes must be"):
        jnp.zeros("ab")
    with pytest.raises(TypeError, match="Shapes must be"):
        jnp.zeros(_Shape([1.5]))


# ---------------------------------------------------------------------------------------------
# NumPyro itself, through the alias (subprocesses; skipped without NumPyro).

def _run(args, timeout=600):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)


def _means(out):
    rows = dict(line.split(None, 1) for line in out.strip().splitlines()[:3])
    return float(rows["mu"]), float(rows["tau"]), [float(v) for v in rows["theta"].split()]


@pytest.mark.slow
def test_numpyro_eight_schools_example():
    pytest.importorskip("numpyro")
    args = ["examples/numpyro_eight_schools.py", "--warmup", "200", "--samples", "200"]
    k = _run(["-m", "kiln.as_jax", *args])
    assert k.returncode == 0, k.stdout + k.stderr
    mu, tau, theta = _means(k.stdout)
    # The posterior (Gelman et al.): mu ~ 4.4 (sd 3.3), tau ~ 3.6 (sd 3.2).
    assert 2.0 < mu < 7.0 and 1.5 < tau < 6.5 and len(theta) == 8
    if os.environ.get("KILN_NO_JAX_ORACLE") or not _has_jax():
        return
    j = _run(args)
    assert j.returncode == 0, j.stderr
    jmu, jtau, jtheta = _means(j.stdout)
    # Same random bits; the chains part ways at rounding level (kiln's eager float32
    # exp/log are NumPy's), so the means agree within Monte Carlo error.
    assert abs(mu - jmu) < 1.0 and abs(tau - jtau) < 1.0
    assert max(abs(a - b) for a, b in zip(theta, jtheta)) < 1.5


def _has_jax():
    import importlib.util
    return importlib.util.find_spec("jax") is not None


def test_special_functions_carry_jax_names():
    """pytest names parametrized cases by ``__name__`` (NumPyro's ``[xlogy]`` ids)."""
    import kiln.scipy.special as sp
    for name in ("xlogy", "xlog1py", "logit", "zeta"):
        f = getattr(sp, name)
        assert f.__name__ == name and f.__qualname__ == name
    np.testing.assert_allclose(sp.xlogy(2.0, 3.0), 2 * np.log(3.0), rtol=1e-6)
    assert float(jax.grad(sp.xlogy, argnums=1)(2.0, 4.0)) == 0.5


def test_slogdet_sums_the_log_pivots_as_jax_compiled_slogdet():
    """``jnp.linalg.slogdet`` is one compiled program, as JAX's jitted function: called
    eagerly its log-pivot sum is the compiled reduction's (XLA's order, JAX's bits), not
    NumPy's pairwise sum (which gives -1.1324883e-06 here). NumPyro's
    ``test_bijective_transforms[HaarTransform(dim=-2)]`` compares this against 0 at
    ``atol=1e-6``: JAX -7.748604e-07, pairwise -1.13e-06."""
    from kiln.compiler.build import build
    if build.find_compiler() is None:
        pytest.skip("no C compiler: programs run on the reference backend (NumPy's sums)")
    d = np.array([0.70710677] * 5 + [0.9999999] * 5 + [0.99999994] * 5 + [-1.4142135] * 5,
                 np.float32)
    sign, logdet = jnp.linalg.slogdet(np.diag(d))
    assert float(sign) == -1.0
    assert np.asarray(logdet).view(np.int32) == -1253048320     # -7.748604e-07, JAX's bits
