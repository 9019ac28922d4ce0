"""Test configuration: every staged jaxpr is type-checked (``jax_enable_checks``)."""
import numpy as np
import pytest

import kiln

kiln.config.update("jax_enable_checks", True)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
