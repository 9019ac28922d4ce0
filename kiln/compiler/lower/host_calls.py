"""Which equations a native loop or branch body may call back into Python for.

A loop (``while``/``scan``/``fori_loop``) or branch whose body holds one equation
without a native lowering (``sort``, ``fft``, a QR or eigen decomposition, a
``pure_callback``, ...) used to run entirely on the host, one Python-interpreted
iteration after another: a 500-step ``scan`` around a 32-element ``sort`` took 21 ms
where JAX takes 1.2 ms. Such an equation is instead lowered as an :class:`Island` with
a ``host_id`` inside the body; the C loop calls back into Python for it
(``kiln.compiler.build.host_entry``) and everything around it stays native.

``debug.print``/``debug.callback`` are called back too: the native loop runs its
iterations in order and the program's segments and islands run in program order, so
their output keeps the order it has on the reference backend. Not called back (the
loop stays on the host, as before): other equations with effects (``io_callback``,
library primitives with effects), collectives (their device rendezvous belongs to the
islands between segments), and values of dtypes the C code lacks.

What it must not hold: the callback itself or C text.
"""
from __future__ import annotations

import numpy as np

#: Effectful primitives called back like any other (their effect is output, in order).
DEBUG_EFFECTS = frozenset(("debug_print", "debug_callback"))


def host_callable(eqn) -> bool:
    """Whether ``eqn`` may run as a call back into Python inside a native body."""
    from kiln.compiler.lower.lower import NATIVE_DTYPES
    if eqn.effects and eqn.primitive.name not in DEBUG_EFFECTS:
        return False
    if getattr(eqn.primitive, "island_result_fresh", False):    # collectives
        return False
    for v in list(eqn.invars) + list(eqn.outvars):
        if np.dtype(v.aval.dtype) not in NATIVE_DTYPES:
            return False
    return True
