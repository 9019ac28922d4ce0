"""PRNG keys: implementations, the key dtype, typed key arrays, and key operations.

What this module holds:

* ``PRNGImpl`` (a key shape and the seed/split/fold_in/random_bits functions on raw
  key data) and the registry of implementations (``threefry2x32``, ``rbg``,
  ``unsafe_rbg``, ``philox2x32``, ``philox4x32``, ``threefry4x32``).
* ``KeyTy``: the key dtype (``key<fry>``), an extended dtype of kiln's dtype system
  (``kiln.dtypes.issubdtype(k.dtype, kiln.dtypes.prng_key)`` holds).
* ``PRNGKeyArray``: an array of typed keys over its raw key data (a uint32 array of
  shape ``keys_shape + (2,)``). To users it is a pytree *leaf* and a ``kiln.Array``
  (``aval`` is key-typed: ``typeof(k)`` is ``key<fry>[]``); transformations flatten with
  ``kiln._physical_tree``, where it is a one-child node over its data, so keys cross
  ``jit``, ``vmap``, ``grad``, control flow ... as keys while the core sees uint32 data;
  the trailing key-data axis is never mapped (``vmap`` maps the leading, key, axes).
  Operators other than ``==``/``!=`` raise JAX's TypeErrors; ``lax``/``jnp`` operations
  reach keys through ``Primitive.bind``'s hook and the rules of ``_key_rules``.
* The key primitives, on raw key data: ``random_seed``, ``random_split``,
  ``random_fold_in``, ``random_bits``; each with abstract evaluation, batching and
  a zero JVP. Their impls are the NumPy threefry functions of ``_threefry``.
* The public key functions: ``key``, ``PRNGKey``, ``split``, ``fold_in``, ``clone``,
  ``key_data``, ``wrap_key_data``, ``key_impl``, ``key_dtype`` and the checks
  that turn a legacy ``uint32[2]`` key into a typed key and back.

What it must not hold: samplers (``_distributions``).
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from kiln import dtypes
from kiln._compile_log import register_trace_context as _register_trace_context
from kiln.array import Array, make_array
from kiln.config import config
from kiln.core.avals import ShapedArray
from kiln.core.trace import Tracer, get_aval
from kiln.interpreters import ad, batching
from kiln.lax._factory import standard_primitive
from kiln.random import _threefry

_U32 = np.dtype(np.uint32)


class PRNGImpl(NamedTuple):
    """A PRNG: the shape of one key's uint32 data and the functions on raw keys.

    ``seed(int array) -> keys``, ``split(keys, shape) -> keys``,
    ``fold_in(keys, uint32 array) -> keys``, ``random_bits(keys, width, shape)``;
    all take NumPy values with a leading batch of keys.
    """
    key_shape: tuple
    seed: Callable
    split: Callable
    random_bits: Callable
    fold_in: Callable
    name: str = "<unnamed>"
    tag: str = "?"

    def __hash__(self) -> int:
        return hash(self.tag)

    def __eq__(self, other) -> bool:
        # As JAX's (a NamedTuple's): every field, the functions by identity; two
        # ``define_prng_impl`` results with the default name and tag are distinct.
        return isinstance(other, PRNGImpl) and tuple.__eq__(self, other)

    def __ne__(self, other) -> bool:
        return not self == other

    def __str__(self) -> str:
        return self.tag


threefry_prng_impl = PRNGImpl(
    key_shape=(2,),
    seed=_threefry.seed_np,
    split=_threefry.split_np,
    random_bits=_threefry.random_bits_np,
    fold_in=_threefry.fold_in_np,
    name="threefry2x32",
    tag="fry",
)

prngs: dict = {}


def register_prng(impl: PRNGImpl) -> None:
    if impl.name in prngs:
        raise ValueError(f"PRNG with name {impl.name} already registered: {impl}")
    prngs[impl.name] = impl


register_prng(threefry_prng_impl)


def _register_rbg() -> None:
    from kiln.random import _rbg
    global rbg_prng_impl, unsafe_rbg_prng_impl
    rbg_prng_impl = PRNGImpl(key_shape=(4,), seed=_rbg.seed, split=_rbg.split,
                             random_bits=_rbg.random_bits, fold_in=_rbg.fold_in,
                             name="rbg", tag="rbg")
    unsafe_rbg_prng_impl = PRNGImpl(key_shape=(4,), seed=_rbg.seed, split=_rbg.unsafe_split,
                                    random_bits=_rbg.random_bits, fold_in=_rbg.unsafe_fold_in,
                                    name="unsafe_rbg", tag="urbg")
    register_prng(rbg_prng_impl)
    register_prng(unsafe_rbg_prng_impl)


def _register_counter_prngs() -> None:
    from kiln.random import _counter_prngs as c
    for name, tag, shape in (("philox2x32", "phx2", (1,)), ("philox4x32", "phx4", (2,)),
                             ("threefry4x32", "fry4", (4,))):
        register_prng(PRNGImpl(key_shape=shape, seed=getattr(c, f"{name}_seed"),
                               split=getattr(c, f"{name}_split"),
                               random_bits=getattr(c, f"{name}_random_bits"),
                               fold_in=getattr(c, f"{name}_fold_in"), name=name, tag=tag))


_register_rbg()
_register_counter_prngs()


def default_prng_impl() -> PRNGImpl:
    """The implementation named by ``config.jax_default_prng_impl``."""
    name = config.jax_default_prng_impl
    if name not in prngs:
        raise NotImplementedError(
            f"kiln.random implements the PRNGs {', '.join(map(repr, prngs))}; "
            f"jax_default_prng_impl={name!r} is not one of them.")
    return prngs[name]


class PRNGSpec:
    """Specifies a PRNG key implementation (as ``jax.random.PRNGSpec``)."""

    __slots__ = ("_impl",)

    def __init__(self, impl):
        self._impl = impl

    def __repr__(self) -> str:
        return f"PRNGSpec({self._impl.name!r})"

    def __str__(self) -> str:
        return str(self._impl)

    def __hash__(self) -> int:
        return hash(self._impl)

    def __eq__(self, other) -> bool:
        return isinstance(other, PRNGSpec) and self._impl == other._impl


class KeyTyRules:
    """How the operations that create arrays of a dtype treat key dtypes (JAX's
    ``KeyTy._rules``): ``full`` fills the key data, tangents are ``float0``."""

    allow_conversion = False

    @staticmethod
    def full(shape, fill_value, dtype):
        """Keys of ``shape``: ``fill_value`` a key array broadcast to it, or a number that
        fills every word of the key data (``zeros_like(keys)`` has all-zero data)."""
        from kiln import lax
        impl = dtype._impl
        phys = tuple(shape) + tuple(impl.key_shape)
        if isinstance(fill_value, PRNGKeyArray):
            data = fill_value._base_array
            if get_aval(data).shape != phys:
                data = _bcast_numpy(data, phys)
        else:
            data = lax.full(phys, fill_value, dtype=_U32)
        return PRNGKeyArray(impl, data)

    @staticmethod
    def physical_element_aval(dtype) -> ShapedArray:
        return ShapedArray(tuple(dtype._impl.key_shape), _U32)

    @staticmethod
    def tangent_dtype(_):
        return dtypes.float0

    @staticmethod
    def zero(_):
        return np.zeros((), dtypes.float0)


def _bcast_numpy(x, shape):
    """``x`` broadcast to ``shape`` with NumPy's (right-aligned) rules."""
    from kiln import lax
    s = get_aval(x).shape
    try:
        np.broadcast_shapes(s, shape)
    except ValueError:
        raise ValueError(f"Incompatible shapes for broadcasting: {s} and requested shape "
                         f"{shape}") from None
    if len(s) > len(shape) or np.broadcast_shapes(s, shape) != tuple(shape):
        raise ValueError(f"Incompatible shapes for broadcasting: {s} and requested shape "
                         f"{shape}")
    nd = len(shape)
    keep = [i for i, d in enumerate(s) if d == shape[nd - len(s) + i]]
    if len(keep) != len(s):
        x = lax.reshape(x, tuple(s[i] for i in keep))
    return lax.broadcast_in_dim(x, tuple(shape), tuple(nd - len(s) + i for i in keep))


