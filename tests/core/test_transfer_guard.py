"""Host-to-device transfer guards (``jax.transfer_guard``): a host value (NumPy array or
scalar, Python scalar, list) becoming an array implicitly — a ``jit`` argument, a
``jax.numpy`` operand, ``jnp.array`` — is refused under 'disallow' (JAX's
JaxRuntimeError) and logged under 'log'; ``device_put`` is explicit (refused only under
'disallow_explicit'); kiln's own constants, traced closures, arrays and reads to the
host are not transfers (as on JAX's CPU)."""
import logging

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln._src.lax import lax as lax_internal
from kiln.errors import JaxRuntimeError

MSG = "Disallowed host-to-device transfer"


@pytest.mark.parametrize("f", [
    lambda: kiln.jit(jnp.sin)(np.ones(3)),
    lambda: kiln.jit(jnp.sin)(1.0),
    lambda: jnp.sin(np.ones(3)),
    lambda: jnp.arange(3.0) + np.ones(3),
    lambda: jnp.array([1.0, 2.0]),
    lambda: jnp.asarray(np.ones(3)),
], ids=["jit-np", "jit-scalar", "op-np", "add-np", "array-list", "asarray-np"])
def test_implicit_transfers_refused(f):
    with kiln.transfer_guard("disallow"):
        with pytest.raises(JaxRuntimeError, match=MSG):
            f()
    f()     # allowed again outside the block


def test_no_transfer_cases_pass():
    x = jnp.arange(3.0)
    with kiln.transfer_guard("disallow"):
        kiln.jit(jnp.sin)(x)
        kiln.device_put(np.ones(3))                       # explicit
        jnp.arange(5), jnp.arange(np.float32(5))          # computed by kiln
        jnp.iscomplexobj(np.arange(5))                    # no conversion
        kiln.jit(lambda: jnp.sin(np.ones(3)))()           # a traced constant
        kiln.jit(lambda: lax_internal.asarray(1.0))()      # (JAX's lax_test.testAsarray)
        np.asarray(x), repr(x), kiln.device_get(x)        # reads to the host


def test_explicit_and_per_direction_levels(caplog):
    with kiln.transfer_guard("disallow_explicit"):
        with pytest.raises(JaxRuntimeError, match=MSG):
            kiln.device_put(np.ones(3))
    with kiln.transfer_guard_host_to_device("disallow"):
        with pytest.raises(JaxRuntimeError, match=MSG):
            kiln.jit(jnp.sin)(np.ones(3))
    with kiln.transfer_guard_device_to_host("disallow"):
        kiln.jit(jnp.sin)(np.ones(3))                     # another direction
    with caplog.at_level(logging.WARNING, logger="kiln"):
        with kiln.transfer_guard("log"):
            kiln.jit(jnp.sin)(np.ones(3))
    assert "host-to-device transfer" in caplog.text
