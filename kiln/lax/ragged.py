"""``lax.RaggedDotDimensionNumbers``: how a ragged dot names its dimensions.

kiln does not yet implement ``lax.ragged_dot``/``ragged_dot_general`` (see
docs/compatibility.md); the dimension-number type is here so that code building them
(JAX's tests, libraries) can construct and compare them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = ["RaggedDotDimensionNumbers"]


@dataclasses.dataclass(frozen=True, init=False)
class RaggedDotDimensionNumbers:
    """The dimensions of a ragged dot.

    Args:
      dot_dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch,
        rhs_batch))``, sequences of ints (as for ``lax.dot_general``).
      lhs_ragged_dimensions: the ragged dimensions of the left operand.
      rhs_group_dimensions: the group dimensions of the right operand.
    """

    dot_dimension_numbers: tuple
    lhs_ragged_dimensions: tuple
    rhs_group_dimensions: tuple

    def __init__(self, dot_dimension_numbers: Sequence, lhs_ragged_dimensions: Sequence[int],
                 rhs_group_dimensions: Sequence[int]):
        dims = tuple(tuple(tuple(int(d) for d in part) for part in pair)
                     for pair in dot_dimension_numbers)
        object.__setattr__(self, "dot_dimension_numbers", dims)
        object.__setattr__(self, "lhs_ragged_dimensions",
                           tuple(int(d) for d in lhs_ragged_dimensions))
        object.__setattr__(self, "rhs_group_dimensions",
                           tuple(int(d) for d in rhs_group_dimensions))
