"""An impossible allocation raises ``MemoryError`` naming the bytes, shape and dtype."""
import pytest

import kiln
import kiln.numpy as jnp
from kiln.compiler.build import runtime

SHAPE = (1 << 25, 1 << 25)      # 4 PiB of float32: past any address space


def _check(e):
    msg = str(e.value)
    assert "4503599627370496 bytes" in msg and "4 PiB" in msg, msg
    assert "(33554432, 33554432)" in msg and "float32" in msg, msg


def test_compiled_program_output():
    with pytest.raises(MemoryError) as e:
        kiln.jit(lambda x: jnp.zeros(SHAPE) + x)(1.0)
    _check(e)


@pytest.mark.parametrize("extension", [True, False])
def test_runtime_alloc(monkeypatch, extension):
    runtime.get_run()
    if not extension:       # the mmap path used when the C runtime is not built
        monkeypatch.setitem(runtime._state, "alloc_large", None)
    with pytest.raises(MemoryError) as e:
        runtime.alloc(SHAPE, "float32")
    _check(e)


def test_eager_op():
    with pytest.raises(MemoryError) as e:
        jnp.ones((1 << 25, 1)) + jnp.ones((1, 1 << 25))
    assert "(33554432, 33554432)" in str(e.value) and "float32" in str(e.value)