class KeyTy(dtypes.ExtendedDType):
    """The dtype of typed PRNG keys: ``key<fry>`` for threefry."""

    type = dtypes.prng_key
    _rules = KeyTyRules

    def __init__(self, impl: PRNGImpl):
        self._impl = impl

    @property
    def name(self) -> str:
        return f"key<{self._impl.tag}>"

    @property
    def itemsize(self) -> int:
        return math.prod(self._impl.key_shape) * 4

    @property
    def kind(self) -> str:
        return "V"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return type(other) is KeyTy and self._impl == other._impl

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((KeyTy, self._impl))


def resolve_prng_impl(impl_spec) -> PRNGImpl:
    if impl_spec is None:
        return default_prng_impl()
    if type(impl_spec) is PRNGImpl:
        return impl_spec
    if type(impl_spec) is PRNGSpec:
        return impl_spec._impl
    if isinstance(impl_spec, KeyTy):
        return impl_spec._impl
    if type(impl_spec) is str:
        if impl_spec in prngs:
            return prngs[impl_spec]
        keys_fmt = ", ".join(f'"{s}"' for s in prngs)
        raise ValueError(f'unrecognized PRNG implementation "{impl_spec}". '
                         f"Did you mean one of: {keys_fmt}?")
    raise TypeError(f"unrecognized type {type(impl_spec)} for specifying PRNG implementation.")


