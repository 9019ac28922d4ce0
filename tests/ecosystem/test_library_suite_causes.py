"""Causes found running dm-haiku's, Distrax's and BlackJAX's own tests on kiln
(``docs/ecosystem.md``), each checked directly."""
import importlib
import importlib.util

import pytest


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is not None,
                    reason="TensorFlow installed")
def test_jax2tf_without_tensorflow_is_module_not_found():
    # JAX's jax2tf imports TensorFlow first; Haiku's tests that use it fail to import on
    # a JAX without TensorFlow, and optional imports catch exactly this error.
    with pytest.raises(ModuleNotFoundError) as e:
        importlib.import_module("kiln.experimental.jax2tf")
    assert e.value.name == "tensorflow"
