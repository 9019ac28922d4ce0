"""A larger check of ``kpow32``/``katan2_32`` (``kiln/compiler/render/binary_math.py``)
against this machine's ``powf``/``atan2f`` than the tests run: ``--pairs`` pseudo-random
pairs per seed (the probe's four kinds: uniform patterns, the finite-result band,
integer exponents / x near +-1, special patterns with uniform ones) for each of
``--seeds`` seeds, MXCSR flush bits on and off, both variants of each function.

    PYTHONPATH=$PWD python tools/check_binary_math.py [--pairs N] [--seeds K] [NAME ...]

Prints the mismatch counts: the variant the probe chose must show 0 everywhere.
"""
from __future__ import annotations

import argparse
import time

from kiln.compiler.render import binary_math


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=list(binary_math.FUNCTIONS))
    ap.add_argument("--pairs", type=int, default=1 << 26)
    ap.add_argument("--seeds", type=int, default=4)
    args = ap.parse_args(argv)
    bad = 0
    for name in args.names:
        chosen = binary_math.chosen_variant(name)
        print(f"{name}: the probe chose {chosen}")
        for variant in binary_math.VARIANTS[name]:
            for flush in (True, False):
                t0 = time.perf_counter()
                counts = [binary_math.probe_mismatches(name, variant, flush, pairs=args.pairs,
                                                       seed=0x51ED + 7919 * s)
                          for s in range(args.seeds)]
                dt = time.perf_counter() - t0
                print(f"  {variant:5s} flush={int(flush)}: mismatches {counts} over "
                      f"{args.seeds} x {args.pairs:,} pairs ({dt:.1f} s)")
                if variant == chosen:
                    bad += sum(counts)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
