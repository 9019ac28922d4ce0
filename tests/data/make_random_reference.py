"""Generate ``random_reference.npz``: JAX's outputs for the cases of
``random_reference_cases.py`` in x32/x64 and both threefry modes.

Run once, with ``jax`` installed, from the repository root::

    python tests/data/make_random_reference.py

The file also records the JAX version and the processor it was made on (the
``"hw"`` cases depend on it).
"""
import os
import sys

import numpy as np


def _to_numpy(out, jr):
    import jax
    if hasattr(out, "dtype") and jax.dtypes.issubdtype(out.dtype, jax.dtypes.prng_key):
        out = jr.key_data(out)
    return np.asarray(out)


def _cpu_id():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor()


def main(path=None):
    import jax
    import jax.random as jr

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from random_reference_cases import CASES, CONFIGS, SEED, config_name

    out = {}
    for x64, part in CONFIGS:
        jax.config.update("jax_enable_x64", x64)
        jax.config.update("jax_threefry_partitionable", part)
        cfg = config_name(x64, part)
        for name, fn, _kind in CASES:
            out[f"{cfg}/{name}"] = _to_numpy(fn(jr, jr.PRNGKey(SEED)), jr)
    out["__jax_version__"] = np.array(jax.__version__)
    out["__cpu__"] = np.array(_cpu_id())
    path = path or os.path.join(here, "random_reference.npz")
    np.savez_compressed(path, **out)
    print(f"wrote {len(out) - 2} arrays to {path}")


if __name__ == "__main__":
    main()
