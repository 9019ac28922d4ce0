"""Test configuration: every staged jaxpr is type-checked (``jax_enable_checks``); the
test tiers (docs/testing.md): tests marked ``slow`` run only in the full tier
(``KILN_TEST_TIER=full``), when a ``-m`` expression is given, or when named by node id."""
import os

import numpy as np
import pytest
from _sampling import TIER

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


def pytest_collection_modifyitems(config, items):
    """The default tier leaves out the tests marked ``slow`` (docs/testing.md)."""
    if TIER == "full" or config.getoption("markexpr", ""):
        return
    # A test asked for by its node id (``path::name[...]``) runs even when it is slow.
    named = []
    for a in config.args:
        path, sep, rest = str(a).partition("::")
        if sep:
            named.append((os.path.abspath(path), rest))

    def asked_for(it):
        name = it.nodeid.partition("::")[2]
        return any(str(it.path) == p and name.startswith(r) for p, r in named)

    slow = [it for it in items if it.get_closest_marker("slow") is not None
            and not asked_for(it)]
    if slow:
        drop = set(map(id, slow))
        config.hook.pytest_deselected(items=slow)
        items[:] = [it for it in items if id(it) not in drop]
