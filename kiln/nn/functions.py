"""Activations, softmax, ``one_hot``, ``standardize`` and ``dot_product_attention``, as
``jax.nn``.

Built only from ``kiln.lax``/``kiln.numpy`` (so everything works under ``jit``/``grad``/
``vmap``). Custom derivatives follow JAX: ``relu``/``relu6`` have gradient 0 at their kinks,
``log1mexp`` differentiates as ``1 / expm1(x)``. ``softmax`` follows JAX's default
(``jax_softmax_custom_jvp=False``): the max it subtracts is a ``stop_gradient``.
"""
from __future__ import annotations

import dataclasses
import math
import operator
import warnings

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.custom_derivatives import custom_jvp
from kiln.numpy._util import (
    canonicalize_axes,
    canonicalize_axis,
    check_arraylike,
    check_arraylike_or_none,
    ensure_arraylike,
    promote_args_inexact,
)

__all__ = [
    "celu", "dot_product_attention", "elu", "gelu", "glu", "hard_sigmoid", "hard_silu",
    "hard_swish", "hard_tanh", "identity", "leaky_relu", "log1mexp", "log_sigmoid",
    "log_softmax", "logmeanexp", "logsumexp", "mish", "one_hot", "relu", "relu6",  # noqa: F822 (module __getattr__)
    "scaled_dot_general", "scaled_matmul", "selu", "sigmoid", "silu", "soft_sign", "softmax",
    "softplus", "sparse_plus", "sparse_sigmoid", "squareplus", "standardize", "swish", "tanh",
]

tanh = jnp.tanh


def _logsumexp(*args, **kwargs):
    # ``kiln.scipy.special`` (and the ``kiln.scipy`` package) are imported on first use, not
    # by ``import kiln``.
    from kiln.scipy.special import logsumexp
    return logsumexp(*args, **kwargs)


def __getattr__(name):
    # ``logsumexp`` is ``kiln.scipy.special.logsumexp`` itself (as ``jax.nn.logsumexp`` is
    # ``jax.scipy.special.logsumexp``), resolved on first access.
    if name == "logsumexp":
        from kiln.scipy.special import logsumexp
        globals()["logsumexp"] = logsumexp
        return logsumexp
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _arr(name, x):
    return ensure_arraylike(name, x)


def identity(x):
    """Returns its argument (as an array)."""
    return _arr("identity", x)


def _relu(x):
    return jnp.maximum(x, 0)


relu = custom_jvp(_relu)
relu.defjvps(lambda g, ans, x: lax.select(x > 0, g, lax.full_like(g, 0)))
relu.__doc__ = "Rectified linear unit ``max(x, 0)``; its derivative at 0 is 0 (as JAX)."
relu.__name__ = "relu"


def _relu6(x):
    return jnp.minimum(jnp.maximum(x, 0), 6.)


relu6 = custom_jvp(_relu6)
relu6.defjvps(lambda g, ans, x: lax.select((x > 0) & (x < 6), g, lax.full_like(g, 0)))
relu6.__doc__ = "``min(max(x, 0), 6)``; derivative 0 at both kinks."
relu6.__name__ = "relu6"


def squareplus(x, b=4):
    """``(x + sqrt(x**2 + b)) / 2``."""
    x, b = ensure_arraylike("squareplus", x, b)
    y = x + jnp.sqrt(jnp.square(x) + b)
    return y / 2


def softplus(x):
    """``log(1 + exp(x))``."""
    x, zero = promote_args_inexact("softplus", x, 0)
    return jnp.logaddexp(x, zero)


