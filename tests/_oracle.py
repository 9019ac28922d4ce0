"""Stored JAX results for the parity tests (docs/testing.md, "The JAX oracle").

Most of the time of the tests that compare kiln with JAX is JAX's: every eager JAX call
compiles its operations with XLA (a `truncnorm.logsf` case: ~4 s of JAX, 20 ms of kiln).
JAX is a deterministic oracle, so its answers are recorded once, committed under
``tests/data/jax_oracle/<test module>.npz``, and read back; the full tier recomputes them
live and checks the stored ones.

``jax_result(key, compute, inputs=...)`` returns JAX's result for ``key`` (unique within the
calling test module); ``inputs`` (the arrays the computation reads) is hashed into the key,
so an edited input never meets a stale answer. ``KILN_JAX_ORACLE`` picks the mode:

- ``stored`` (the default tier's default): the recorded result when there is one for the
  installed JAX version (or JAX is not installed); otherwise computed live with JAX (or the
  test is skipped when JAX is absent).
- ``check`` (the full tier's default): computed live; a recorded result must agree with it
  (same structure, dtypes and weak types; values within a few ulps).
- ``live``: computed live, records ignored.
- ``record``: computed live and written at the end of the session
  (``tools/record_jax_oracle.py``; one process, no xdist): each test module touched gets a
  file with exactly the results its run used.

Results are pytrees of tuples/lists of leaves; a leaf is an array (kept with its dtype,
ml_dtypes included, and its ``weak_type``), a Python ``bool``/``int``/``float``/``complex``/
``str``, or ``None``. Stored leaves come back as ``StoredArray`` (an ``np.ndarray`` with a
``weak_type`` attribute) or as the Python scalar.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _sampling import TIER

DATA = pathlib.Path(__file__).resolve().parent / "data" / "jax_oracle"
MODE = (os.environ.get("KILN_JAX_ORACLE", "").strip().lower()
        or ("check" if TIER == "full" else "stored"))
if MODE not in ("stored", "check", "live", "record"):
    raise ValueError(f"KILN_JAX_ORACLE={MODE!r}: expected stored, check, live or record")


class StoredArray(np.ndarray):
    """A recorded JAX array: NumPy data plus JAX's ``weak_type`` flag."""

    weak_type: bool = False


class Unstorable(TypeError):
    """A JAX result with a leaf the oracle cannot record (it is then always live)."""


def _jax_version() -> str | None:
    try:
        import jax
    except ImportError:
        return None
    return jax.__version__


def digest(tree: Any) -> str:
    """A short hash of the data, dtypes and shapes of a pytree of inputs."""
    h = hashlib.sha1()

    def feed(x):
        if isinstance(x, dict):
            for k in sorted(x, key=repr):
                h.update(repr(k).encode())
                feed(x[k])
        elif isinstance(x, (tuple, list)):
            h.update(f"{type(x).__name__}{len(x)}".encode())
            for y in x:
                feed(y)
        elif isinstance(x, np.ndarray) or hasattr(x, "__array__") and hasattr(x, "dtype"):
            a = np.asarray(x)
            h.update(f"{a.dtype.name}{a.shape}".encode())
            h.update(a.tobytes())
        else:
            h.update(repr(x).encode())
    feed(tree)
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------
# pytree <-> (structure, leaves)

def _flatten(x, leaves: list) -> Any:
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return {"t": [_flatten(y, leaves) for y in x]}
    if isinstance(x, tuple):            # a namedtuple: kept as a plain tuple
        return {"t": [_flatten(y, leaves) for y in x]}
    if isinstance(x, list):
        return {"l": [_flatten(y, leaves) for y in x]}
    if x is None:
        return {"none": True}
    if isinstance(x, str):
        return {"str": x}
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return {"py": type(x).__name__, "v": repr(x)}
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        a = np.asarray(x)
        if a.dtype.kind not in "biufcV" or a.dtype.names is not None:
            raise Unstorable(f"leaf of dtype {a.dtype}")
        node = {"a": len(leaves), "dtype": a.dtype.name,
                "weak": bool(getattr(x, "weak_type", False)),
                "scalar": isinstance(x, np.generic)}
        leaves.append(a)
        return node
    raise Unstorable(f"leaf of type {type(x).__name__}")


def _unflatten(node, leaves):
    if "t" in node:
        return tuple(_unflatten(y, leaves) for y in node["t"])
    if "l" in node:
        return [_unflatten(y, leaves) for y in node["l"]]
    if "none" in node:
        return None
    if "str" in node:
        return node["str"]
    if "py" in node:
        return {"bool": bool, "int": int, "float": float, "complex": complex}[node["py"]](
            eval(node["v"], {"inf": float("inf"), "nan": float("nan")}))
    a = leaves[node["a"]]
    if node["scalar"]:
        return a[()]
    out = a.view(StoredArray)
    out.weak_type = node["weak"]
    return out


def _dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))


# ------------------------------------------------------------------------------------------
# the per-module store

def _storage(a: np.ndarray) -> np.ndarray:
    """``a`` as NumPy can save it (ml_dtypes: their raw bits)."""
    if a.dtype.kind == "V" or a.dtype.name not in np.sctypeDict:
        return a.view(f"u{a.dtype.itemsize}")
    return a


