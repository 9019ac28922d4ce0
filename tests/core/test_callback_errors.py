"""A callback that raises fails as in JAX: ``pure_callback``/``io_callback`` raise
``JaxRuntimeError`` holding the callback's traceback (eagerly and under ``jit``);
``debug.callback`` raises its own exception eagerly and ``JaxRuntimeError`` inside a jitted
program; each failure is logged as ``jax.<kind> failed``."""
import logging

import pytest

import kiln
import kiln.numpy as jnp
from kiln.errors import JaxRuntimeError
from kiln.experimental import io_callback


def _boom(x):
    raise ValueError("boom from the callback")


CASES = {
    "pure_callback": lambda x: kiln.pure_callback(_boom, kiln.ShapeDtypeStruct((), jnp.float32),
                                                  x),
    "io_callback": lambda x: io_callback(_boom, kiln.ShapeDtypeStruct((), jnp.float32), x),
    "debug.callback": lambda x: (kiln.debug.callback(_boom, x), x)[1],
}


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("jitted", [False, True])
def test_failing_callback(kind, jitted, caplog):
    f = CASES[kind]
    f = kiln.jit(f) if jitted else f
    expected = ValueError if (kind == "debug.callback" and not jitted) else JaxRuntimeError
    with caplog.at_level(logging.ERROR), pytest.raises(expected) as info:
        f(jnp.float32(1.0))
    if expected is JaxRuntimeError:
        msg = str(info.value)
        assert msg.startswith("INTERNAL: CpuCallback error calling callback: Traceback")
        assert "ValueError: boom from the callback" in msg
        assert isinstance(info.value.__cause__, ValueError)
    assert any(r.getMessage() == f"jax.{kind} failed" for r in caplog.records)


def test_jax_runtime_error_is_a_runtime_error():
    assert issubclass(JaxRuntimeError, RuntimeError)
    assert kiln.errors.JaxRuntimeError is JaxRuntimeError
