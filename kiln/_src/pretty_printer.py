"""``jax._src.pretty_printer``: the output formats a jaxpr's ``pretty_print`` takes.

JAX's module is a document pretty-printer (in C++, from jaxlib); kiln prints jaxprs with
its own printer (:func:`kiln.core.jaxpr.pp_jaxpr`), so only the format names are here.
"""
from __future__ import annotations

import enum


class OutputFormat(enum.Enum):
    """``pretty_print(output_format=...)``: plain text, or HTML whose variables are
    anchors (``<a id="v_a">a</a>``) that their uses link to."""

    TEXT = 0
    HTML = 1