def key_dtype(impl_spec=None) -> KeyTy:
    """The dtype of keys of a PRNG implementation."""
    return KeyTy(resolve_prng_impl(impl_spec))


# ----------------------------------------------------------------------------------------------
# Key arrays.

def _check_prng_key_data(impl: PRNGImpl, key_data) -> None:
    ndim = len(impl.key_shape)
    if not all(hasattr(key_data, attr) for attr in ("ndim", "shape", "dtype")):
        raise TypeError("JAX encountered invalid PRNG key data: expected key_data to have "
                        f"ndim, shape, and dtype attributes. Got {key_data}")
    if key_data.ndim < 1:
        raise TypeError("JAX encountered invalid PRNG key data: expected key_data.ndim >= 1; "
                        f"got ndim={key_data.ndim}")
    if tuple(key_data.shape[-ndim:]) != impl.key_shape:
        raise TypeError("JAX encountered invalid PRNG key data: expected key_data.shape to "
                        f"end with {impl.key_shape}; got shape={tuple(key_data.shape)} for "
                        f"impl={impl.name}")
    if key_data.dtype != _U32:
        raise TypeError("JAX encountered invalid PRNG key data: expected key_data.dtype = "
                        f"uint32; got dtype={key_data.dtype}")


class PRNGKeyArray:
    """An array of PRNG keys: shape ``keys_shape``, dtype ``key<fry>`` (or ``key<rbg>``...).

    Backed by raw key data of shape ``keys_shape + impl.key_shape`` (uint32), a
    ``kiln.Array`` or a tracer. Keys have no arithmetic; they support indexing,
    iteration, ``==``, every structural ``jnp``/``lax`` operation (through the rules of
    ``_key_rules``), and pass through transformations as a pytree.
    """

    __slots__ = ("_impl", "_base_array")
    __array_priority__ = 100
    __hash__ = None

    def __init__(self, impl: PRNGImpl, key_data):
        if isinstance(key_data, np.ndarray):
            key_data = make_array(key_data)
        self._impl = impl
        self._base_array = key_data

    # -- metadata -------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        nd = len(self._impl.key_shape)
        return tuple(self._base_array.shape[:-nd])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> KeyTy:
        return KeyTy(self._impl)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.itemsize * self.size

    @property
    def aval(self) -> ShapedArray:
        """The key-typed abstract value (``kiln.typeof(k)`` prints ``key<fry>[...]``)."""
        return ShapedArray(self.shape, KeyTy(self._impl))

    def _is_scalar(self) -> bool:
        return self.ndim == 0

    # -- behaviour ------------------------------------------------------------------------
    def __len__(self):
        if self._is_scalar():
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if self._is_scalar():
            raise TypeError("iteration over a 0-d key array")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, idx):
        from kiln.random._index import index_keys
        return index_keys(self, idx)

    def __setitem__(self, idx, value):
        raise TypeError("'PRNGKeyArray' object does not support item assignment. JAX arrays "
                        "are immutable. Instead of ``x[idx] = y``, use ``x = x.at[idx].set(y)``"
                        " or another .at[] method: "
                        "https://docs.jax.dev/en/latest/_autosummary/jax.numpy.ndarray.at.html")

    def __bool__(self):
        raise TypeError("key array cannot be converted to boolean.")

    def __array__(self, dtype=None, copy=None):
        raise TypeError("JAX array with PRNGKey dtype cannot be converted to a NumPy array. "
                        "Use jax.random.key_data(arr) if you wish to extract the underlying "
                        "integer array.")

    def __eq__(self, other):
        if not isinstance(other, PRNGKeyArray):
            return NotImplemented
        return _keys_equal(self, other)

    def __ne__(self, other):
        if not isinstance(other, PRNGKeyArray):
            return NotImplemented
        from kiln import lax
        return lax.bitwise_not(_keys_equal(self, other))

    def __repr__(self):
        base = self._base_array
        body = str(np.asarray(base._value)) if type(base) is Array else repr(base)
        return f"Array({self.shape}, dtype={self.dtype.name}) overlaying:\n{body}"

    def __str__(self):
        return repr(self)

    def pprint(self) -> str:
        """A description of the key array and its implementation (as JAX's)."""
        impl = self._impl
        fields = "".join(f"\n    {f} = {v}" for f, v in (
            ("key_shape", impl.key_shape), ("seed", impl.seed), ("split", impl.split),
            ("random_bits", impl.random_bits), ("fold_in", impl.fold_in),
            ("name", impl.name), ("tag", impl.tag)))
        return (f"PRNGKeyArray:\n  shape = {self.shape}\n  impl = PRNGImpl [{impl.tag}] "
                f"{{{impl.name}}}:{fields}")

    def copy(self):
        return self._rewrap(self._base_array.copy())

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def _rewrap(self, data):
        return PRNGKeyArray(self._impl, data)

    def block_until_ready(self):
        block = getattr(self._base_array, "block_until_ready", None)
        if block is not None:
            block()
        return self

    def copy_to_host_async(self):
        f = getattr(self._base_array, "copy_to_host_async", None)
        if f is not None:
            f()

    # -- devices --------------------------------------------------------------------------
    @property
    def device(self):
        return self._base_array.device

    def devices(self):
        return self._base_array.devices()

    @property
    def sharding(self):
        return self._base_array.sharding

    @property
    def is_fully_addressable(self) -> bool:
        return self._base_array.is_fully_addressable

    @property
    def is_fully_replicated(self) -> bool:
        return self._base_array.is_fully_replicated

    @property
    def committed(self) -> bool:
        return self._base_array.committed

    def delete(self) -> None:
        self._base_array.delete()

    def is_deleted(self) -> bool:
        return self._base_array.is_deleted()

    def on_device_size_in_bytes(self) -> int:
        return self._base_array.on_device_size_in_bytes()

    def unsafe_buffer_pointer(self) -> int:
        """The address of the key data's buffer (its ``_base_array``'s)."""
        return self._base_array.unsafe_buffer_pointer()

    def addressable_data(self, index: int) -> PRNGKeyArray:
        return self._rewrap(self._base_array.addressable_data(index))

    def _shards(self, shards) -> list:
        from kiln.sharding import Shard

        class KeyShard(Shard):
            """A shard of a key array: its ``data`` is keys."""
            __slots__ = ()

            @property
            def data(shard):
                return self._rewrap(Shard.data.fget(shard))
        nd = len(self._impl.key_shape)
        return [KeyShard(s.device, tuple(s.index)[:len(s.index) - nd] if
                         len(s.index) > self.ndim else s.index, s.replica_id, s._array)
                for s in shards]

    @property
    def addressable_shards(self) -> list:
        return self._shards(self._base_array.addressable_shards)

    @property
    def global_shards(self) -> list:
        return self._shards(self._base_array.global_shards)


