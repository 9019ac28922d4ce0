"""Namespace coverage against JAX: at least 97% of the public names of ``jax.numpy``,
``jax.numpy.linalg``, ``jax.numpy.fft``, ``jax.nn`` and ``jax.scipy.special`` must exist in
kiln's counterparts (today all five are at 100%). ``tools/compat_report.py`` writes any
missing names and the reasons to ``docs/compatibility.md``.
"""
from __future__ import annotations

import importlib

import pytest

pytest.importorskip("jax")

TARGET = 0.97

MODULES = [
    pytest.param("jax.numpy", "kiln.numpy", id="numpy"),
    pytest.param("jax.numpy.linalg", "kiln.numpy.linalg", id="linalg"),
    pytest.param("jax.numpy.fft", "kiln.numpy.fft", id="fft"),
    pytest.param("jax.nn", "kiln.nn", id="nn"),
    pytest.param("jax.scipy.special", "kiln.scipy.special", id="scipy.special"),
]


def _public(module):
    return {n for n in dir(module) if not n.startswith("_")}


@pytest.mark.parametrize("jax_name,kiln_name", MODULES)
def test_namespace_coverage(jax_name, kiln_name):
    ref = _public(importlib.import_module(jax_name))
    ours = _public(importlib.import_module(kiln_name))
    missing = sorted(ref - ours)
    frac = 1 - len(missing) / len(ref)
    assert frac >= TARGET, (f"{kiln_name} has {frac:.1%} of {jax_name}'s public names; "
                            f"missing: {missing}")


def test_numpy_names_are_usable():
    """Every name kiln.numpy shares with jax.numpy is an object of the same kind."""
    import jax.numpy as jnp

    import kiln.numpy as knp
    for name in sorted(_public(jnp) & _public(knp)):
        j, k = getattr(jnp, name), getattr(knp, name)
        if callable(j):
            assert callable(k), name
        if isinstance(j, jnp.ufunc):
            assert isinstance(k, knp.ufunc), name


def test_report_renders():
    import pathlib
    import sys
    root = pathlib.Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tools"))
    try:
        compat_report = importlib.import_module("compat_report")
    finally:
        sys.path.pop(0)
    text = compat_report.render()
    assert "| `jax.numpy` | `kiln.numpy` |" in text
