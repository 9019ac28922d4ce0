"""Which primitives the compiler lowers natively and which run as host islands.

Walks every primitive kiln defines, prints the two lists (``pytest -s`` shows them) and
checks the families the compiler promises to lower natively.
"""
import importlib
import pkgutil

import kiln
from kiln.compiler.lower import lower
from kiln.compiler.lower import random as lower_random
from kiln.core.trace import Primitive


def _all_primitives() -> dict:
    found = {}
    for mod in pkgutil.walk_packages(kiln.__path__, "kiln."):
        if mod.name.endswith("__main__") or ".demo" in mod.name or "as_jax" in mod.name:
            continue
        try:
            m = importlib.import_module(mod.name)
        except Exception:  # noqa: BLE001 - optional modules (e.g. MPI) may not import
            continue
        for v in vars(m).values():
            if isinstance(v, Primitive):
                found[v.name] = v
    return found


def _native_names() -> set:
    return (set(lower.ELEMENTWISE) | set(lower.MOVEMENT) | set(lower.REDUCTIONS) |
            set(lower.IDENTITY) | {"dot_general"} | set(lower.SCANS) | set(lower.SCATTERS) |
            set(lower_random.XLA_MATH) |
            set(lower_random.RANDOM))


def test_coverage_report():
    prims = _all_primitives()
    assert len(prims) > 100, len(prims)
    native = sorted(n for n in prims if n in _native_names())
    islands = sorted(n for n in prims if n not in _native_names())
    print(f"\nnative ({len(native)}): {', '.join(native)}")
    print(f"host islands ({len(islands)}): {', '.join(islands)}")
    promised = {
        # elementwise
        "add", "sub", "mul", "div", "neg", "max", "min", "exp", "log", "tanh", "logistic",
        "sqrt", "rsqrt", "pow", "integer_pow", "select_n", "convert_element_type",
        "bitcast_convert_type", "eq", "lt", "and", "or", "not", "shift_left", "clamp",
        # structural
        "broadcast_in_dim", "reshape", "squeeze", "transpose", "slice", "pad", "rev",
        "concatenate", "iota", "dynamic_slice", "gather", "cumsum", "cumprod", "cummax",
        "cummin", "scatter", "scatter-add", "scatter-mul", "scatter-min", "scatter-max",
        # reductions and products
        "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
        "dot_general",
        # random
        "random_bits", "random_split", "random_fold_in",
    }
    missing = sorted(p for p in promised if p in prims and p not in native)
    assert not missing, missing
    assert promised - set(prims) == set(), sorted(promised - set(prims))