def sparse_plus(x):
    """0 for ``x <= -1``, ``x`` for ``x >= 1``, ``(x + 1)**2 / 4`` in between."""
    x = _arr("sparse_plus", x)
    return jnp.where(x <= -1.0, 0.0, jnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


def soft_sign(x):
    """``x / (|x| + 1)``."""
    x = _arr("soft_sign", x)
    return x / (jnp.abs(x) + 1)


def sigmoid(x):
    """The logistic sigmoid ``1 / (1 + exp(-x))``."""
    return lax.logistic(x)


def sparse_sigmoid(x):
    """``clip((x + 1) / 2, 0, 1)``."""
    return 0.5 * jnp.clip(x + 1.0, 0.0, 2.0)


def silu(x):
    """``x * sigmoid(x)``."""
    x = _arr("silu", x)
    return x * sigmoid(x)


swish = silu


def mish(x):
    """``x * tanh(softplus(x))``."""
    x = _arr("mish", x)
    return x * jnp.tanh(softplus(x))


def log_sigmoid(x):
    """``log(sigmoid(x))`` computed as ``-softplus(-x)``."""
    x = _arr("log_sigmoid", x)
    return -softplus(-x)


def elu(x, alpha=1.0):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    x = _arr("elu", x)
    return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.where(x > 0, 0., x)))


def leaky_relu(x, negative_slope=1e-2):
    """``x`` for ``x >= 0``, else ``negative_slope * x``."""
    x = _arr("leaky_relu", x)
    return jnp.where(x >= 0, x, negative_slope * x)


def hard_tanh(x):
    """``clip(x, -1, 1)``."""
    x = _arr("hard_tanh", x)
    return jnp.where(x > 1, 1, jnp.where(x < -1, -1, x))


def celu(x, alpha=1.0):
    """``max(x, 0) + alpha * expm1(min(x, 0) / alpha)``."""
    return jnp.maximum(x, 0.0) + alpha * jnp.expm1(jnp.minimum(x, 0.0) / alpha)


def selu(x):
    """Scaled exponential linear unit."""
    alpha = 1.6732632423543772848170429916717
    scale = 1.0507009873554804934193349852946
    return scale * elu(x, alpha)


def gelu(x, approximate: bool = True):
    """Gaussian error linear unit (tanh approximation by default, exact with erf)."""
    x, = promote_args_inexact("gelu", x)
    if approximate:
        c = np.sqrt(2 / np.pi).astype(x.dtype)
        cdf = 0.5 * (1.0 + jnp.tanh(c * (x + 0.044715 * (x ** 3))))
        return x * cdf
    sqrt_half = np.sqrt(0.5).astype(x.dtype)
    return jnp.array(0.5 * x * lax.erfc(-x * sqrt_half), dtype=x.dtype)


def glu(x, axis: int = -1):
    """Gated linear unit: split ``x`` in two along ``axis``; ``x1 * sigmoid(x2)``."""
    x = _arr("glu", x)
    size = x.shape[axis]
    assert size % 2 == 0, "axis size must be divisible by 2"
    x1, x2 = jnp.split(x, 2, axis)
    return x1 * sigmoid(x2)


def hard_sigmoid(x):
    """``relu6(x + 3) / 6``."""
    return relu6(x + 3.) / 6.