class _Store:
    """One module's records: ``__index__`` (JSON: the JAX version and, per key, the result's
    structure and its leaves' dtypes, shapes and places) and ``__data__`` (every leaf's bytes
    in one array, compressed as a whole: a member per leaf made the files several times
    larger). Files of the first format (a member per leaf) are still read."""

    def __init__(self, module: str):
        self.path = DATA / f"{module}.npz"
        self.index: dict[str, Any] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.data: np.ndarray | None = None
        self.version: str | None = None
        self.new: dict[str, tuple[Any, list]] = {}
        if self.path.exists():
            with np.load(self.path, allow_pickle=False) as z:
                meta = json.loads(str(z["__index__"]))
                self.version = meta["jax"]
                self.index = meta["entries"]
                if meta.get("format") == 2:
                    self.data = z["__data__"]
                else:
                    self.arrays = {k: z[k] for k in z.files if k != "__index__"}

    def leaves(self, key: str) -> list:
        node = self.index[key]
        if self.data is None:   # the first format
            return [self.arrays[f"{key}#{i}"].view(_dtype(dt))
                    for i, dt in enumerate(node["dtypes"])]
        out = []
        for name, shape, start, size in node["leaves"]:
            dt = _dtype(name)
            raw = self.data[start:start + size].view(_storage(np.empty(0, dt)).dtype)
            out.append(raw.reshape(shape).view(dt).copy())
        return out

    def get(self, key: str):
        if key not in self.index:
            return None
        return _unflatten(self.index[key]["tree"], self.leaves(key))

    def put(self, key: str, value) -> None:
        leaves: list = []
        tree = _flatten(value, leaves)
        self.new[key] = (tree, leaves)

    def write(self, version: str) -> None:
        DATA.mkdir(parents=True, exist_ok=True)
        entries, chunks, start = {}, [], 0
        for key, (tree, leaves) in sorted(self.new.items()):
            specs = []
            for a in leaves:
                raw = _storage(a).tobytes(order="C")
                specs.append([a.dtype.name, list(a.shape), start, len(raw)])
                chunks.append(raw)
                start += len(raw)
            entries[key] = {"tree": tree, "leaves": specs}
        meta = json.dumps({"jax": version, "format": 2, "entries": entries}, sort_keys=True)
        np.savez_compressed(self.path, __index__=np.array(meta),
                            __data__=np.frombuffer(b"".join(chunks), np.uint8))


_STORES: dict[str, _Store] = {}


def _store(module: str) -> _Store:
    if module not in _STORES:
        _STORES[module] = _Store(module)
    return _STORES[module]


@atexit.register
def _write_records() -> None:
    if MODE != "record":
        return
    version = _jax_version()
    for store in _STORES.values():
        if store.new:
            store.write(version)
            print(f"jax oracle: {len(store.new)} results -> {store.path}", file=sys.stderr)


# ------------------------------------------------------------------------------------------
# checking a record against a live result

def _assert_agree(stored, live, key: str) -> None:
    sl: list = []
    ll: list = []
    st, lt = _flatten(stored, sl), _flatten(live, ll)
    strip = json.dumps(st).replace('"a"', ""), json.dumps(lt).replace('"a"', "")
    if strip[0] != strip[1]:
        raise AssertionError(f"jax oracle {key!r}: the recorded structure/dtypes/weak types "
                             f"differ from live JAX's: {st} vs {lt} (run "
                             "tools/record_jax_oracle.py)")
    for s, v in zip(sl, ll):
        if s.dtype.kind in "fc":
            tol = 8 * float(np.finfo(s.dtype).eps)
            np.testing.assert_allclose(np.asarray(s, np.complex128 if s.dtype.kind == "c"
                                                  else np.float64),
                                       np.asarray(v, np.complex128 if v.dtype.kind == "c"
                                                  else np.float64),
                                       rtol=tol, atol=float(np.finfo(s.dtype).tiny),
                                       equal_nan=True,
                                       err_msg=f"jax oracle {key!r}: recorded vs live JAX")
        else:
            np.testing.assert_array_equal(np.asarray(s), np.asarray(v),
                                          err_msg=f"jax oracle {key!r}: recorded vs live")


def _caller_module() -> str:
    f = sys._getframe(2)
    while f is not None:
        name = f.f_globals.get("__name__", "")
        path = f.f_globals.get("__file__", "")
        if name != __name__ and path:
            return pathlib.Path(path).stem
        f = f.f_back
    raise RuntimeError("jax_result: called from no module")


def jax_result(key: str, compute: Callable[[], Any], inputs: Any = None,
               module: str | None = None) -> Any:
    """JAX's answer to ``compute()``, recorded or live (see the module docstring).

    Args:
      key: names the computation, unique within the test module (e.g. the expression).
      compute: runs the computation with JAX and returns its (pytree) result.
      inputs: the data the computation reads (hashed into the key); ``None`` when ``key``
        says it all.
      module: the store's name; default the calling test module's file name.

    Returns:
      The result: live JAX objects when computed, ``StoredArray``/scalars when recorded.
    """
    store = _store(module or _caller_module())
    full = key if inputs is None else f"{key}|{digest(inputs)}"
    version = _jax_version()
    if MODE == "stored":
        if full in store.index and (version is None or version == store.version):
            return store.get(full)
        if version is None:
            import pytest
            pytest.skip(f"JAX is not installed and no recorded result for {key!r}")
        return compute()
    live = compute()
    if MODE == "check" and full in store.index and version == store.version:
        _assert_agree(store.get(full), live, key)
    elif MODE == "record":
        try:
            store.put(full, live)
        except Unstorable:
            pass
    return live
