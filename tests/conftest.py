"""Test configuration: every staged jaxpr is type-checked (``jax_enable_checks``)."""
import numpy as np
import pytest

import kiln

kiln.config.update("jax_enable_checks", True)
# pmap/shard_map tests run over 8 virtual CPU devices (fixed before any device is used).
kiln.config.update("jax_num_cpu_devices", 8)


@pytest.fixture
def rng():
    return np.random.default_rng(0)

# Jitted programs are compiled before their first call returns, so every test that
# runs a jitted function exercises the compiler (not the reference fallback).
kiln.config.update("kiln_compile", "sync")


@pytest.fixture
def jax8():
    """JAX as the oracle, with 8 CPU devices (skips if JAX is absent or was started
    with fewer by an earlier test in this process)."""
    jax = pytest.importorskip("jax")
    try:
        jax.config.update("jax_num_cpu_devices", 8)
    except RuntimeError:
        pass
    if jax.device_count() < 8:
        pytest.skip("jax was initialised with fewer than 8 CPU devices")
    return jax