def hard_silu(x):
    """``x * hard_sigmoid(x)``."""
    x = _arr("hard_silu", x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def _log1mexp(x):
    x = _arr("log1mexp", x)
    c = jnp.log(2.0)
    return jnp.where(x < c, jnp.log(-jnp.expm1(-x)), jnp.log1p(-jnp.exp(-x)))


log1mexp = custom_jvp(_log1mexp)
log1mexp.defjvps(lambda g, ans, x: g / jnp.expm1(x))
log1mexp.__doc__ = "``log(1 - exp(-x))``, accurate for small and large ``x``."
log1mexp.__name__ = "log1mexp"


# ----------------------------------------------------------------------------------------------
# normalizations

def _count(x, axis, where, keepdims, dtype):
    shape = np.shape(x)
    axes = tuple(range(len(shape))) if axis is None else canonicalize_axes(axis, len(shape))
    if where is None:
        n = math.prod(shape[a] for a in axes)
        out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keepdims \
            else tuple(d for i, d in enumerate(shape) if i not in axes)
        return jnp.full(out_shape, n, dtype=dtype)
    w = jnp.broadcast_to(where, shape)
    return jnp.sum(w, axis=axes, keepdims=keepdims, dtype=dtype)


def logmeanexp(x, axis=None, where=None, keepdims: bool = False):
    """``log(mean(exp(x)))`` computed stably."""
    lse = _logsumexp(x, axis=axis, where=where, keepdims=keepdims)
    count = _count(x, axis, where, keepdims, lse.dtype)
    return lse - jnp.log(count)


def log_softmax(x, axis=-1, where=None):
    """``x - logsumexp(x)`` along ``axis``; masked entries (``where`` False) give ``-inf``."""
    x = _arr("log_softmax", x)
    x_max = jnp.max(x, axis, where=where, initial=-np.inf, keepdims=True)
    x_safe = x if where is None else jnp.where(where, x, -np.inf)
    shifted = x_safe - lax.stop_gradient(x_max)
    shifted_logsumexp = jnp.log(jnp.sum(jnp.exp(shifted), axis, where=where, keepdims=True))
    result = shifted - shifted_logsumexp
    if where is not None:
        return jnp.where(where, result, -np.inf)
    return result


def softmax(x, axis=-1, where=None):
    """``exp(x) / sum(exp(x))`` along ``axis``; masked entries (``where`` False) give 0."""
    return _softmax(x, axis, where)


def _softmax(x, axis=-1, where=None, initial=-np.inf):
    x_max = jnp.max(x, axis, where=where, initial=initial, keepdims=True)
    x_safe = x if where is None else jnp.where(where, x, initial)
    unnormalized = jnp.exp(x_safe - lax.stop_gradient(x_max))
    result = unnormalized / jnp.sum(unnormalized, axis, where=where, keepdims=True)
    if where is not None:
        result = jnp.where(where, result, 0)
    return result


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None, *,
                algorithm: str = "fast"):
    """``(x - mean) / sqrt(variance + epsilon)`` along ``axis``."""
    check_arraylike("standardize", x)
    check_arraylike_or_none("standardize", mean, variance, where)
    if mean is None:
        mean = jnp.mean(x, axis, keepdims=True, where=where)
    if variance is None:
        if algorithm == "stable":
            variance = jnp.mean(jnp.square(jnp.subtract(x, mean)), axis, keepdims=True,
                                where=where)
        elif algorithm == "fast":
            # E[x^2] - E[x]^2 can come out slightly negative; clip it (as JAX).
            variance = jnp.mean(jnp.square(x), axis, keepdims=True, where=where) \
                - jnp.square(mean)
            variance = jnp.clip(variance, 0)
        else:
            raise ValueError(f"Unknown algorithm '{algorithm}'. Expected 'fast' or 'stable'.")
    return jnp.subtract(x, mean) * lax.rsqrt(variance + epsilon)


def one_hot(x, num_classes: int, *, dtype=None, axis=-1):
    """One-hot encode ``x`` along a new ``axis`` (or along a named ``vmap``/``pmap`` axis)."""
    from kiln.numpy._util import concrete_value
    num_classes = operator.index(concrete_value(
        num_classes, "The error arose in jax.nn.one_hot argument `num_classes`."))
    x = jnp.asarray(x)
    if not dtypes.issubdtype(x.dtype, np.integer):
        warnings.warn(f"jax.nn.one_hot input should be integer-typed; got dtype={x.dtype}",
                      DeprecationWarning, stacklevel=2)
    dtype = dtypes.default_float_dtype() if dtype is None else dtype
    try:
        out_axis = canonicalize_axis(axis, x.ndim + 1)
    except TypeError:
        axis_size = int(lax.psum(1, axis))
        if num_classes != axis_size:
            raise ValueError(f"Expected num_classes to match the size of axis {axis}, "
                             f"but {num_classes} != {axis_size}") from None
        return jnp.asarray(x == lax.axis_index(axis), dtype=dtype)
    lhs = lax.expand_dims(x, (out_axis,))
    rhs_shape = [1] * x.ndim
    rhs_shape.insert(out_axis, num_classes)
    rhs = lax.broadcasted_iota(x.dtype, rhs_shape, out_axis)
    return (lhs == rhs).astype(dtype)