def _install_array_methods() -> None:
    """JAX gives key arrays the ``jnp`` methods that move keys around (``at``, ``reshape``,
    ``ravel``, ``flatten``, ``squeeze``, ``swapaxes``, ``take``, ``transpose``, ``T``); every
    other array method raises ``NotImplementedError`` (they are abstract for keys)."""
    from kiln.numpy import _array_methods as am
    for name in ("flatten", "ravel", "squeeze", "swapaxes", "take"):
        setattr(PRNGKeyArray, name, am._method(name))
    PRNGKeyArray.reshape = am._reshape
    PRNGKeyArray.transpose = am._transpose
    PRNGKeyArray.T = property(am._T)
    PRNGKeyArray.at = property(am._at)

    def abstract(name):
        def method(self, *args, **kwargs):
            raise NotImplementedError(f"Cannot call abstract method {name}")
        method.__name__ = name
        return method
    for name in ("all", "any", "argmax", "argmin", "argpartition", "argsort", "astype",
                 "byteswap", "choose", "clip", "compress", "conj", "conjugate", "cumprod",
                 "cumsum", "diagonal", "dot", "item", "max", "mean", "min", "nonzero", "prod",
                 "ptp", "repeat", "round", "searchsorted", "sort", "std", "sum", "to_device",
                 "trace", "var", "view", "__array_namespace__"):
        setattr(PRNGKeyArray, name, abstract(name))
    for name in ("flat", "mT", "real", "imag"):
        setattr(PRNGKeyArray, name, property(abstract(name)))


_install_array_methods()


def _keys_equal(a: PRNGKeyArray, b: PRNGKeyArray):
    from kiln import lax
    if a._impl != b._impl:
        raise TypeError(f"cannot compare keys of types {a.dtype} and {b.dtype}")
    da, db = a._base_array, b._base_array
    sa, sb = get_aval(da).shape, get_aval(db).shape
    if sa != sb:
        shape = np.broadcast_shapes(sa, sb)
        da = _bcast(da, shape)
        db = _bcast(db, shape)
    eq = lax.convert_element_type(lax.eq(da, db), _U32)
    nd = len(a._impl.key_shape)
    axes = tuple(range(len(get_aval(eq).shape) - nd, len(get_aval(eq).shape)))
    return lax.ne(lax.reduce_min(eq, axes), make_array(np.uint32(0)))


