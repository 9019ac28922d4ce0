"""Op records for ``conv_general_dilated`` (NumPy reference: a loop over output positions)."""
from __future__ import annotations

import numpy as np

from kiln import lax

try:
    from op_records import OpRecord, args_of, f32
except ImportError:  # pragma: no cover
    from tests.op_records import OpRecord, args_of, f32

RECORDS: list[OpRecord] = []


def np_conv(x, w, strides, pads, dn, fgc=1, bgc=1):
    dn = lax.conv_dimension_numbers(x.shape, w.shape, dn)
    xc = np.transpose(x, dn.lhs_spec).astype(np.float64)
    wc = np.transpose(w, dn.rhs_spec).astype(np.float64)
    xc = np.pad(xc, [(0, 0), (0, 0)] + [tuple(p) for p in pads])
    n, c = xc.shape[:2]
    o, i = wc.shape[:2]
    ks = wc.shape[2:]
    out_sp = [(p - k) // s + 1 for p, k, s in zip(xc.shape[2:], ks, strides)]
    out = np.zeros((n // bgc, o) + tuple(out_sp))
    og = o // max(fgc, bgc)
    for pos in np.ndindex(*out_sp):
        patch = xc[(slice(None), slice(None)) + tuple(
            slice(p * s, p * s + k) for p, s, k in zip(pos, strides, ks))]
        for oi in range(o):
            g = oi // og
            pt = patch[g * (n // bgc):(g + 1) * (n // bgc)] if bgc > 1 else \
                patch[:, g * i:(g + 1) * i]
            out[(slice(None), oi) + pos] = np.tensordot(
                pt, wc[oi], axes=(list(range(1, pt.ndim)), list(range(wc.ndim - 1))))
    return np.transpose(out, np.argsort(dn.out_spec)).astype(np.float32)


CONVS = [
    ("nchw", (2, 3, 5, 4), (4, 3, 2, 2), (1, 2), ((1, 0), (0, 1)), None, 1, 1),
    ("nhwc_groups", (1, 4, 4, 4), (2, 2, 2, 4), (1, 1), ((0, 1), (1, 0)),
     ("NHWC", "HWIO", "NHWC"), 2, 1),
    ("batch_groups", (4, 2, 4), (4, 2, 2), (2,), ((1, 1),), ("NCH", "OIH", "NCH"), 1, 2),
]
for name, ls, rs, st, pads, dn, fgc, bgc in CONVS:
    RECORDS.append(OpRecord(
        name=f"conv_general_dilated_{name}",
        fun=lambda x, w, st=st, pads=pads, dn=dn, fgc=fgc, bgc=bgc: lax.conv_general_dilated(
            x, w, st, pads, dimension_numbers=dn, feature_group_count=fgc,
            batch_group_count=bgc),
        args=args_of(f32(*ls), f32(*rs)),
        ref=lambda x, w, st=st, pads=pads, dn=dn, fgc=fgc, bgc=bgc: np_conv(
            x, w, st, pads, dn, fgc, bgc),
        diff_argnums=(0, 1), tol=1e-4))