# ----------------------------------------------------------------------------------------------
# attention

def _large_negative(dtype):
    dtype_max = min(float(dtypes.finfo(dtype).max), float(np.finfo(np.float32).max))
    return jnp.asarray(-0.7 * dtype_max, dtype=dtype)


def _attention_mask(T, S, B, mask, is_causal, q_seqlen, kv_seqlen, local_window_size):
    """The combined boolean mask, broadcastable to ``(B, K, G, T, S)``, or None."""
    combined = None

    def _and(m):
        nonlocal combined
        combined = m if combined is None else jnp.logical_and(combined, m)

    if mask is not None:
        _and(mask)
    # Every piece is rank 5, (B|1, K|1, G|1, T, S), so that combining them never relies on
    # rank promotion (JAX's tests run with jax_numpy_rank_promotion='raise').
    if is_causal:
        _and(jnp.tril(jnp.ones((T, S), dtype=bool))[None, None, None])
    if local_window_size is not None:
        left, right = local_window_size
        q_pos = jnp.arange(T)[:, None]
        k_pos = jnp.arange(S)[None, :]
        _and(((q_pos <= k_pos + left) & (q_pos >= k_pos - right))[None, None, None])
    if q_seqlen is not None or kv_seqlen is not None:
        m = jnp.ones((1, T, S), dtype=bool)
        if q_seqlen is not None:
            m = m & (jnp.arange(T)[None, :, None] < q_seqlen[:, None, None])
        if kv_seqlen is not None:
            m = m & (jnp.arange(S)[None, None, :] < kv_seqlen[:, None, None])
        _and(m[:, None, None, :, :])
    return combined


def _grouped(t, K, G):
    """A ``(B?, N?, T?, S?)`` bias/mask as ``(B?, K|1, G|1, T?, S?)``."""
    if t is None:
        return None
    tB, tN, tT, tS = t.shape
    if tN == 1:
        return t[:, :, None, :, :]
    return jnp.reshape(t, (tB, K, G, tT, tS))