def _bcast(x, shape):
    from kiln import lax
    s = get_aval(x).shape
    return lax.broadcast_in_dim(x, tuple(shape), tuple(range(len(shape) - len(s), len(shape))))


def _flatten_keys(x: PRNGKeyArray):
    return (x._base_array,), x._impl


def _unflatten_keys(impl, children):
    (base,) = children
    k = object.__new__(PRNGKeyArray)
    k._impl = impl
    k._base_array = base
    return k


def _register_transform_node():
    from kiln import _physical_tree
    from kiln.core import trace as _core
    from kiln.random import _key_rules
    _physical_tree.register_transform_node(PRNGKeyArray, _flatten_keys, _unflatten_keys)
    _core.extended_types.add(PRNGKeyArray)
    _core.pytype_aval_mappings[PRNGKeyArray] = _key_rules.key_aval
    from kiln.interpreters import partial_eval
    partial_eval.register_key_types(KeyTy, PRNGKeyArray)


_register_transform_node()


def is_key_array(x) -> bool:
    return isinstance(x, PRNGKeyArray)


# Keys have no arithmetic: operators raise JAX's TypeErrors. Per operator: the NumPy-level
# name (reported when the other operand is not a key), the lax-level name and its accepted
# dtype kinds (reported when both operands are keys).
_NUMERIC = "integer, floating, complexfloating"
_BINARY_OPS = {
    "add": ("add", "add", _NUMERIC), "sub": ("subtract", "sub", _NUMERIC),
    "mul": ("multiply", "mul", _NUMERIC), "truediv": ("true_divide", "div", _NUMERIC),
    "floordiv": ("floor_divide", "div", _NUMERIC), "mod": ("remainder", "rem",
                                                           "integer, floating"),
    "pow": ("power", "pow", "floating, complexfloating"),
    "lt": ("less", "lt", "integer, floating, bool"),
    "le": ("less_equal", "le", "integer, floating, bool"),
    "gt": ("greater", "gt", "integer, floating, bool"),
    "ge": ("greater_equal", "ge", "integer, floating, bool"),
    "and": ("bitwise_and", "and", "integer, bool"), "or": ("bitwise_or", "or", "integer, bool"),
    "xor": ("bitwise_xor", "xor", "integer, bool"),
    "lshift": ("left_shift", "shift_left", "integer"),
    "rshift": ("right_shift", "shift_right_arithmetic", "integer"),
}
_UNARY_OPS = {"neg": ("neg", _NUMERIC), "pos": ("pos", _NUMERIC),
              "abs": ("abs", "floating, complexfloating, signedinteger"),
              "invert": ("not", "integer, bool")}


def _operand_dtype_name(x) -> str:
    if isinstance(x, PRNGKeyArray):
        return x.dtype.name
    try:
        return np.dtype(dtypes.canonicalize_dtype(dtypes.dtype(x))).name
    except Exception:  # noqa: BLE001  (a non-array operand: name its type)
        return type(x).__name__


def _binary_error(op: str, reflected: bool):
    np_name, lax_name, kinds = _BINARY_OPS[op]

    def method(self, other):
        if isinstance(other, PRNGKeyArray):
            raise TypeError(f"{lax_name} does not accept dtype {self.dtype.name} at position 0."
                            f" Accepted dtypes at position 0 are subtypes of {kinds}.")
        names = [self.dtype.name, _operand_dtype_name(other)]
        if reflected:
            names.reverse()
        raise TypeError(f"{np_name} does not accept dtypes {', '.join(names)}.")
    method.__name__ = f"__{'r' if reflected else ''}{op}__"
    return method


def _unary_error(op: str):
    lax_name, kinds = _UNARY_OPS[op]

    def method(self):
        raise TypeError(f"{lax_name} does not accept dtype {self.dtype.name}. Accepted dtypes "
                        f"are subtypes of {kinds}.")
    method.__name__ = f"__{op}__"
    return method


for _op in _BINARY_OPS:
    setattr(PRNGKeyArray, f"__{_op}__", _binary_error(_op, False))
    if _op not in ("lt", "le", "gt", "ge"):
        setattr(PRNGKeyArray, f"__r{_op}__", _binary_error(_op, True))
for _op in _UNARY_OPS:
    setattr(PRNGKeyArray, f"__{_op}__", _unary_error(_op))
