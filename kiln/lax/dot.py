"""``dot_general``: tensor contraction with batch dimensions, plus ``dot``,
``batch_matmul``, ``Precision``, ``DotAlgorithm``/``DotAlgorithmPreset`` and the rules
(bilinear jvp, transposes, batching).

The NumPy impl maps every contraction onto one (batched) ``np.matmul`` so it runs
on BLAS: lhs → (batch, free, contract), rhs → (batch, contract, free).

``precision`` may be a dot algorithm (as in JAX 0.10). On CPU, as JAX's CPU lowering
does: ``DEFAULT``, ``F16_F16_F16``, ``F32_F32_F32``, ``F64_F64_F64``, ``BF16_BF16_F32``,
``BF16_BF16_F32_X3`` and ``BF16_BF16_F32_X6`` run; every other preset and every explicit
``DotAlgorithm`` raise ``ValueError`` when evaluated (not when traced). A running preset
casts each operand to its precision type (unless the operand's dtype is one the preset
accepts as is), multiplies accumulating in the preset's accumulation type (low-precision
float products are computed in float32 and rounded, as XLA's CPU backend does), and
casts the result to the output dtype. The ``_X3``/``_X6`` variants compute in float32.
"""
from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from kiln import dtypes
from kiln.config import config
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax._factory import standard_primitive
from kiln.lax.slicing import eager_checked
from kiln.lax.structural import convert_element_type, convert_element_type_p, transpose


