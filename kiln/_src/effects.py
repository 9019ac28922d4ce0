"""``jax._src.effects``: effect classes and the sets of effect types that JAX's control
flow, custom derivatives and rematerialization allow.

kiln tracks effectfulness per primitive (``kiln.interpreters.staging.always_stage``), not
as effect objects on equations, so these sets only record what libraries register.
"""
from __future__ import annotations

from kiln.extend.core import Effect, Effects, no_effects  # noqa: F401


class JaxprInputEffect(Effect):
    """An effect on input ``input`` of a jaxpr."""

    def __init__(self, input_index):
        self.input = input_index

    def __eq__(self, other):
        return type(self) is type(other) and self.input == other.input

    def __hash__(self):
        return hash((type(self), self.input))


class EffectTypeSet:
    """A set of effect types (``add_type``, ``contains``, ``filter_in``/``filter_not_in``)."""

    def __init__(self):
        self._types: set = set()

    def add_type(self, effect_type: type) -> None:
        self._types.add(effect_type)

    def contains(self, eff) -> bool:
        return any(isinstance(eff, t) for t in self._types)

    def filter_in(self, effects):
        return [e for e in effects if self.contains(e)]

    def filter_not_in(self, effects):
        return [e for e in effects if not self.contains(e)]


control_flow_allowed_effects = EffectTypeSet()
custom_derivatives_allowed_effects = EffectTypeSet()
remat_allowed_effects = EffectTypeSet()
partial_eval_kept_effects = EffectTypeSet()
ordered_effects = EffectTypeSet()
lowerable_effects = EffectTypeSet()
