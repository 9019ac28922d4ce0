"""The programs in examples/ run, and give JAX's numbers when run with JAX's imports."""
from __future__ import annotations

import importlib.util
import pathlib
import re

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _load(path, source=None, name="example"):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    if source is None:
        spec.loader.exec_module(mod)
    else:
        exec(compile(source, str(path), "exec"), mod.__dict__)
    return mod


def _losses(mod, steps=4):
    key = mod.random.PRNGKey(0)
    params = mod.init(key)
    out = []
    for i in range(steps):
        images, labels = mod.data(mod.random.fold_in(key, i))
        value, params = mod.step(params, images, labels)
        out.append(float(value))
    return np.array(out)


@pytest.mark.slow  # ~30 s; the digits examples (test_examples_digits.py) stay in the default tier
def test_cnn_example_matches_jax():
    pytest.importorskip("jax")
    path = EXAMPLES / "cnn.py"
    kiln_mod = _load(path)
    src = path.read_text()
    src = re.sub(r"^import kiln as jax$", "import jax", src, flags=re.M)
    src = re.sub(r"^import kiln\.numpy as jnp$", "import jax.numpy as jnp", src, flags=re.M)
    src = re.sub(r"^from kiln import lax, random$", "from jax import lax, random", src,
                 flags=re.M)
    jax_mod = _load(path, src, "example_jax")
    k, j = _losses(kiln_mod), _losses(jax_mod)
    np.testing.assert_allclose(k, j, rtol=2e-4)