class Precision(enum.Enum):
    """Matmul precision (accepted for compatibility; results on CPU are always full
    float32/float64 precision). Aliases: 'default'/'fastest'/'bfloat16', 'high'/
    'tensorfloat32'/'bfloat16_3x', 'highest'/'float32'."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        return _precision_strings.get(value)

    def __repr__(self):
        return f"{type(self).__name__}.{self.name}"

    def __str__(self):
        return self.name


_precision_strings = {
    "highest": Precision.HIGHEST, "float32": Precision.HIGHEST,
    "high": Precision.HIGH, "bfloat16_3x": Precision.HIGH, "tensorfloat32": Precision.HIGH,
    "default": Precision.DEFAULT, "bfloat16": Precision.DEFAULT, "fastest": Precision.DEFAULT,
    None: Precision.DEFAULT,
}

DotDimensionNumbers = tuple[tuple[Sequence[int], Sequence[int]],
                            tuple[Sequence[int], Sequence[int]]]


class DotAlgorithm(NamedTuple):
    """Specify the algorithm used for computing dot products.

    Passed as the ``precision`` of :func:`dot_general` (and of ``dot``, ``jnp.dot``,
    ``jnp.matmul``, ``jnp.einsum``, ...), it names the types the operands are rounded to
    (``lhs_precision_type``, ``rhs_precision_type``), the accumulation type, and how
    many components/operations emulate a higher precision. Support is platform
    dependent: as on JAX's CPU backend, an explicit ``DotAlgorithm`` is not supported
    by kiln (evaluating such a dot raises ``ValueError``); the presets of
    :class:`DotAlgorithmPreset` listed there are.

    Examples:
      >>> algorithm = DotAlgorithm(lhs_precision_type=np.float16,
      ...                          rhs_precision_type=np.float16,
      ...                          accumulation_type=np.float32)
    """

    lhs_precision_type: Any
    rhs_precision_type: Any
    accumulation_type: Any
    lhs_component_count: int = 1
    rhs_component_count: int = 1
    num_primitive_operations: int = 1
    allow_imprecise_accumulation: bool = False


class DotAlgorithmPreset(enum.Enum):
    """An enum of known algorithms for computing dot products.

    Select one as the ``precision`` of :func:`dot_general` (or ``jnp.dot``, ...), either
    as a member or by its name (``precision="F16_F16_F32"``); the names of the presets
    are ``LHS_RHS_ACCUM`` (the operand types and the accumulation type), ``ANY`` meaning
    any type and ``_X3``/``_X6``/``_X9`` the number of operations emulating a higher
    precision. ``jax_default_matmul_precision`` may also name a preset.

    On CPU (JAX's CPU backend and kiln) only ``DEFAULT``, ``F16_F16_F16``,
    ``F32_F32_F32``, ``F64_F64_F64``, ``BF16_BF16_F32``, ``BF16_BF16_F32_X3`` and
    ``BF16_BF16_F32_X6`` are supported; the others raise ``ValueError`` when evaluated.
    """

    DEFAULT = enum.auto()
    ANY_F8_ANY_F8_F32 = enum.auto()
    ANY_F8_ANY_F8_F32_FAST_ACCUM = enum.auto()
    ANY_F8_ANY_F8_ANY = enum.auto()
    ANY_F8_ANY_F8_ANY_FAST_ACCUM = enum.auto()
    F16_F16_F16 = enum.auto()
    F16_F16_F32 = enum.auto()
    BF16_BF16_BF16 = enum.auto()
    BF16_BF16_F32 = enum.auto()
    BF16_BF16_F32_X3 = enum.auto()
    BF16_BF16_F32_X6 = enum.auto()
    BF16_BF16_F32_X9 = enum.auto()
    TF32_TF32_F32 = enum.auto()
    TF32_TF32_F32_X3 = enum.auto()
    F32_F32_F32 = enum.auto()
    F64_F64_F64 = enum.auto()

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __str__(self) -> str:
        return self.name

    @property
    def supported_lhs_types(self):
        """The operand dtypes used as they are (others are cast to the first); None: any."""
        name = self.name
        if name == "DEFAULT" or name.startswith("ANY_F8"):
            return None
        if name in ("F16_F16_F16", "F16_F16_F32"):
            return (np.float16,)
        if name in ("BF16_BF16_BF16", "BF16_BF16_F32"):
            return (dtypes.bfloat16, np.float32)
        if name == "F64_F64_F64":
            return (np.float64,)
        return (np.float32,)

    @property
    def supported_rhs_types(self):
        """As :attr:`supported_lhs_types`."""
        return self.supported_lhs_types

    @property
    def accumulation_type(self):
        """The accumulation dtype (None: the output dtype)."""
        name = self.name
        if name in ("DEFAULT", "ANY_F8_ANY_F8_ANY", "ANY_F8_ANY_F8_ANY_FAST_ACCUM"):
            return None
        if name == "F16_F16_F16":
            return np.float16
        if name == "BF16_BF16_BF16":
            return dtypes.bfloat16
        if name == "F64_F64_F64":
            return np.float64
        return np.float32

    def supported_output_types(self, lhs_dtype, rhs_dtype):
        """The result dtypes the algorithm produces directly (None: any)."""
        name = self.name
        if name in ("ANY_F8_ANY_F8_F32", "ANY_F8_ANY_F8_F32_FAST_ACCUM"):
            return (np.float32, np.float16, dtypes.bfloat16, dtypes.float8_e4m3fn,
                    dtypes.float8_e5m2, dtypes.float8_e5m2fnuz, dtypes.float8_e4m3fnuz,
                    dtypes.float8_e4m3b11fnuz)
        if name in ("F16_F16_F32", "BF16_BF16_F32"):
            low = np.float16 if name == "F16_F16_F32" else dtypes.bfloat16
            if dtypes.promote_types(lhs_dtype, rhs_dtype) == np.dtype(low):
                return (np.float32, low)
            return (np.float32,)
        acc = self.accumulation_type
        return None if acc is None else (acc,)


# The algorithms JAX's CPU lowering accepts.
_CPU_PRESETS = frozenset({
    DotAlgorithmPreset.DEFAULT, DotAlgorithmPreset.F16_F16_F16,
    DotAlgorithmPreset.F32_F32_F32, DotAlgorithmPreset.F64_F64_F64,
    DotAlgorithmPreset.BF16_BF16_F32, DotAlgorithmPreset.BF16_BF16_F32_X3,
    DotAlgorithmPreset.BF16_BF16_F32_X6,
})


def _is_algorithm(precision) -> bool:
    return isinstance(precision, (DotAlgorithm, DotAlgorithmPreset))


def algorithm_compute_types(algorithm, lhs_dtype, rhs_dtype, out_dtype):
    """``(lhs, rhs, accumulation)`` dtypes a dot with ``algorithm`` computes in."""
    if isinstance(algorithm, DotAlgorithm):
        return (np.dtype(algorithm.lhs_precision_type), np.dtype(algorithm.rhs_precision_type),
                np.dtype(algorithm.accumulation_type))

    def pick(dt, supported):
        if supported is None or np.dtype(dt) in [np.dtype(t) for t in supported]:
            return np.dtype(dt)
        return np.dtype(supported[0])
    lt = pick(lhs_dtype, algorithm.supported_lhs_types)
    rt = pick(rhs_dtype, algorithm.supported_rhs_types)
    return lt, rt, pick(out_dtype, algorithm.supported_output_types(lt, rt))


def check_cpu_algorithm(precision) -> None:
    """JAX's CPU check: raise ``ValueError`` for a dot algorithm the CPU cannot run."""
    if _is_algorithm(precision) and precision not in _CPU_PRESETS:
        raise ValueError(f"The precision '{precision}' is not supported by dot_general "
                         "on CPU")


def algorithm_changes_types(precision, lhs_dtype, rhs_dtype, out_dtype) -> bool:
    """Whether a dot with this ``precision`` computes other than the default dot does
    (unsupported algorithms count: evaluating them raises)."""
    if not _is_algorithm(precision) or precision is DotAlgorithmPreset.DEFAULT:
        return False
    if precision not in _CPU_PRESETS:
        return True
    lt, rt, at = algorithm_compute_types(precision, lhs_dtype, rhs_dtype, out_dtype)
    return (lt != np.dtype(lhs_dtype) or rt != np.dtype(rhs_dtype)
            or at != np.dtype(out_dtype))


def canonicalize_precision(precision):
    """``None``, a pair of ``Precision`` values, a ``DotAlgorithmPreset`` or a
    ``DotAlgorithm``, from any accepted spelling (JAX's ``canonicalize_precision``)."""
    if precision is None:
        default = config.jax_default_matmul_precision
        if default is None:
            return None
        try:
            return canonicalize_precision(default)
        except ValueError:
            raise ValueError(
                "jax_default_matmul_precision flag must be set to None, a value in "
                f"{list(_precision_strings)}, or the name of a lax.DotAlgorithmPreset, but "
                f"got {default}") from None
    if isinstance(precision, str):
        if precision in _precision_strings:
            p = Precision(precision)
            return (p, p)
        try:
            return DotAlgorithmPreset[precision]
        except KeyError:
            pass
    elif isinstance(precision, Precision):
        return (precision, precision)
    elif _is_algorithm(precision):
        return precision
    elif isinstance(precision, (list, tuple)) and len(precision) == 2:
        if all(isinstance(p, Precision) for p in precision):
            return tuple(precision)
        if all(isinstance(p, str) for p in precision):
            first, second = (canonicalize_precision(p) for p in precision)
            for c in (first, second):
                if isinstance(c, DotAlgorithmPreset):   # JAX indexes the preset
                    raise TypeError("'DotAlgorithmPreset' object is not subscriptable")
            return (first[0], second[0])
    raise ValueError(
        "Precision argument must be one of:\n- None,\n"
        f"- a string in {list(_precision_strings)},\n"
        "- a lax.Precision value,\n"
        "- a tuple of two lax.Precision values or strings,\n"
        "- a lax.DotAlgorithmPreset or the name of one of these presets, or\n"
        "- a lax.DotAlgorithm value;\n"
        f"but got {precision}.")


# ----------------------------------------------------------------------------------------------
# dtype and shape rules


def _bit_width(dt):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return 1
    if dtypes.issubdtype(dt, np.inexact):
        return dtypes.finfo(dt).bits
    return dtypes.iinfo(dt).bits


def _type_rank(dt):
    """XLA's 'higher precision type' order for mixed-dtype dots."""
    dt = np.dtype(dt)
    cplx = dt.kind == "c"
    real = np.dtype(np.float32 if dt == np.complex64 else np.float64) if cplx else dt
    is_float = dtypes.issubdtype(real, np.floating)
    fi = dtypes.finfo(real) if is_float else None
    return (cplx, fi.maxexp if is_float else -1, fi.nmant if is_float else -1,
            _bit_width(real), real.kind != "u")


@functools.lru_cache(maxsize=512)
def _input_result_dtype(lhs_dt, rhs_dt):
    lr, rr = _type_rank(lhs_dt), _type_rank(rhs_dt)
    if lr > rr:
        return np.dtype(lhs_dt)
    if rr > lr:
        return np.dtype(rhs_dt)
    if lhs_dt != rhs_dt:
        raise TypeError(f"lax.dot_general argument type error: {lhs_dt}, {rhs_dt}")
    return np.dtype(lhs_dt)


@functools.lru_cache(maxsize=512)
def _result_dtype(lhs_dt, rhs_dt, preferred, check_bit_width=True):
    if preferred is None and lhs_dt == rhs_dt:
        return np.dtype(lhs_dt)
    rt = _input_result_dtype(lhs_dt, rhs_dt)
    if preferred is None or rt == preferred:
        return rt
    if check_bit_width and not dtypes.issubdtype(rt, np.floating) and \
            _bit_width(preferred) < _bit_width(rt):
        raise TypeError("`preferred_element_type` must not be narrower than the original type, "
                        f"got preferred_element_type of {np.dtype(preferred).name} for result "
                        f"type of {rt.name}.")
    return np.dtype(preferred)


def _check_dims(side, dims_batch, dims_contract, ndim):
    if not all(0 <= d < ndim for d in tuple(dims_batch) + tuple(dims_contract)):
        raise TypeError(f"dot_general requires {side} dimension numbers to be nonnegative and "
                        f"less than the number of axes of the {side} value, got {side}_batch of "
                        f"{dims_batch} and {side}_contracting of {dims_contract} for {side} of "
                        f"rank {ndim}")


def _dot_shape(lhs, rhs, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    _check_dims("lhs", lb, lc, lhs.ndim)
    _check_dims("rhs", rb, rc, rhs.ndim)
    if len(lb) != len(rb):
        raise TypeError("dot_general requires equal numbers of lhs_batch and rhs_batch "
                        f"dimensions, got lhs_batch {lb} and rhs_batch {rb}.")
    for side, b, c in (("lhs", lb, lc), ("rhs", rb, rc)):
        if len(set(b)) != len(b):
            raise TypeError(f"dot_general requires {side} batch dimensions to be distinct, got "
                            f"{side}_batch {b}.")
        if len(set(c)) != len(c):
            raise TypeError(f"dot_general requires {side} contracting dimensions to be distinct, "
                            f"got {side}_contracting {c}.")
        if set(b) & set(c):
            raise TypeError(f"dot_general requires {side} batch dimensions to be disjoint from "
                            f"contracting dimensions, got {side}_batch {b} and "
                            f"{side}_contracting {c}.")
    lbs = tuple(lhs.shape[d] for d in lb)
    rbs = tuple(rhs.shape[d] for d in rb)
    if lbs != rbs:
        raise TypeError("dot_general requires lhs batch dimensions and rhs batch dimensions to "
                        f"have the same shape, got {lbs} and {rbs}.")
    lcs = tuple(lhs.shape[d] for d in lc)
    rcs = tuple(rhs.shape[d] for d in rc)
    if lcs != rcs:
        raise TypeError("dot_general requires contracting dimensions to have the same shape, "
                        f"got {lcs} and {rcs}.")
    lf = tuple(lhs.shape[d] for d in range(lhs.ndim) if d not in lc and d not in lb)
    rf = tuple(rhs.shape[d] for d in range(rhs.ndim) if d not in rc and d not in rb)
    return lbs + lf + rf


def _dot_abstract_eval(lhs, rhs, *, dimension_numbers, precision, preferred_element_type,
                       out_sharding):
    shape = _dot_shape(lhs, rhs, dimension_numbers)
    dt = _result_dtype(lhs.dtype, rhs.dtype, preferred_element_type,
                       not _is_algorithm(precision))
    return ShapedArray(shape, dt, lhs.weak_type and rhs.weak_type)


# ----------------------------------------------------------------------------------------------
# impl


_LOW_FLOATS = (np.dtype(np.float16), np.dtype(dtypes.bfloat16))


def _compute_dtype(lhs_dt, rhs_dt, preferred, out_dt):
    """The dtype NumPy multiplies in: the result type, widened for low-precision floats
    and narrow integer inputs (XLA accumulates int8 × int8 → int32 in int32)."""
    rt = _input_result_dtype(lhs_dt, rhs_dt)
    ct = out_dt
    if preferred is not None and rt.kind in "fc" and np.dtype(preferred).kind not in "fc":
        ct = rt
    if ct in _LOW_FLOATS:
        ct = np.dtype(np.float32)
    return ct


def _dot_impl(lhs, rhs, *, dimension_numbers, precision, preferred_element_type, out_sharding):
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    if _is_algorithm(precision) and precision is not DotAlgorithmPreset.DEFAULT:
        return _dot_algorithm_impl(lhs, rhs, dimension_numbers, precision,
                                   preferred_element_type)
    out_dt = _result_dtype(lhs.dtype, rhs.dtype, preferred_element_type,
                           not _is_algorithm(precision))
    ct = _compute_dtype(lhs.dtype, rhs.dtype, preferred_element_type, out_dt)
    if lhs.dtype != ct:
        lhs = lhs.astype(ct)
    if rhs.dtype != ct:
        rhs = rhs.astype(ct)
    (lc, rc), (lb, rb) = dimension_numbers
    if not lb and lhs.ndim in (1, 2) and rhs.ndim in (1, 2) and \
            lc == (lhs.ndim - 1,) and rc == (0,):
        out = np.matmul(lhs, rhs)          # plain matrix/vector product: straight to BLAS
    else:
        lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
        rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
        bshape = tuple(lhs.shape[d] for d in lb)
        lfs = tuple(lhs.shape[d] for d in lf)
        rfs = tuple(rhs.shape[d] for d in rf)
        nb = int(np.prod(bshape, dtype=np.int64))
        m = int(np.prod(lfs, dtype=np.int64))
        n = int(np.prod(rfs, dtype=np.int64))
        k = int(np.prod([lhs.shape[d] for d in lc], dtype=np.int64))
        a = np.transpose(lhs, list(lb) + lf + list(lc)).reshape(nb, m, k)
        b = np.transpose(rhs, list(rb) + list(rc) + rf).reshape(nb, k, n)
        out = (np.matmul(a[0], b[0])[None] if nb == 1 else np.matmul(a, b))
        out = out.reshape(bshape + lfs + rfs)
    if out.dtype != out_dt:
        out = np.asarray(out).astype(out_dt)
    return out


def _dot_algorithm_impl(lhs, rhs, dimension_numbers, precision, preferred_element_type):
    """A dot with a dot algorithm, as JAX's CPU lowering: operands cast to the
    algorithm's types, the product in its accumulation type, then the output dtype."""
    check_cpu_algorithm(precision)
    out_dt = _result_dtype(lhs.dtype, rhs.dtype, preferred_element_type, False)
    lt, rt, at = algorithm_compute_types(precision, lhs.dtype, rhs.dtype, out_dt)
    if lhs.dtype != lt:
        lhs = _convert_value(lhs, lt)
    if rhs.dtype != rt:
        rhs = _convert_value(rhs, rt)
    out = _dot_impl(lhs, rhs, dimension_numbers=dimension_numbers, precision=None,
                    preferred_element_type=None if lt == rt == at else at,
                    out_sharding=None)
    return out if out.dtype == out_dt else _convert_value(out, out_dt)


def _convert_value(x, dt):
    """NumPy value ``x`` as dtype ``dt`` with ``convert_element_type``'s semantics."""
    return np.asarray(convert_element_type_p.impl(x, new_dtype=np.dtype(dt), weak_type=False,
                                                  sharding=None))


dot_general_p = standard_primitive("dot_general", _dot_abstract_eval, _dot_impl)
eager_checked(dot_general_p)


# ----------------------------------------------------------------------------------------------
# jvp and transpose


def _dot_jvp_lhs(g, ans, lhs, rhs, **params):
    return dot_general_p.bind(g, rhs, **params)


def _dot_jvp_rhs(g, ans, lhs, rhs, **params):
    return dot_general_p.bind(lhs, g, **params)


ad.defjvp2(dot_general_p, _dot_jvp_lhs, _dot_jvp_rhs)


def _transpose_operand(ct, x_aval, y, x_is_lhs, dimension_numbers, precision, preferred):
    """Cotangent of one operand ``x`` of ``dot_general`` given the other, ``y``.

    ``ct`` has layout (batch, lhs free, rhs free). Contract its ``y``-free block with
    ``y``'s free dims (batching over the batch dims); the result has layout
    (batch, x free, y contracting sorted), which a transpose puts into ``x``'s order.
    """
    (lc, rc), (lb, rb) = dimension_numbers
    xc, yc, xb, yb = (lc, rc, lb, rb) if x_is_lhs else (rc, lc, rb, lb)
    y_nd = get_aval(y).ndim
    x_kept = [d for d in range(x_aval.ndim) if d not in xc and d not in xb]
    y_kept = [d for d in range(y_nd) if d not in yc and d not in yb]
    nb = len(xb)
    if x_is_lhs:
        ct_y = tuple(range(nb + len(x_kept), nb + len(x_kept) + len(y_kept)))
    else:
        ct_y = tuple(range(nb, nb + len(y_kept)))
    dims = ((ct_y, tuple(y_kept)), (tuple(range(nb)), tuple(yb)))
    res = dot_general_p.bind(ct, y, dimension_numbers=dims, precision=precision,
                             preferred_element_type=preferred, out_sharding=None)
    y_rest = sorted(yc)
    src = list(xb) + x_kept + [xc[list(yc).index(j)] for j in y_rest]
    perm = tuple(int(i) for i in np.argsort(src))
    res = transpose(res, perm)
    if get_aval(res).dtype != x_aval.dtype:
        res = convert_element_type(res, x_aval.dtype)
    return res


def _dot_transpose(ct, lhs, rhs, *, dimension_numbers, precision, preferred_element_type,
                   out_sharding):
    lin_l, lin_r = is_undefined_primal(lhs), is_undefined_primal(rhs)
    if lin_l and lin_r:
        raise ValueError("dot_general: both operands linear (the product is not linear)")
    if type(ct) is Zero:
        return [Zero(lhs.aval) if lin_l else None, Zero(rhs.aval) if lin_r else None]
    if lin_l:
        return [_transpose_operand(ct, lhs.aval, rhs, True, dimension_numbers, precision,
                                   preferred_element_type), None]
    return [None, _transpose_operand(ct, rhs.aval, lhs, False, dimension_numbers, precision,
                                     preferred_element_type)]


ad.transpose_rules[dot_general_p] = _dot_transpose


# ----------------------------------------------------------------------------------------------
# batching


def _dot_batch(axis_data, vals, dims, *, dimension_numbers, precision, preferred_element_type,
               out_sharding):
    (lhs, rhs), (ld, rd) = vals, dims
    (lc, rc), (lb, rb) = dimension_numbers
    params = dict(precision=precision, preferred_element_type=preferred_element_type,
                  out_sharding=None)
    if ld is not None and rd is not None:
        lhs = batching.moveaxis(lhs, ld, 0)
        rhs = batching.moveaxis(rhs, rd, 0)
        dn = ((tuple(d + 1 for d in lc), tuple(d + 1 for d in rc)),
              ((0,) + tuple(d + 1 for d in lb), (0,) + tuple(d + 1 for d in rb)))
        return dot_general_p.bind(lhs, rhs, dimension_numbers=dn, **params), 0
    nb = len(lb)
    if ld is not None:
        # The batch axis of lhs becomes one more free lhs dim.
        def sh(d):
            return d + 1 if d >= ld else d
        lc2, lb2 = tuple(sh(d) for d in lc), tuple(sh(d) for d in lb)
        nd = get_aval(lhs).ndim
        free = [d for d in range(nd) if d not in lc2 and d not in lb2]
        dn = ((lc2, rc), (lb2, rb))
        return dot_general_p.bind(lhs, rhs, dimension_numbers=dn, **params), \
            nb + free.index(ld)

    def sh(d):
        return d + 1 if d >= rd else d
    rc2, rb2 = tuple(sh(d) for d in rc), tuple(sh(d) for d in rb)
    nd = get_aval(rhs).ndim
    free = [d for d in range(nd) if d not in rc2 and d not in rb2]
    n_lfree = get_aval(lhs).ndim - len(lc) - len(lb)
    dn = ((lc, rc2), (lb, rb2))
    return dot_general_p.bind(lhs, rhs, dimension_numbers=dn, **params), \
        nb + n_lfree + free.index(rd)


batching.batch_rules[dot_general_p] = _dot_batch


# ----------------------------------------------------------------------------------------------
# public wrappers


def _canonical_dimension_numbers(dimension_numbers):
    try:
        (lc, rc), (lb, rb) = dimension_numbers
    except (TypeError, ValueError):
        raise TypeError("dot_general dimension_numbers must be of the form "
                        "((lhs_contracting_dims, rhs_contracting_dims), "
                        f"(lhs_batch_dims, rhs_batch_dims)), got {dimension_numbers}") from None

    def ints(s):
        return tuple(int(d) for d in s)
    return ((ints(lc), ints(rc)), (ints(lb), ints(rb)))


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, *,
                out_sharding=None):
    """General tensor contraction.

    ``dimension_numbers = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``;
    the result's axes are the batch axes, then the free lhs axes, then the free rhs axes.
    ``preferred_element_type`` sets the result dtype (e.g. int8 × int8 → int32).
    """
    dn = _canonical_dimension_numbers(dimension_numbers)
    pet = None if preferred_element_type is None else \
        dtypes.check_and_canonicalize_user_dtype(preferred_element_type, "dot_general")
    return dot_general_p.bind(lhs, rhs, dimension_numbers=dn,
                              precision=canonicalize_precision(precision),
                              preferred_element_type=pet, out_sharding=None)


def dot(lhs, rhs, *, dimension_numbers=None, precision=None, preferred_element_type=None,
        out_sharding=None):
    """Vector/matrix dot product (``dimension_numbers`` given: ``dot_general``)."""
    if dimension_numbers is not None:
        return dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type)
    ls, rs = get_aval(lhs).shape, get_aval(rhs).shape
    if 1 <= len(ls) <= 2 and 1 <= len(rs) <= 2 and ls[-1] == rs[0]:
        dn = (((len(ls) - 1,), (0,)), ((), ()))
        return dot_general(lhs, rhs, dn, precision, preferred_element_type)
    raise ValueError("jax.lax.dot: dimension_numbers must be specified when not performing "
                     "simple un-batched matrix-matrix, matrix-vector, or vector-vector "
                     f"products; got lhs_shape={ls} rhs_shape={rs}")


def batch_matmul(lhs, rhs, precision=None):
    """Batched matrix product over all leading axes: ``(..., m, k) @ (..., k, n)``."""
    la, ra = get_aval(lhs), get_aval(rhs)
    if min(la.ndim, ra.ndim) < 2:
        raise ValueError(f"Arguments to batch_matmul must be at least 2D, got {la.ndim}, "
                         f"{ra.ndim}")
    if la.ndim != ra.ndim:
        raise ValueError(f"Arguments to batch_matmul must have same ndim, got {la.ndim}, "
                         f"{ra.ndim}")
    batch = tuple(range(la.ndim - 2))
    return dot_general(lhs, rhs, (((la.ndim - 1,), (ra.ndim - 2,)), (batch, batch)), precision)


__all__ = ["dot_general", "dot", "batch_matmul", "Precision", "DotAlgorithm",
           "DotAlgorithmPreset", "DotDimensionNumbers", "canonicalize_precision",
           "dot_general_p"]
