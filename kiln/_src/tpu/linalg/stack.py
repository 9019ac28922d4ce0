"""``jax._src.tpu.linalg.stack``: a bounded functional stack of pytrees
(:mod:`kiln.scipy._bounded_stack`)."""
from kiln.scipy._bounded_stack import Stack

__all__ = ["Stack"]
