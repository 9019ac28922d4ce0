"""Which equations a native loop or branch body may call back into Python for.

A loop (``while``/``scan``/``fori_loop``) or branch whose body holds one equation
without a native lowering (``sort``, ``fft``, a QR or eigen decomposition, a
``pure_callback``, ...) used to run entirely on the host, one Python-interpreted
iteration after another: a 500-step ``scan`` around a 32-element ``sort`` took 21 ms
where JAX takes 1.2 ms. Such an equation is instead lowered as an :class:`Island` with
a ``host_id`` inside the body; the C loop calls back into Python for it
(``kiln.compiler.build.host_entry``) and everything around it stays native.

Not called back (the loop stays on the host, as before): equations with effects (their
order against the program's other effects is the token machinery's business),
collectives (their device rendezvous belongs to the islands between segments), and
values of dtypes the C code lacks.

What it must not hold: the callback itself or C text.
"""
from __future__ import annotations

import numpy as np


def host_callable(eqn) -> bool:
    """Whether ``eqn`` may run as a call back into Python inside a native body."""
    from kiln.compiler.lower.lower import NATIVE_DTYPES
    if eqn.effects:
        return False
    if getattr(eqn.primitive, "island_result_fresh", False):    # collectives
        return False
    for v in list(eqn.invars) + list(eqn.outvars):
        if np.dtype(v.aval.dtype) not in NATIVE_DTYPES:
            return False
    return True
