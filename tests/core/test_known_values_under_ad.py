"""Under grad/jvp/jacfwd a traced value whose primal is concrete may be used as a Python
value (control flow, ``int(x)``, shapes, value-dependent functions), as in JAX; under jit
and vmap it may not. Each case runs in kiln and JAX: same outcome (value or error class)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

CASES = {
    "bool": lambda m: lambda x: x * 2 if bool(x) else x,
    "if": lambda m: lambda x: m.where(x > 1, x, 0) if (x > 1).all() else x,
    "int": lambda m: lambda x: x * int(x),
    "float": lambda m: lambda x: x * float(x),
    "index": lambda m: lambda x: x * [1, 2, 3][x.astype(int)],
    "item": lambda m: lambda x: x * x.item(),
    "tolist": lambda m: lambda x: x * x.tolist(),
    "range": lambda m: lambda x: sum(x * i for i in range(int(x))),
    "arange": lambda m: lambda x: m.arange(x).sum() * x,
    "zeros": lambda m: lambda x: m.zeros(x.astype(int)).sum() + x,
    "unique": lambda m: lambda x: m.unique(m.stack([x, x, 2 * x])).sum(),
    "nonzero": lambda m: lambda x: m.nonzero(m.stack([x, x]))[0].sum() * x,
    "repeat": lambda m: lambda x: m.repeat(m.stack([x, x]), x.astype(int)).sum(),
    "linspace": lambda m: lambda x: m.linspace(0, 1, x.astype(int)).sum() * x,
    "slice": lambda m: lambda x: m.ones(5)[:x.astype(int)].sum() * x,
    "mask": lambda m: lambda x: m.stack([x, x + 1])[m.stack([x, x + 1]) > 2.5].sum(),
    "trim_zeros": lambda m: lambda x: m.trim_zeros(m.stack([0 * x, x, 2 * x, 0 * x])).sum(),
    "union1d": lambda m: lambda x: m.union1d(m.stack([x, 1.0]), m.stack([x, 3.0])).sum(),
}


def _run(transform, f, x):
    try:
        return np.asarray(transform(f)(x))
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("which", ["grad", "jacfwd", "jit"])
def test_outcome_matches_jax(name, which):
    x = np.float32(2.0)
    k = _run(getattr(kiln, which), CASES[name](knp), x)
    j = _run(getattr(jax, which), CASES[name](jnp), x)
    if isinstance(j, str):
        assert k == j or (isinstance(k, str) and j == "TypeError"
                          and k.endswith("Error")), (k, j)
    else:
        assert not isinstance(k, str), f"kiln raised {k}; JAX gives {j}"
        np.testing.assert_allclose(k, j, rtol=1e-6)
