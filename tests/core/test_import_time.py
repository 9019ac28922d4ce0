"""What ``import kiln`` imports (issue 14): SciPy is imported where it is used, not by
``import kiln, kiln.numpy``. Structural checks in fresh interpreters, not timings (the
timings are ``benchmarks/bench_import.py``)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code):
    """Runs ``code`` in a fresh interpreter (this checkout's kiln); returns what it prints
    as JSON on its last line."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _scipy_modules_code(stmt):
    return (f"import json, sys\n{stmt}\n"
            "print(json.dumps(sorted(m for m in sys.modules\n"
            "                        if m == 'scipy' or m.startswith('scipy.'))))")


def test_import_kiln_does_not_import_scipy():
    assert _run(_scipy_modules_code("import kiln, kiln.numpy")) == []


def test_import_kiln_submodules_do_not_import_scipy():
    # The modules whose functions use SciPy on their first call import it lazily too.
    stmt = ("import kiln, kiln.numpy, kiln.lax, kiln.nn, kiln.random, kiln.scipy\n"
            "import kiln.lax.linalg, kiln.lax.elementwise, kiln.numpy.linalg")
    assert _run(_scipy_modules_code(stmt)) == []


def test_first_use_imports_scipy_and_computes():
    # Eager special functions compute on first call and agree with SciPy; kiln.scipy's
    # submodules resolve on attribute access. (With the native kernels these impls run
    # XLA's formulas and need no SciPy at all; SciPy is imported only by the fallbacks.)
    code = """
import json, sys
import numpy as np
import kiln, kiln.numpy as jnp
from kiln import lax
before = 'scipy.special' in sys.modules
x = np.linspace(0.1, 3.0, 7).astype(np.float32)
vals = {
    'erf': np.asarray(lax.erf(x)).tolist(),
    'lgamma': np.asarray(lax.lgamma(x)).tolist(),
    'digamma': np.asarray(lax.digamma(x)).tolist(),
    'i1e': np.asarray(lax.bessel_i1e(x)).tolist(),
    'det': float(jnp.linalg.det(jnp.array([[2.0, 1.0], [1.0, 3.0]]))),
    'ndtr': np.asarray(kiln.scipy.special.ndtr(x)).tolist(),
    'jit_erf': np.asarray(kiln.jit(lax.erf)(x)).tolist(),
    'grad_lgamma': float(kiln.grad(lambda t: lax.lgamma(t))(2.5)),
}
print(json.dumps({'before': before, 'after': 'scipy.special' in sys.modules, **vals}))
"""
    import scipy.special as sps
    r = _run(code)
    assert r["before"] is False
    x = np.linspace(0.1, 3.0, 7).astype(np.float32)
    np.testing.assert_allclose(r["erf"], sps.erf(x), rtol=1e-6)
    np.testing.assert_allclose(r["jit_erf"], sps.erf(x), rtol=1e-6)
    np.testing.assert_allclose(r["lgamma"], sps.gammaln(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["digamma"], sps.psi(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["i1e"], sps.i1e(x), rtol=1e-5)
    np.testing.assert_allclose(r["ndtr"], sps.ndtr(x), rtol=1e-6)
    np.testing.assert_allclose(r["det"], 5.0, rtol=1e-6)
    np.testing.assert_allclose(r["grad_lgamma"], sps.psi(2.5), rtol=1e-5)


def test_lazy_names_match_jax():
    # kiln.nn.logsumexp is kiln.scipy.special.logsumexp (resolved on first access), as in
    # JAX; both appear in dir().
    import kiln
    import kiln.nn
    import kiln.scipy
    assert "logsumexp" in dir(kiln.nn)
    for name in ("linalg", "optimize", "special", "stats", "signal"):
        assert name in dir(kiln.scipy)
    from kiln.nn.functions import logsumexp as f_lse
    from kiln.scipy.special import logsumexp
    assert kiln.nn.logsumexp is logsumexp and f_lse is logsumexp
    with pytest.raises(AttributeError):
        kiln.nn.no_such_function  # noqa: B018
    with pytest.raises(AttributeError):
        kiln.scipy.no_such_module  # noqa: B018
    pytest.importorskip("jax")
    import jax
    import jax.scipy.special
    assert jax.nn.logsumexp is jax.scipy.special.logsumexp
    x = np.array([[0.5, -1.0, 2.0], [3.0, 0.0, -2.0]], np.float32)
    np.testing.assert_allclose(np.asarray(kiln.nn.logsumexp(x, axis=1)),
                               np.asarray(jax.nn.logsumexp(x, axis=1)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.nn.logmeanexp(x, axis=0)),
                               np.asarray(jax.nn.logmeanexp(x, axis=0)), rtol=1e-6)
