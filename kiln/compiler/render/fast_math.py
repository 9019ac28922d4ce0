"""Fast float32 math for values that are summed: ``fexp32``.

Elementwise results use XLA's own formulas (``kiln/compiler/csrc/xla_math.h``), so
``jit`` gives JAX's bits. A float sum reduction does not: its order of additions
differs from XLA's (which also differs between XLA's own CPU and GPU backends), so the
bits of ``sum(exp(x - m))`` are not JAX's whatever exp it uses. Inside float sum
reductions the renderer calls ``fexp32`` instead of XLA's ``xexp32``: half the
instructions (no clamps: the exponent is added in the integer domain and the
out-of-range inputs are fixed up after), as accurate (at most 1.06 ulp from the
correctly rounded exp over all 2^32 inputs, against 5.5 ulp for XLA's formula), and the
same special values as XLA (+inf above ln(FLT_MAX), 0 below ln(FLT_MIN): XLA flushes
denormal results, NaN in, NaN out, exp(+-0) = 1). Checked exhaustively by
``tests/compiler/test_fast_math.py`` (a sampled sweep in CI).

Range reduction: ``n = rint(x / ln 2)`` by adding and subtracting 1.5 * 2^23, which
leaves ``n`` in the low mantissa bits of the shifted value ``t``; ``r = x - n ln 2`` in
two parts (Cody-Waite); ``exp(r)`` by a degree-6 polynomial fitted for the least
relative error on |r| <= 0.3476 (Lawson's iteration); and ``2^n`` by adding
``bits(t) << 23`` (the shifter's own bits fall off the top) to the polynomial's bits.
That is exact wherever the result is a normal float; the selects after it take every
other input.
"""
from __future__ import annotations

from kiln.compiler import csrc

#: The largest float32 ``fexp32`` maps to a finite value (``88.72283f`` as C reads it;
#: ``fexp32_fin`` equals ``fexp32`` at and below it).
FIN_MAX = "88.72283f"

#: The smallest float32 ``fexp32`` maps to a normal value (``-87.33654f``): at and above
#: it (and at most ``FIN_MAX``) ``fexp32_in``, with no select at all, equals ``fexp32``.
FIN_MIN = "-87.33654f"

#: C definitions of ``fexp32``, ``fexp32_fin`` (the same without the overflow and NaN
#: select, for arguments known to be at most ``FIN_MAX`` and not NaN: three vector
#: instructions fewer, ~10% of a logsumexp) and ``fexp32_in`` (without the underflow
#: select too, for arguments known to lie in [``FIN_MIN``, ``FIN_MAX``]: two more, 12% of
#: logsumexp on an AVX2 AMD host), in ``kiln/compiler/csrc/fast_exp.h``; needs
#: ``sel32`` (``xla_math.h``), <string.h>, <stdint.h>, <math.h>.
FAST_EXP_C = csrc.text("fast_exp.h")