del _op


# ----------------------------------------------------------------------------------------------
# Key primitives (on raw key data).

def _key_data_aval(keys, impl, what):
    nd = len(impl.key_shape)
    if keys.dtype != _U32 or tuple(keys.shape[len(keys.shape) - nd:]) != impl.key_shape:
        raise TypeError(f"{what} expects raw {impl.name} key data (uint32[..., "
                        f"{', '.join(map(str, impl.key_shape))}]), got {keys.str_short()}")
    return tuple(keys.shape[:len(keys.shape) - nd])


def _seed_abstract_eval(seeds, *, impl):
    if not dtypes.issubdtype(seeds.dtype, np.integer):
        raise TypeError(f"PRNG key seed must be an integer; got {seeds.str_short()}")
    return ShapedArray(seeds.shape + impl.key_shape, _U32)


def _seed_impl(seeds, *, impl):
    return impl.seed(seeds)


random_seed_p = standard_primitive("random_seed", _seed_abstract_eval, _seed_impl,
                                   weak_type_rule=lambda *a, **k: False)
ad.defjvp_zero(random_seed_p)


def _seed_batch(axis_data, vals, dims, *, impl):
    (x,), (d,) = vals, dims
    return random_seed_p.bind(x, impl=impl), d


batching.batch_rules[random_seed_p] = _seed_batch


def _split_abstract_eval(keys, *, shape, impl):
    kshape = _key_data_aval(keys, impl, "random_split")
    return ShapedArray(kshape + tuple(shape) + impl.key_shape, _U32)


def _split_impl(keys, *, shape, impl):
    return impl.split(keys, tuple(shape))


random_split_p = standard_primitive("random_split", _split_abstract_eval, _split_impl,
                                    weak_type_rule=lambda *a, **k: False)
ad.defjvp_zero(random_split_p)


def _leading_batch(prim):
    def rule(axis_data, vals, dims, **params):
        (x,), (d,) = vals, dims
        x = batching.moveaxis(x, d, 0)
        return prim.bind(x, **params), 0
    batching.batch_rules[prim] = rule


_leading_batch(random_split_p)


def _fold_in_abstract_eval(keys, msgs, *, impl):
    kshape = _key_data_aval(keys, impl, "random_fold_in")
    if msgs.dtype != _U32:
        raise TypeError(f"random_fold_in expects uint32 data, got {msgs.dtype.name}")
    try:
        shape = np.broadcast_shapes(kshape, msgs.shape)
    except ValueError:
        raise TypeError(f"random_fold_in got incompatible shapes {kshape} and "
                        f"{msgs.shape}") from None
    return ShapedArray(tuple(shape) + impl.key_shape, _U32)


def _fold_in_impl(keys, msgs, *, impl):
    return impl.fold_in(keys, msgs)


random_fold_in_p = standard_primitive("random_fold_in", _fold_in_abstract_eval, _fold_in_impl,
                                      weak_type_rule=lambda *a, **k: False)
ad.defjvp_zero(random_fold_in_p)


def _fold_in_batch(axis_data, vals, dims, *, impl):
    from kiln import lax
    (keys, msgs), (dk, dm) = vals, dims
    nd = len(impl.key_shape)
    kshape = get_aval(keys).shape
    kshape = kshape[:len(kshape) - nd]
    mshape = get_aval(msgs).shape
    if dk is not None:
        keys = batching.moveaxis(keys, dk, 0)
        kshape = kshape[1:]
    if dm is not None:
        msgs = batching.moveaxis(msgs, dm, 0)
        mshape = mshape[1:]
    # Align the unbatched shapes to one rank, then give the unbatched operand a unit axis.
    r = max(len(kshape), len(mshape))
    kb = 1 if dk is not None else 0
    mb = 1 if dm is not None else 0
    if len(kshape) < r or dk is None:
        ks = get_aval(keys).shape
        new = ((ks[0],) if dk is not None else (1,)) + (1,) * (r - len(kshape)) + \
            tuple(ks[kb:])
        keys = lax.reshape(keys, new)
    if len(mshape) < r or dm is None:
        ms = get_aval(msgs).shape
        new = ((ms[0],) if dm is not None else (1,)) + (1,) * (r - len(mshape)) + \
            tuple(ms[mb:])
        msgs = lax.reshape(msgs, new)
    return random_fold_in_p.bind(keys, msgs, impl=impl), 0


batching.batch_rules[random_fold_in_p] = _fold_in_batch


def _bits_abstract_eval(keys, *, bit_width, shape, impl):
    kshape = _key_data_aval(keys, impl, "random_bits")
    return ShapedArray(kshape + tuple(shape), _threefry.UINT_DTYPES[bit_width])


