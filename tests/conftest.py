"""Test configuration: every staged jaxpr is type-checked (``jax_enable_checks``)."""
import numpy as np
import pytest

import kiln

kiln.config.update("jax_enable_checks", True)


@pytest.fixture
def rng():
    return np.random.default_rng(0)

# Jitted programs are compiled before their first call returns, so every test that
# runs a jitted function exercises the compiler (not the reference fallback).
kiln.config.update("kiln_compile", "sync")
