"""Shared by compiler tests: build a jaxpr with the C compiler, run it, and check its
outputs bit for bit against the reference backend (the oracle)."""
import numpy as np

import kiln
from kiln.backends import cpu, reference


def compiled_matches_reference(f, *args, closed_check=None):
    """``(executable, outputs)`` of ``f`` compiled; asserts every output's bytes equal the
    reference backend's. ``closed_check(closed_jaxpr)`` runs first when given."""
    closed = kiln.make_jaxpr(f)(*args)
    if closed_check is not None:
        closed_check(closed)
    flat = [np.asarray(a) for a in args]
    exe = cpu.executable_for(closed)
    got = exe(flat)
    ref = cpu._reference_form(closed)
    want = reference.run_jaxpr(ref.jaxpr, ref.consts, flat)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint8),
                                      np.asarray(w).view(np.uint8))
    return exe, got
