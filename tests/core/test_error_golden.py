"""Golden tests: the full text of the main error messages and of the cache-miss
explanation, so that any change to them is deliberate.

The expected texts live in ``tests/data/golden_errors/<name>.txt``, with this file's path
written ``<TEST>`` and object ids ``ID``. After an intended change of a message, rewrite
them with ``KILN_UPDATE_GOLDEN=1 python -m pytest tests/core/test_error_golden.py`` and review
the diff. Where kiln's text is JAX's (FloatingPointError, the cache-miss explanation), the
test also compares with JAX 0.10.
"""
import logging
import os
import re

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "golden_errors")
UPDATE = os.environ.get("KILN_UPDATE_GOLDEN") == "1"


def _normalize(text: str) -> str:
    text = text.replace(os.path.abspath(__file__), "<TEST>")
    return re.sub(r"id=\d+", "id=ID", text)


def _check_golden(name: str, text: str) -> None:
    path = os.path.join(GOLDEN_DIR, name + ".txt")
    text = _normalize(text)
    if UPDATE:
        os.makedirs(GOLDEN_DIR, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return
    with open(path) as f:
        expected = f.read()
    assert text == expected, f"{name}: message changed (see the module docstring)"


def _error_text(fn, *args, exc=Exception):
    with pytest.raises(exc) as info:
        fn(*args)
    e = info.value
    notes = [n for n in getattr(e, "__notes__", []) if n != kiln._traceback_util._NOTE]
    return "\n".join([f"{type(e).__name__}: {e}", *notes])


def _int_of(x):
    return int(x)


def _branch(x):
    if x > 0:
        return x
    return -x


def test_concretization_type_error():
    _check_golden("concretization_int", _error_text(kiln.jit(_int_of), 1.0,
                                                     exc=kiln.errors.ConcretizationTypeError))


def test_tracer_bool_conversion_error():
    text = _error_text(kiln.jit(_branch), 1.0, exc=kiln.errors.TracerBoolConversionError)
    _check_golden("tracer_bool_conversion", text)
    jax = pytest.importorskip("jax")
    with pytest.raises(jax.errors.TracerBoolConversionError) as info:
        jax.jit(_branch)(1.0)
    # The first line is JAX's.
    assert text.splitlines()[0] == "TracerBoolConversionError: " + str(info.value).splitlines()[0]


def test_unexpected_tracer_error():
    leaked = []

    def leak(x):
        leaked.append(x)
        return x

    kiln.jit(leak)(1.0)
    _check_golden("unexpected_tracer", _error_text(lambda: leaked[0] + 1,
                                                   exc=kiln.errors.UnexpectedTracerError))


def _log_shifted(x):
    return jnp.log(x - 2.0)


def test_floating_point_error_eager_and_jit(capsys):
    nan = np.float32(np.nan)
    with kiln.debug_nans(True):
        eager = _error_text(_log_shifted, jnp.float32(1.0), exc=FloatingPointError)
        jitted = _error_text(kiln.jit(_log_shifted), jnp.float32(1.0), exc=FloatingPointError)
        jitted += "\n--- stdout:\n" + capsys.readouterr().out
        deopt = _error_text(kiln.jit(lambda x: x), jnp.asarray(nan), exc=FloatingPointError)
    _check_golden("floating_point_eager", eager)
    _check_golden("floating_point_jit", jitted)
    _check_golden("floating_point_deoptimized", deopt)
    jax = pytest.importorskip("jax")
    x_nan = jax.numpy.asarray(nan)      # (JAX checks the creation of a NaN array too)
    jax.config.update("jax_debug_nans", True)
    try:
        with pytest.raises(FloatingPointError) as info:
            jax.jit(lambda x: jax.numpy.log(x - 2.0))(np.float32(1.0))
        assert jitted.splitlines()[0] == f"FloatingPointError: {info.value}"
        with pytest.raises(FloatingPointError) as info:
            jax.jit(lambda x: x)(x_nan)
        assert deopt.split("\n\n")[0] == f"FloatingPointError: {info.value}".split("\n\n")[0]
        assert deopt == f"FloatingPointError: {info.value}"
    finally:
        jax.config.update("jax_debug_nans", False)


def _explained(a, b):
    return a


def test_cache_miss_explanation(caplog):
    caplog.set_level(logging.WARNING, logger="kiln")
    jf = kiln.jit(_explained, static_argnames="b")
    with kiln.explain_cache_misses(True):
        jf(jnp.ones(3), b=1)
        jf(jnp.ones(4), b=1)
        jf(jnp.ones(4, jnp.int32), b=1)
        jf(1.0, b=1)
        jf(jnp.ones(4), b=2)
        with kiln.enable_x64(True):
            jf(jnp.ones(4), b=2)
    text = "\n".join(r.getMessage() for r in caplog.records
                     if r.getMessage().startswith("TRACING CACHE MISS"))
    _check_golden("cache_miss_explanation", text)
