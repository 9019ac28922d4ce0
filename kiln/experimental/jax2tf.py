"""``jax.experimental.jax2tf``: converting JAX functions to TensorFlow.

JAX's module imports TensorFlow first, so without TensorFlow installed importing it
raises ``ModuleNotFoundError: No module named 'tensorflow'`` (what libraries' optional
imports and tests expect on such a machine); kiln raises the same error, found without
importing TensorFlow (kiln never imports it). With TensorFlow installed, kiln still has no
converter (JAX's lowers to StableHLO for TensorFlow's ``XlaCallModule``): the import
raises ``ImportError`` saying so.
"""
import importlib.util

if importlib.util.find_spec("tensorflow") is None:
    raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")

raise ImportError("kiln does not provide jax.experimental.jax2tf (conversion to "
                  "TensorFlow through StableHLO)")
