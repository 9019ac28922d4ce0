"""``jax._src.ad_util``: the autodiff utility names libraries import (Lineax:
``stop_gradient_p``)."""
from __future__ import annotations

from kiln.interpreters.ad import Zero, add_jaxvals_p, instantiate_zeros, zeros_like_aval
from kiln.lax import stop_gradient_p

__all__ = ["Zero", "add_jaxvals_p", "instantiate_zeros", "stop_gradient_p", "zeros_like_aval"]
