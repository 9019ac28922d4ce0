"""A ``ShapeDtypeStruct`` returned from a traced function keeps its shape and dtype (JAX
maps it to its abstract value): ``eval_shape(lambda: struct)`` gives the struct back and
``make_jaxpr`` makes it a const of that type (Equinox's ``closure_convert`` records its
example arguments this way; Lineax passes it structures). It still has no value."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


def test_eval_shape_returns_struct():
    s = kiln.ShapeDtypeStruct((3,), np.float32)
    assert kiln.eval_shape(lambda: s) == s
    w = kiln.ShapeDtypeStruct((), np.float32, weak_type=True)
    out = kiln.eval_shape(lambda: (w, jnp.zeros(2, np.int32)))
    assert out[0].shape == () and out[0].dtype == np.float32 and out[0].weak_type
    assert out[1].shape == (2,) and out[1].dtype == np.int32


def test_make_jaxpr_struct_is_a_typed_const():
    s = kiln.ShapeDtypeStruct((2, 3), np.float64 if kiln.config.jax_enable_x64
                              else np.float32)
    closed = kiln.make_jaxpr(lambda: s)()
    assert closed.jaxpr.outvars[0].aval.shape == (2, 3)
    assert closed.jaxpr.outvars[0].aval.dtype == s.dtype


def test_struct_has_no_value():
    s = kiln.ShapeDtypeStruct((3,), np.float32)
    with pytest.raises(TypeError):
        jnp.sin(s)
    with pytest.raises(TypeError):
        kiln.jit(lambda: s)()
