"""Issue 24's sampled library check: a small program per library (Equinox, dm-haiku,
Distrax with TFP, Diffrax, BlackJAX; ``examples/ecosystem/``) runs unmodified through
``python -m kiln.as_jax`` and gives JAX's numbers.

Each program prints its results as JSON on its last line; it is run once on kiln and
once on JAX (separate processes: kiln's alias and the real JAX cannot share one) and the
numbers are compared. Tolerances: float32 programs agree to a few ulps step by step;
an adaptive ODE solver and MCMC amplify those ulps, hence their wider bounds. Skipped
when the library (or JAX, the oracle) is not installed: ``pip install -e ".[ecosystem]"``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "ecosystem")

# (example, modules it needs, rtol, atol)
CASES = [
    ("equinox_regression", ["equinox"], 1e-5, 1e-6),
    ("haiku_classifier", ["haiku"], 1e-5, 1e-6),
    ("distrax_flows", ["distrax", "tensorflow_probability"], 1e-5, 1e-6),
    ("diffrax_ode", ["diffrax"], 1e-4, 1e-5),
    ("blackjax_nuts", ["blackjax"], 1e-3, 1e-4),
]


def _run(example: str, on_kiln: bool) -> dict:
    script = os.path.join(EXAMPLES, example + ".py")
    argv = [sys.executable, "-m", "kiln.as_jax", script] if on_kiln else [sys.executable, script]
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"{example} on {'kiln' if on_kiln else 'jax'}:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("example,modules,rtol,atol", CASES, ids=[c[0] for c in CASES])
def test_library_example_gives_jax_numbers(example, modules, rtol, atol):
    pytest.importorskip("jax")
    for m in modules:
        pytest.importorskip(m)
    want = _run(example, on_kiln=False)
    got = _run(example, on_kiln=True)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k], np.float64), np.asarray(want[k], np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"{example}: {k}")


def test_distrax_agrees_with_tfp_on_kiln():
    """Within one kiln run, Distrax's and TFP's log-probabilities of the same draws agree
    (both libraries run on kiln through the alias)."""
    pytest.importorskip("distrax")
    pytest.importorskip("tensorflow_probability")
    got = _run("distrax_flows", on_kiln=True)
    np.testing.assert_allclose(got["log_prob"], got["log_prob_tfp"], rtol=1e-6)
