"""Record JAX's answers for the parity tests that read them from ``tests/data/jax_oracle/``
(``tests/_oracle.py``; docs/testing.md, "The JAX oracle").

Usage::

    python tools/record_jax_oracle.py tests/scipy/test_scipy_stats.py [more test files]
    python tools/record_jax_oracle.py --all        # every test module that uses the oracle

Each file is run in the full tier (every generated case) with ``KILN_JAX_ORACLE=record``,
in one process (no xdist), so its store is rewritten with exactly the results its tests
use. Needs JAX installed (the installed version is recorded; the default tier uses a
record only with that version or without JAX). Run it after changing a parity test's
inputs or cases, or after upgrading the JAX oracle, and commit the ``.npz`` files.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def oracle_modules() -> list[pathlib.Path]:
    """The test modules that import ``_oracle``."""
    return sorted(p for p in (ROOT / "tests").rglob("test_*.py")
                  if "from _oracle import" in p.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="test files to record")
    ap.add_argument("--all", action="store_true", help="every module using the oracle")
    args = ap.parse_args()
    files = oracle_modules() if args.all else [pathlib.Path(f) for f in args.files]
    if not files:
        ap.error("name test files or --all")
    env = dict(os.environ, KILN_TEST_TIER="full", KILN_JAX_ORACLE="record")
    status = 0
    for f in files:
        print(f"recording {f}", flush=True)
        r = subprocess.run([sys.executable, "-m", "pytest", str(f), "-q", "-p", "no:xdist",
                            "-p", "no:cacheprovider"], cwd=ROOT, env=env)
        status = status or r.returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