def _attention_xla(query, key, value, bias, mask, is_causal, scale, q_seqlen, kv_seqlen,
                   local_window_size, return_residual):
    B, T, N, H = query.shape
    _, S, K, _ = key.shape
    G = N // K
    q = jnp.reshape(query, (B, T, K, G, H))
    logits_dtype = jnp.promote_types(query.dtype, np.float32)
    logits = jnp.einsum("BTKGH,BSKH->BKGTS", q, key, preferred_element_type=logits_dtype)
    logits = logits * jnp.array(scale, dtype=logits.dtype)
    bias = _grouped(bias, K, G)
    if bias is not None:
        logits = (logits + bias).astype(logits.dtype)
    mask = _grouped(mask, K, G)
    combined = _attention_mask(T, S, B, mask, is_causal, q_seqlen, kv_seqlen,
                               local_window_size)
    if combined is not None:
        logits = jnp.where(combined, logits, _large_negative(logits.dtype))
    logits = logits.astype(np.float32)
    probs = softmax(logits, axis=-1).astype(key.dtype)
    encoded = jnp.einsum("BKGTS,BSKH->BTKGH", probs, value)
    encoded = jnp.reshape(encoded, (B, T, N, H))
    if q_seqlen is not None:
        valid = jnp.arange(T)[None, :] < q_seqlen[:, None]
        encoded = encoded * valid[:, :, None, None].astype(encoded.dtype)
    if return_residual:
        lse = _logsumexp(logits, axis=-1).astype(key.dtype)          # (B, K, G, T)
        lse = jnp.reshape(jnp.transpose(lse, (0, 3, 1, 2)), (B, T, N))
        return encoded, lax.stop_gradient(lse)
    return encoded


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None,
                          is_causal: bool = False, query_seq_lengths=None,
                          key_value_seq_lengths=None, local_window_size=None,
                          implementation=None, return_residual: bool = False):
    """Scaled dot-product attention on ``(B, T, N, H)`` query and ``(B, S, K, H)`` key/value
    (``N`` a multiple of ``K``: grouped-query attention), as ``jax.nn.dot_product_attention``.

    Only the portable (``'xla'``/``None``) implementation exists; ``'cudnn'`` raises.
    """
    output_shape = jnp.asarray(query).shape
    residual_shape = output_shape[:-1]

    def _ensure_4d(t):
        t = jnp.asarray(t)
        missing = 4 - t.ndim
        return jnp.expand_dims(t, axis=tuple(range(missing))) if missing > 0 else t

    query_arr, key_arr, value_arr = _ensure_4d(query), _ensure_4d(key), _ensure_4d(value)
    bias = _ensure_4d(bias) if bias is not None else None
    mask = _ensure_4d(mask) if mask is not None else None
    if query_seq_lengths is not None:
        query_seq_lengths = jnp.asarray(query_seq_lengths)
    if key_value_seq_lengths is not None:
        key_value_seq_lengths = jnp.asarray(key_value_seq_lengths)
    if isinstance(local_window_size, int):
        local_window_size = (local_window_size, local_window_size)

    def _check(t, shape, dtype, name):
        if t is None:
            return
        if t.ndim != len(shape):
            raise ValueError(f"{name} ndim should be {len(shape)}, but got {t.ndim}")
        if dtype is not None and t.dtype != dtype:
            raise ValueError(f"{name} dtype should be {dtype}, but got {t.dtype}")
        for i in range(t.ndim):
            if shape[i] != -1 and t.shape[i] != shape[i]:
                raise ValueError(f"{name} shape should be {shape}: but got {t.shape}")

    B, S, K, H = key_arr.shape
    _check(value_arr, [B, S, K, H], key_arr.dtype, "value")
    _check(query_arr, [B, -1, -1, H], key_arr.dtype, "query")
    _check(mask, [-1] * 4, np.dtype(bool), "mask")
    _check(bias, [-1] * 4, None, "bias")
    _check(query_seq_lengths, [B], np.dtype("int32"), "query_seq_lengths")
    _check(key_value_seq_lengths, [B], np.dtype("int32"), "key_value_seq_lengths")
    if query_arr.shape[-2] % K != 0:
        raise ValueError("The number of query heads must be a multiple of key/value heads, "
                         f"but got {query_arr.shape[-2]} vs {K}")
    scale_val = (1.0 / np.sqrt(H)) if scale is None else scale

    if implementation not in (None, "xla"):
        if implementation == "cudnn":
            raise NotImplementedError("kiln: the 'cudnn' attention implementation is not "
                                      "available; use implementation=None or 'xla'.")
        raise ValueError(f"Unsupported implementation option: {implementation}")
    out = _attention_xla(query_arr, key_arr, value_arr, bias, mask, is_causal, scale_val,
                         query_seq_lengths, key_value_seq_lengths, local_window_size,
                         return_residual)
    if return_residual:
        out, residual = out
        return jnp.reshape(out, output_shape), jnp.reshape(residual, residual_shape)
    return jnp.reshape(out, output_shape)


# ----------------------------------------------------------------------------------------------
# scaled matmuls (block-scaled low-precision formats are a cuDNN feature)

@dataclasses.dataclass(slots=True)
class BlockScaleConfig:
    """How one operand of :func:`scaled_dot_general` is block-quantized (as JAX's)."""
    mode: str
    block_size: int
    data_type: object
    scale_type: object
    global_scale: object
    infer_only: bool