def _bits_impl(keys, *, bit_width, shape, impl):
    return impl.random_bits(keys, bit_width, tuple(shape))


random_bits_p = standard_primitive("random_bits", _bits_abstract_eval, _bits_impl,
                                   weak_type_rule=lambda *a, **k: False)
ad.defjvp_zero(random_bits_p)
_leading_batch(random_bits_p)


# ----------------------------------------------------------------------------------------------
# Wrapping, checking.

def _is_arraylike(x) -> bool:
    return isinstance(x, (Array, Tracer, np.ndarray, np.generic)) or \
        hasattr(x, "__jax_array__") or np.isscalar(x)


def random_wrap(base_arr, *, impl: PRNGImpl) -> PRNGKeyArray:
    _check_prng_key_data(impl, base_arr)
    if isinstance(base_arr, (np.ndarray, np.generic)):
        base_arr = make_array(np.asarray(base_arr))
    return PRNGKeyArray(impl, base_arr)


def random_unwrap(keys: PRNGKeyArray):
    if not isinstance(keys, PRNGKeyArray):
        raise TypeError(f"random_unwrap takes key array operand, got {type(keys)}")
    return keys._base_array


def check_prng_key(name: str, key, *, allow_batched: bool = False):
    """``(typed_key, was_wrapped)``: a typed key for ``key`` (legacy uint32 keys get wrapped)."""
    if isinstance(key, PRNGKeyArray):
        wrapped_key, wrapped = key, False
    elif _is_arraylike(key):
        wrapped_key = random_wrap(key, impl=default_prng_impl())
        wrapped = True
        _legacy_key_check()
    else:
        raise TypeError(f"unexpected PRNG key type {type(key)}")
    if not allow_batched and wrapped_key.ndim:
        raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                         f"{tuple(np.shape(key) if not wrapped else key.shape)} != (). "
                         "Use jax.vmap for batching.")
    return wrapped_key, wrapped


def _legacy_key_check() -> None:
    """JAX's error or warnings for a raw ``uint32`` key (``jax_legacy_prng_key``,
    ``jax_enable_custom_prng``)."""
    import warnings
    mode = config.jax_legacy_prng_key
    msg = ("Legacy uint32 key array passed as key to jax.random function. Please create "
           "keys using jax.random.key(). If use of a raw key array was intended, set "
           'jax_legacy_prng_key="allow".')
    if mode == "error":
        raise ValueError(msg)
    if mode == "warn":
        warnings.warn(msg, stacklevel=4)
    elif config.jax_enable_custom_prng:
        warnings.warn("Raw arrays as random keys to jax.random functions are deprecated. "
                      "Assuming valid threefry2x32 key for now.", FutureWarning, stacklevel=4)


def return_prng_keys(was_wrapped: bool, key: PRNGKeyArray):
    """Keys for the caller: raw data when the input was raw, unless
    ``jax_enable_custom_prng`` is on (then always typed keys, as JAX)."""
    if config.jax_enable_custom_prng:
        return key
    return random_unwrap(key) if was_wrapped else key


def random_bits(key: PRNGKeyArray, bit_width: int, shape) -> object:
    return random_bits_p.bind(key._base_array, bit_width=bit_width, shape=tuple(shape),
                              impl=key._impl)


def random_split(key: PRNGKeyArray, shape) -> PRNGKeyArray:
    return PRNGKeyArray(key._impl, random_split_p.bind(key._base_array, shape=tuple(shape),
                                                       impl=key._impl))


# ----------------------------------------------------------------------------------------------
# Public key API.

def canonicalize_shape(shape, context: str = "") -> tuple:
    """A tuple of non-negative Python ints, or JAX's TypeError; a Python int ``n`` is the
    shape ``(n,)``, as in JAX (``random.normal(key, 4)``)."""
    if isinstance(shape, int):
        shape = (shape,)
    try:
        if isinstance(shape, (str, bytes)):
            raise TypeError
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        msg = ("Shapes must be 1D sequences of concrete values of integer type, "
               f"got {shape}.")
        if context:
            msg += f" {context}"
        raise TypeError(msg) from None
    if any(d < 0 for d in dims):
        raise TypeError(f"Shapes must be 1D sequences of non-negative integers, got {shape}.")
    return dims


def _ndim(x) -> int:
    nd = getattr(x, "ndim", None)
    return np.ndim(x) if nd is None else nd


