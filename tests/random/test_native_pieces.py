"""kiln_random.c is built in pieces: kiln.random's part, and each eager-math kernel (op,
dtype) alone on its first use (kiln/random/_native.py)."""
import os
import subprocess
import sys

import pytest

from kiln.compiler.build import build
from kiln.random import _native

pytestmark = pytest.mark.skipif(build.find_compiler() is None, reason="no C compiler")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_eager_kernel_is_a_piece():
    common, part0, lines = _native._pieces()
    want = {(op, w) for op in (*_native.EAGER_UNARY, *_native.EAGER_BINARY, "ipow", "betainc",
                               *_native.COMPLEX_UNARY, *_native.COMPLEX_BINARY, "cipow")
            for w in ("f32", "f64")}
    assert set(lines) == want
    assert "kiln_eager_" not in part0 and "kiln_threefry2x32" in part0
    # every piece is one kernel: its macro line names only its own op and dtype
    for (op, w), line in lines.items():
        assert line.count("kiln_eager_") == 1 and f"kiln_eager_{op}_{w}," in line


def test_first_eager_tanh_builds_only_its_kernel(tmp_path):
    code = ("import numpy as np, kiln.numpy as jnp\n"
            "y = np.asarray(jnp.tanh(np.linspace(-2, 2, 64, dtype=np.float32)))\n"
            "assert abs(float(y[0]) - np.tanh(-2.0)) < 1e-6\n")
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path), "PYTHONPATH": ROOT}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    names = sorted(p.name.split("-")[0] for p in (tmp_path / "so").iterdir()
                   if p.suffix == ".so")
    assert "kiln_eager_tanh_f32" in names
    assert not [n for n in names if n.startswith("kiln_eager_") and n != "kiln_eager_tanh_f32"]
    assert "kiln_random" not in names       # kiln.random's part: not needed for tanh