def get_scaled_dot_general_config(mode, global_scale=None):
    """Quantization configs for :func:`scaled_dot_general`, as ``jax.nn``'s.

    Args:
      mode: ``'nvfp4'`` (blocks of 16 in float4_e2m1fn, float8_e4m3fn scales, a global
        scale, by default ``[1.0]``) or ``'mxfp8'`` (blocks of 32 in float8_e4m3fn,
        float8_e8m0fnu scales).
      global_scale: the nvfp4 global scale.

    Returns:
      A ``BlockScaleConfig``.
    """
    import ml_dtypes
    if mode == "nvfp4":
        return BlockScaleConfig(
            mode="nvfp4", block_size=16, data_type=ml_dtypes.float4_e2m1fn,
            scale_type=ml_dtypes.float8_e4m3fn,
            global_scale=jnp.ones((1,), np.float32) if global_scale is None else global_scale,
            infer_only=False)
    if mode == "mxfp8":
        return BlockScaleConfig(
            mode="mxfp8", block_size=32, data_type=ml_dtypes.float8_e4m3fn,
            scale_type=ml_dtypes.float8_e8m0fnu, global_scale=None, infer_only=False)
    raise ValueError(f"Unsupported mode: {mode}")


def scaled_dot_general(lhs, rhs, dimension_numbers, preferred_element_type=np.float32,
                       configs=None, implementation=None):
    """``lax.dot_general`` when ``configs`` is None. Block-scaled ``configs`` need the cuDNN
    kernel; JAX raises NotImplementedError for them on CPU, and so does kiln."""
    if implementation is not None:
        warnings.warn("Backend selector, now ignored. The system chooses the backend "
                      "automatically.", DeprecationWarning, stacklevel=2)
    if configs is None:
        return lax.dot_general(lhs, rhs, dimension_numbers,
                               preferred_element_type=preferred_element_type)
    raise NotImplementedError("scaled_dot_general with block-scaled configs needs the cuDNN "
                              "scaled_matmul kernel, which kiln (like JAX on CPU) does not have.")


def scaled_matmul(lhs, rhs, lhs_scales, rhs_scales, preferred_element_type=np.float32):
    """Block-scaled matmul ``(B, M, K) x (B, N, K) -> (B, M, N)``.

    Each operand block of ``K // scales.shape[-1]`` elements is multiplied by its scale,
    then the products are contracted in ``preferred_element_type``.
    """
    a, b, a_s, b_s = (jnp.asarray(t) for t in (lhs, rhs, lhs_scales, rhs_scales))
    if not all(t.ndim == 3 for t in (a, b, a_s, b_s)):
        raise ValueError("scaled_matmul requires all inputs to be 3-dimensional arrays")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        raise ValueError("scaled_matmul requires inputs a and b to have matching batch (B) "
                         f"and contract (K) dimensions, but got shapes {a.shape} and "
                         f"{b.shape}")
    if a_s.shape[0] != b_s.shape[0] or a_s.shape[2] != b_s.shape[2]:
        raise ValueError("scaled_matmul requires scales to have matching batch (B) and "
                         f"contract (K) dimensions, but got shapes {a_s.shape} and "
                         f"{b_s.shape}")
    if a_s.shape[1] != a.shape[1] or b_s.shape[1] != b.shape[1]:
        raise ValueError("scaled_matmul requires scales to match non-contract dimensions of "
                         f"inputs, but got shapes a: {a.shape}, b: {b.shape}, a_scales: "
                         f"{a_s.shape}, b_scales: {b_s.shape}")
    dt = np.dtype(preferred_element_type)
    block = a.shape[2] // a_s.shape[2]

    def _scaled(x, s):
        x = x.astype(dt)
        s = jnp.repeat(s.astype(dt), block, axis=2)
        return x * s

    return jnp.einsum("bmk,bnk->bmn", _scaled(a, a_s), _scaled(b, b_s),
                      preferred_element_type=dt)
