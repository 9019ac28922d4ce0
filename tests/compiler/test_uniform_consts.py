"""Constants whose elements all have the same bits (``lower.py`` ``_bind_consts``): the
zeros a gradient closes over, a mask of ones, become constants in the kernels instead
of buffers read at every element; constants with differing bits (``-0.0`` next to
``0.0``) stay buffers. Results are the reference backend's bits either way."""
import numpy as np
from _bits import compiled_matches_reference  # tests/compiler/_bits.py

import kiln

R = np.random.default_rng(11)


def _has_consts(closed):
    assert closed.consts, "the test needs a closed-over constant"


def _run(f, *args):
    return compiled_matches_reference(f, *args, closed_check=_has_consts)[0].prog


def test_zeros_and_a_mask_are_not_buffers():
    zeros = np.zeros((16, 32), np.float32)
    ones = np.ones((16, 32), bool)
    x = R.standard_normal((16, 32)).astype(np.float32)

    def f(x):
        m = kiln.numpy.logical_and(ones, x > 0)
        return kiln.numpy.where(m, x * 2.0, zeros)

    prog = _run(f, x)
    assert prog.consts == []


def test_signed_zeros_and_nan_payloads_stay_buffers():
    z = np.zeros((8, 8), np.float32)
    z[3, 4] = -0.0
    n = np.full((8, 8), np.nan, np.float32)
    n.view(np.uint32)[0, 0] |= 1         # another payload
    x = R.standard_normal((8, 8)).astype(np.float32)

    prog = _run(lambda x: (x * 0.0 + z, x + n), x)
    assert len(prog.consts) == 2


def test_uniform_nan_and_negative_zero_keep_their_bits():
    x = R.standard_normal((8, 8)).astype(np.float32)
    nz = np.full((8, 8), -0.0, np.float32)
    nn = np.full((8, 8), np.nan, np.float32)
    prog = _run(lambda x: (x * 0.0 + nz, kiln.numpy.maximum(x, nn)), x)
    assert prog.consts == []