def _seed_array(seed):
    from kiln.core.trace import to_array
    if isinstance(seed, Tracer) or type(seed) is Array:
        return seed
    if isinstance(seed, int):
        # Python ints go through int64 (wrapping to int32 without x64), as in JAX.
        return to_array(np.int64(seed))
    return to_array(seed)


def random_seed(seeds, impl: PRNGImpl) -> PRNGKeyArray:
    arr = _seed_array(seeds)
    offset = config.jax_random_seed_offset
    if offset:      # as JAX: every seed is shifted (jax_random_seed_offset)
        from kiln.lax import add, convert_element_type
        arr = add(arr, convert_element_type(offset, get_aval(arr).dtype))
    return PRNGKeyArray(impl, random_seed_p.bind(arr, impl=impl))


def _key(ctor_name: str, seed, impl_spec) -> PRNGKeyArray:
    impl = resolve_prng_impl(impl_spec)
    if isinstance(seed, PRNGKeyArray):
        raise TypeError(f"{ctor_name} accepts a scalar seed, but was given a PRNG key.")
    if _ndim(seed):
        raise TypeError(f"{ctor_name} accepts a scalar seed, but was given an array of shape "
                        f"{tuple(np.shape(seed)) if not hasattr(seed, 'shape') else seed.shape}"
                        " != (). Use jax.vmap for batching")
    return random_seed(seed, impl=impl)


def key(seed, *, impl=None, dtype=None) -> PRNGKeyArray:
    """A typed PRNG key (dtype ``key<fry>``) from an integer seed."""
    if dtype is not None:
        if impl is not None:
            raise ValueError("Cannot specify both `impl` and `dtype` arguments to "
                             "jax.random.key")
        impl = dtype
    return _key("key", seed, impl)


def PRNGKey(seed, *, impl=None):
    """A legacy PRNG key: a uint32 array of shape (2,) from an integer seed (a typed key
    under ``jax_enable_custom_prng``)."""
    return return_prng_keys(True, _key("PRNGKey", seed, impl))


def fold_in(key, data):
    """Fold ``data`` (a 32-bit integer) into ``key``: a new, independent key."""
    from kiln import lax
    key, wrapped = check_prng_key("fold_in", key)
    if _ndim(data):
        raise TypeError("fold_in accepts a scalar, but was given an array of"
                        f"shape {tuple(np.shape(data)) if not hasattr(data, 'shape') else data.shape}"
                        " != (). Use jax.vmap for batching.")
    if isinstance(data, (Tracer, Array)):
        d = lax.convert_element_type(data, _U32)
    else:
        d = make_array(np.asarray(data, dtype=_U32))
    out = PRNGKeyArray(key._impl, random_fold_in_p.bind(key._base_array, d, impl=key._impl))
    return return_prng_keys(wrapped, out)


def _split(key: PRNGKeyArray, num=2) -> PRNGKeyArray:
    if key.ndim:
        raise TypeError("split accepts a single key, but was given a key array of "
                        f"shape {key.shape} != (). Use jax.vmap for batching.")
    shape = tuple(num) if isinstance(num, Sequence) else (num,)
    shape = canonicalize_shape(shape)
    return random_split(key, shape)


def split(key, num=2):
    """Split ``key`` into ``num`` new keys (``num`` an int or a shape tuple)."""
    typed_key, wrapped = check_prng_key("split", key)
    return return_prng_keys(wrapped, _split(typed_key, num))


def clone(key):
    """Clone a key for reuse (the identity outside of key-reuse checking)."""
    if isinstance(key, PRNGKeyArray):
        return PRNGKeyArray(key._impl, key._base_array)
    return key


def _key_spec(keys: PRNGKeyArray):
    impl = keys._impl
    return impl.name if impl.name in prngs else PRNGSpec(impl)


def key_impl(keys):
    """The name of the PRNG implementation of ``keys``."""
    typed, _ = check_prng_key("key_impl", keys, allow_batched=True)
    return _key_spec(typed)


def key_data(keys):
    """The uint32 key data underlying a key array."""
    typed, _ = check_prng_key("key_data", keys, allow_batched=True)
    return random_unwrap(typed)


def wrap_key_data(key_bits_array, *, impl=None, dtype=None) -> PRNGKeyArray:
    """A typed key array over ``key_bits_array`` (uint32, trailing shape ``(2,)``)."""
    if dtype is not None:
        if impl is not None:
            raise ValueError("Cannot specify both `impl` and `dtype` arguments to "
                             "jax.random.wrap_key_data")
        impl = dtype
    return random_wrap(key_bits_array, impl=resolve_prng_impl(impl))


def _seed_offset_context():
    return config.jax_random_seed_offset


_register_trace_context("jax_random_seed_offset", _seed_offset_context)
