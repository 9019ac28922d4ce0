"""Rejection samplers and everything built on gamma.

* ``random_gamma_p``: gamma (or log-gamma) samples for an array of shape
  parameters, one Marsaglia-Tsang rejection loop per element, as JAX's primitive
  of the same name. The impl runs the loops of all elements together in NumPy
  (an element's state changes only while its own loop runs, which is what the
  batched ``while_loop`` of JAX's vmapped lowering does), so the samples are
  JAX's. Its JVP is JAX's implicit derivative (``random_gamma_grad``).
* ``random_poisson_p`` and ``random_binomial_p``: JAX's poisson (Knuth for small
  rates, Hormann's transformed rejection otherwise) and binomial (inversion, or
  BTRS) samplers, whose loops run until every element of the sample is done.
* The public samplers: gamma, loggamma, beta, dirichlet, t, chisquare, f,
  generalized_normal, ball, poisson, binomial, multinomial.

All impls follow JAX's key splits; their arithmetic uses ``_xla_math`` (see
docs/random.md for which of them match JAX bit for bit).
"""
from __future__ import annotations

import math

import numpy as np

from kiln import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.lax._factory import standard_primitive
from kiln.random import _native
from kiln.random import _np_samplers as nps
from kiln.random import _util as u
from kiln.random import _xla_math as xm
from kiln.random._distributions import (
    _split,
    check_all_safe_to_cast,
    check_broadcast_shapes,
    check_shape,
    exponential,
    float_dtype,
    normal,
    rademacher,
)
from kiln.random._keys import PRNGKeyArray, canonicalize_shape, check_prng_key, split

# ----------------------------------------------------------------------------------------------
# gamma: one Marsaglia-Tsang loop per element.


def _gamma_c(d):
    """c = (1/3) / sqrt(d), which XLA computes as (1/3) * rsqrt(d).

    XLA's CPU rsqrt is the processor's approximate reciprocal square root refined by
    Newton steps (float32: one on AMD processors, two elsewhere, as XLA; float64: two
    from AVX-512's estimate; without AVX-512 XLA uses 1/sqrt),
    reproduced by the native kernel where it can be built (x86); elsewhere the
    correctly rounded 1/sqrt(d) is used, and c may differ from JAX's in the last bit
    (see docs/random.md).
    """
    dt = d.dtype
    if dt == np.float32 and _native.has_rsqrt_estimate():
        r = _native.rsqrt_f32(d)
    elif dt in (np.float16, dtypes.bfloat16) and _native.has_rsqrt_estimate():
        r = _native.rsqrt_f32(d.astype(np.float32)).astype(dt)
    elif dt == np.float64 and _native.has_rsqrt14():
        r = _native.rsqrt_f64(d)
    else:
        r = (dt.type(1) / np.sqrt(d)).astype(dt)
    return (dt.type(1. / 3.) * r).astype(dt)


def _impl_param(key):
    """The ``impl`` parameter of the rejection primitives: None for threefry keys (their
    jaxprs print as before), the implementation otherwise."""
    return None if key._impl.name == "threefry2x32" else key._impl


def _gamma_one_np(keys, alpha, log_space):
    """Samples for raw keys ``(n, 2)`` and shape parameters ``alpha (n,)``."""
    dt = alpha.dtype
    T = dt.type
    one, zero = T(1), T(0)
    with np.errstate(all="ignore"):
        boost_mask = alpha >= one
        alpha_b = np.where(boost_mask, alpha, (alpha + one).astype(dt))
        d = (alpha_b - T(1. / 3.)).astype(dt)
        c = _gamma_c(d)
        key, subkey = nps.split_parts(keys, 2)
        key = key.copy()
        n = alpha.shape[0]
        X = np.zeros(n, dt)
        V = np.ones(n, dt)
        U = np.full(n, T(2), dt)
        squeeze = T(0.0331)
        half = T(0.5)

        def outer_cond(X, V, U, d):
            c1 = U >= nps.fma(-squeeze, (X * X).astype(dt), one)
            rhs = ((X * half).astype(dt) + (d * (((one - V).astype(dt) + xm.log(V)).astype(dt)))
                   .astype(dt)).astype(dt)
            return c1 & (xm.log(U) >= rhs)

        active = outer_cond(X, V, U, d)
        while active.any():
            idx = np.nonzero(active)[0]
            k_next, x_key, u_key = nps.split_parts(key[idx], 3)
            ci = c[idx]
            m = idx.shape[0]
            xk = x_key.copy()
            x = np.zeros(m, dt)
            v = np.full(m, -one, dt)
            inner = v <= zero
            while inner.any():
                j = np.nonzero(inner)[0]
                kk, sub = nps.split_parts(xk[j], 2)
                xk[j] = kk
                xn = nps.normal(sub, (), dt)
                x[j] = xn
                v[j] = nps.fma(xn, ci[j], one)
                inner = v <= zero
            key[idx] = k_next
            X[idx] = (x * x).astype(dt)
            V[idx] = ((v * v).astype(dt) * v).astype(dt)
            U[idx] = nps.uniform(u_key, (), dt)
            active[idx] = outer_cond(X[idx], V[idx], U[idx], d[idx])
        if log_space:
            log_samples = -nps.exponential(subkey, (), dt)
            inv = (one / alpha).astype(dt)
            log_boost = np.where(boost_mask | (log_samples == zero), zero,
                                 (log_samples * inv).astype(dt))
            return ((xm.log(d) + xm.log(V)).astype(dt) + log_boost).astype(dt)
        samples = (one - nps.uniform(subkey, (), dt)).astype(dt)
        boost = np.where(boost_mask, one,
                         xm._pow_impl(samples, (one / alpha).astype(dt)).astype(dt))
        return (((d * V).astype(dt)) * boost).astype(dt)


def _gamma_impl(keys, a, *, log_space, scalar_alpha, impl=None):
    a = np.asarray(a)
    nk = keys.shape[-1]
    kshape = keys.shape[:-1]
    split_count = math.prod(a.shape[len(kshape):])
    flat_keys = keys.reshape(-1, nk)
    with nps.using(impl):
        # JAX: ``vmap(split)`` over the keys, then ``lax.map`` of one sample per key.
        sub = nps.split(flat_keys, split_count, vmapped=True).reshape(-1, nk)
        alphas = a.reshape(-1)
        if alphas.size == 0:
            return np.zeros(a.shape, a.dtype)
        out = _gamma_one_np(sub, alphas, log_space)
    return out.reshape(a.shape)


def _gamma_abstract_eval(keys, a, *, log_space, scalar_alpha, impl=None):
    return ShapedArray(a.shape, a.dtype)


random_gamma_p = standard_primitive("random_gamma", _gamma_abstract_eval, _gamma_impl,
                                    weak_type_rule=lambda *a, **k: False)


def _gamma_batch(axis_data, vals, dims, *, log_space, scalar_alpha, impl=None):
    (k, a), (dk, da) = vals, dims
    size = axis_data.size
    k = batching.bdim_at_front(k, dk, size)
    a = batching.bdim_at_front(a, da, size)
    return random_gamma_p.bind(k, a, log_space=log_space,
                               scalar_alpha=scalar_alpha and da is None, impl=impl), 0


batching.batch_rules[random_gamma_p] = _gamma_batch


def _gamma_grad(sample, a, *, log_space):
    lax = u.lax()
    shape = u.shape(a)
    n = math.prod(shape)
    samples = u.reshape(sample, (n,))
    alphas = u.reshape(a, (n,))
    if log_space:
        # d[log(sample)] = d[sample] / sample, with exp(log_sample) floored at the
        # smallest normal float (it may round to zero).
        samples = u.exp(samples)
        tiny = u.const(samples, dtypes.finfo(u.dtype_of(samples)).tiny)
        samples = u.select(u.eq(samples, u.const(samples, 0)), tiny, samples)
        grads = u.div(lax.random_gamma_grad(alphas, samples), samples)
    else:
        grads = lax.random_gamma_grad(alphas, samples)
    return u.reshape(grads, shape)


def _gamma_jvp(primals, tangents, *, log_space, scalar_alpha, impl=None):
    (k, a), (_, ta) = primals, tangents
    ans = random_gamma_p.bind(k, a, log_space=log_space, scalar_alpha=scalar_alpha,
                              impl=impl)
    if type(ta) is ad.Zero:
        return ans, ad.Zero.from_primal_value(ans)
    return ans, u.lax().mul(ta, _gamma_grad(ans, a, log_space=log_space))


ad.jvp_rules[random_gamma_p] = _gamma_jvp


def _gamma(key: PRNGKeyArray, a, shape, dtype, log_space=False, scalar=None):
    """``scalar``: whether ``a`` is a broadcast scalar in JAX's program (default: it is
    when it has rank 0 and the sample does not)."""
    if shape is None:
        shape = u.shape(a)
    else:
        check_shape("gamma", shape, u.shape(a))
    scalar_alpha = (not u.shape(a) and len(shape) > 0) if scalar is None else scalar
    a = u.convert(a, dtype)
    if u.shape(a) != tuple(shape):
        a = u.broadcast_to(a, shape)
    return random_gamma_p.bind(key._base_array, a, log_space=log_space,
                               scalar_alpha=scalar_alpha, impl=_impl_param(key))


def gamma(key, a, shape=None, dtype=None, *, out_sharding=None):
    """Gamma(a, 1) samples; differentiable in ``a`` (implicit reparameterization)."""
    key, _ = check_prng_key("gamma", key)
    dtype = float_dtype("gamma", dtype)
    if shape is not None:
        shape = canonicalize_shape(shape)
    return _gamma(key, a, shape, dtype)


def loggamma(key, a, shape=None, dtype=None, *, out_sharding=None):
    """log of Gamma(a, 1) samples, computed in log space (accurate for small ``a``)."""
    key, _ = check_prng_key("loggamma", key)
    dtype = float_dtype("gamma", dtype)
    if shape is not None:
        shape = canonicalize_shape(shape)
    return _gamma(key, a, shape, dtype, log_space=True)


def beta(key, a, b, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("beta", key)
    dtype = float_dtype("beta", dtype)
    check_all_safe_to_cast("beta", dtype, a, b)
    shape = check_broadcast_shapes("beta", shape, a, b)
    sa = not u.shape(a) and len(shape) > 0
    sb = not u.shape(b) and len(shape) > 0
    a = u.broadcast_to(u.convert(a, dtype), shape)
    b = u.broadcast_to(u.convert(b, dtype), shape)
    key_a, key_b = _split(key)
    log_gamma_a = _gamma(key_a, a, shape, dtype, log_space=True, scalar=sa)
    log_gamma_b = _gamma(key_b, b, shape, dtype, log_space=True, scalar=sb)
    log_max = u.maximum(log_gamma_a, log_gamma_b)
    ga = u.exp(u.sub(log_gamma_a, log_max))
    gb = u.exp(u.sub(log_gamma_b, log_max))
    return u.div(ga, u.add(ga, gb))


def dirichlet(key, alpha, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("dirichlet", key)
    dtype = float_dtype("dirichlet", dtype)
    if shape is not None:
        shape = canonicalize_shape(shape)
    ashape = u.shape(alpha)
    if not len(ashape) >= 1:
        raise ValueError(f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == {len(ashape)}")
    if shape is None:
        shape = ashape[:-1]
    else:
        check_shape("dirichlet", shape, ashape[:-1])
    alpha = u.convert(alpha, dtype)
    log_gamma_samples = _gamma(key, alpha, tuple(shape) + ashape[-1:], dtype, log_space=True)
    return _softmax_last(log_gamma_samples)


def _softmax_last(x):
    """jax.nn.softmax(x, -1): exp(x - max) / sum(exp(x - max)), with XLA's order of
    summation and the division by the sum done as a multiplication by its
    reciprocal, as XLA does."""
    lax = u.lax()
    m = lax.stop_gradient(u.max_(x, -1))
    s = u.shape(x)
    nd = len(s)
    unnormalized = u.exp(u.sub(x, u.broadcast_to(u.expand_dims(m, (nd - 1,)), s)))
    total = u.row_sum(unnormalized)
    inv = u.div(u.const(total, 1), total)
    return u.mul(unnormalized, u.broadcast_to(u.expand_dims(inv, (nd - 1,)), s))


def t(key, df, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("t", key)
    dtype = float_dtype("t", dtype)
    shape = check_broadcast_shapes("t", shape, df)
    check_all_safe_to_cast("t", dtype, df)
    scalar = not u.shape(df)
    df = u.convert(df, dtype)
    key_n, key_g = _split(key)
    n = normal(key_n, shape, dtype)
    half_df = u.div(df, u.const(dtype, 2))
    g = _gamma_scalar_flag(key_g, half_df, shape, dtype, scalar and len(shape) > 0)
    return u.mul(n, u.sqrt(u.div(half_df, g)))


def _gamma_scalar_flag(key, a, shape, dtype, scalar, log_space=False):
    """``_gamma`` for a parameter that is a broadcast scalar in JAX's program when
    ``scalar`` (it may already have been broadcast here)."""
    a = u.convert(a, dtype)
    if u.shape(a) != tuple(shape):
        a = u.broadcast_to(a, shape)
    return random_gamma_p.bind(key._base_array, a, log_space=log_space, scalar_alpha=scalar,
                               impl=_impl_param(key))


def chisquare(key, df, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("chisquare", key)
    dtype = float_dtype("chisquare", dtype)
    shape = check_broadcast_shapes("chisquare", shape, df)
    check_all_safe_to_cast("chisquare", dtype, df)
    return _chisquare(key, df, shape, dtype)


def _chisquare(key, df, shape, dtype):
    scalar = not u.shape(df)
    df = u.convert(df, dtype)
    two = u.const(dtype, 2)
    half_df = u.div(df, two)
    log_g = _gamma_scalar_flag(key, half_df, shape, dtype, scalar and len(shape) > 0,
                               log_space=True)
    return u.mul(u.exp(log_g), two)


def f(key, dfnum, dfden, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("f", key)
    dtype = float_dtype("f", dtype)
    shape = check_broadcast_shapes("f", shape, dfnum, dfden)
    check_all_safe_to_cast("f", dtype, dfnum, dfden)
    dfden = u.convert(dfden, dtype)
    dfnum = u.convert(dfnum, dtype)
    key_dfd, key_dfn = _split(key)
    chi2_dfn = _chisquare(key_dfn, dfnum, shape, dtype)
    chi2_dfd = _chisquare(key_dfd, dfden, shape, dtype)
    # (chi2_dfn / dfnum) / (chi2_dfd / dfden): XLA rewrites (a/b)/(c/d) as (a*d)/(c*b).
    return u.div(u.mul(chi2_dfn, dfden), u.mul(chi2_dfd, dfnum))


def generalized_normal(key, p, shape=(), dtype=None, *, out_sharding=None):
    """Samples with density proportional to exp(-|x|^p)."""
    shape = canonicalize_shape(shape)
    key, _ = check_prng_key("generalized_normal", key)
    dtype = dtypes.check_and_canonicalize_user_dtype(float if dtype is None else dtype)
    check_shape("generalized_normal", shape)
    return _generalized_normal(key, p, shape, dtype)


def _float_param(p, dtype):
    """A traced parameter as JAX sees it: Python scalars are weakly typed and take
    ``dtype``; integer parameters promote to the default float in a true division."""
    p = u.asarray(p)
    if get_aval(p).weak_type:
        return u.convert(p, dtype)
    if not dtypes.issubdtype(u.dtype_of(p), np.inexact):
        return u.convert(p, dtypes.default_float_dtype())
    return p


def _generalized_normal(key, p, shape, dtype):
    k0, k1 = split(key)
    pf = _float_param(p, dtype)
    inv_p = u.div(u.const(pf, 1), pf)
    g = gamma(k0, inv_p, shape, dtype)
    r = rademacher(k1, shape, dtype)
    return u.mul(r, u.pow_(g, inv_p))


def ball(key, d, p=2, shape=(), dtype=None, *, out_sharding=None):
    """Uniform samples from the unit Lp ball in ``d`` dimensions."""
    shape = canonicalize_shape(shape)
    key, _ = check_prng_key("ball", key)
    dtype = dtypes.check_and_canonicalize_user_dtype(float if dtype is None else dtype)
    check_shape("ball", shape)
    d = u.concrete_int(d, "The error occurred in jax.random.ball()")
    k1, k2 = split(key)
    g = _generalized_normal(k1, p, (*shape, d), dtype)
    e = exponential(k2, shape, dtype)
    pf = _float_param(p, dtype)
    full = u.shape(g)
    nd = len(full)
    s = u.row_sum(u.pow_(u.abs_(g), pf))
    inv_p = u.div(u.const(pf, 1), pf)
    # g / (s + e) ** (1/p): XLA rewrites A / pow(B, C) as A * pow(B, -C).
    scale = u.pow_(u.add(s, e), u.neg(inv_p))
    return u.mul(g, u.broadcast_to(u.expand_dims(scale, (nd - 1,)), full))


# ----------------------------------------------------------------------------------------------
# poisson


def _poisson_knuth_np(keys, lam, dtype):
    """Knuth's algorithm; ``keys (K, 2)``, ``lam (K, *shape)`` float32."""
    shape = lam.shape[1:]
    f32 = np.dtype(np.float32)
    k = np.zeros(lam.shape, dtype)
    log_prod = np.zeros(lam.shape, f32)
    rng = keys.copy()
    neg_lam = -lam
    axes = tuple(range(1, lam.ndim))
    running = (log_prod > neg_lam).any(axis=axes) if axes else (log_prod > neg_lam)
    with np.errstate(all="ignore"):
        while running.any():
            idx = np.nonzero(running)[0]
            nxt, sub = nps.split_parts(rng[idx], 2)
            rng[idx] = nxt
            go = log_prod[idx] > neg_lam[idx]
            k[idx] = np.where(go, k[idx] + dtype.type(1), k[idx])
            v = nps.uniform(sub, shape, f32)
            log_prod[idx] = (log_prod[idx] + xm.log(v)).astype(f32)
            rows = log_prod[idx] > neg_lam[idx]
            running[idx] = rows.any(axis=axes) if axes else rows
    return (k - dtype.type(1)).astype(dtype)


def _lgamma32(x):
    return np.asarray(u.lax().lgamma_p.impl(np.asarray(x, np.float32)))


def _poisson_rejection_np(keys, lam, dtype):
    """Hormann's transformed rejection; ``keys (K, 2)``, ``lam (K, *shape)`` float32."""
    f32 = np.dtype(np.float32)
    T = np.float32
    shape = lam.shape[1:]
    axes = tuple(range(1, lam.ndim))
    with np.errstate(all="ignore"):
        log_lam = xm.log(lam)
        b = nps.fma(T(2.53), np.sqrt(lam), T(0.931))
        a = nps.fma(T(0.02483), b, T(-0.059))
        inv_alpha = (T(1.1239) + (T(1.1328) / (b - T(3.4))).astype(f32)).astype(f32)
        v_r = (T(0.9277) - (T(3.6224) / (b - T(2))).astype(f32)).astype(f32)
        k_out = np.full(lam.shape, T(-1), f32)
        accepted = np.zeros(lam.shape, bool)
        key = keys.copy()
        running = np.ones(keys.shape[0], bool)
        while running.any():
            idx = np.nonzero(running)[0]
            nxt, s0, s1 = nps.split_parts(key[idx], 3)
            key[idx] = nxt
            li, ai, bi = lam[idx], a[idx], b[idx]
            uu = (nps.uniform(s0, shape, f32) - T(0.5)).astype(f32)
            v = nps.uniform(s1, shape, f32)
            us = (T(0.5) - np.abs(uu)).astype(f32)
            kk = np.floor((nps.fma(((T(2) * ai) / us + bi).astype(f32), uu, li)
                           + T(0.43)).astype(f32))
            s = xm.log((v * inv_alpha[idx]).astype(f32) /
                       ((ai / (us * us)).astype(f32) + bi).astype(f32))
            tt = (nps.fma(kk, log_lam[idx], -li) - _lgamma32(kk + T(1))).astype(f32)
            accept1 = (us >= T(0.07)) & (v <= v_r[idx])
            reject = (kk < 0) | ((us < T(0.013)) & (v > us))
            accept = accept1 | (~reject & (s <= tt))
            k_out[idx] = np.where(accept, kk, k_out[idx])
            accepted[idx] |= accept
            rows = ~accepted[idx]
            running[idx] = rows.any(axis=axes) if axes else rows
    return k_out.astype(dtype)


def _poisson_impl(keys, lam, *, dtype, impl=None):
    with nps.using(impl):
        return _poisson_impl_keys(keys, lam, np.dtype(dtype))


def _poisson_impl_keys(keys, lam, dtype):
    kshape = keys.shape[:-1]
    shape = lam.shape[len(kshape):]
    K = math.prod(kshape)
    keys2 = keys.reshape(K, keys.shape[-1])
    lam2 = np.broadcast_to(lam, lam.shape).reshape((K,) + shape).astype(np.float32)
    use_knuth = np.isnan(lam2) | (lam2 < 10)
    lam_knuth = np.where(use_knuth, lam2, np.float32(0))
    lam_rej = np.where(use_knuth, np.float32(1e5), lam2)
    result = np.where(use_knuth, _poisson_knuth_np(keys2, lam_knuth, dtype),
                      _poisson_rejection_np(keys2, lam_rej, dtype))
    result = np.where(lam2 == 0, dtype.type(0), result).astype(dtype)
    return result.reshape(lam.shape)


def _poisson_abstract_eval(keys, lam, *, dtype, impl=None):
    return ShapedArray(lam.shape, dtype)


random_poisson_p = standard_primitive("random_poisson", _poisson_abstract_eval, _poisson_impl,
                                      weak_type_rule=lambda *a, **k: False)
ad.defjvp_zero(random_poisson_p)


def _keyed_batch(prim):
    def rule(axis_data, vals, dims, **params):
        size = axis_data.size
        ks, rest = vals[0], vals[1:]
        out = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
        del ks, rest
        return prim.bind(*out, **params), 0
    batching.batch_rules[prim] = rule


_keyed_batch(random_poisson_p)


def poisson(key, lam, shape=None, dtype=None, *, out_sharding=None):
    """Poisson samples of rate ``lam`` (integers of ``dtype``, default int)."""
    key, _ = check_prng_key("poisson", key)
    if key._impl.name != "threefry2x32":
        raise NotImplementedError("`poisson` is only implemented for the threefry2x32 RNG, "
                                  f"not {key._impl}")
    dtype = dtypes.check_and_canonicalize_user_dtype(int if dtype is None else dtype)
    if shape is not None:
        shape = canonicalize_shape(shape)
    else:
        shape = u.shape(lam)
    lam = u.broadcast_to(u.convert(lam, np.float32), shape)
    return random_poisson_p.bind(key._base_array, lam, dtype=np.dtype(dtype),
                                 impl=_impl_param(key))


# ----------------------------------------------------------------------------------------------
# binomial

_STIRLING_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983,
                  0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                  0.0118967099458917, 0.0104112652619720, 0.00925546218271273,
                  0.00833056343336287)


def _stirling_approx_tail(k):
    dt = k.dtype
    T = dt.type
    vals = np.asarray(_STIRLING_TAIL, dt)
    use_tail = k <= T(9)
    kc = np.clip(k, T(0), T(9))
    kp1 = (kc + T(1)).astype(dt)
    kp1sq = (kp1 * kp1).astype(dt)
    c12, c360, c1260 = T(1.0 / 12), T(1.0 / 360), T(1.0 / 1260)
    approx = ((c12 - (c360 - (c1260 / kp1sq).astype(dt)).astype(dt) / kp1sq).astype(dt)
              / kp1).astype(dt)
    idx = np.floor(kc)
    idx = np.where(np.isnan(idx), 0, idx).astype(np.int32)
    return np.where(use_tail, vals[np.clip(idx, 0, 9)], approx).astype(dt)


def _binomial_inversion_np(keys, count, prob, scalar):
    """``keys (K, 2)``; ``count``, ``prob`` of shape ``(K, *shape)``."""
    dt = prob.dtype
    T = dt.type
    shape = prob.shape[1:]
    axes = tuple(range(1, prob.ndim))
    with np.errstate(all="ignore"):
        log1minusprob = xm.log1p(-prob)
        num_geom = np.zeros(prob.shape, dt)
        geom_sum = np.zeros(prob.shape, dt)
        key = keys.copy()
        going = geom_sum <= count
        running = going.any(axis=axes) if axes else going
        while running.any():
            idx = np.nonzero(running)[0]
            if nps.batched_draws(key.shape[0]):     # rbg keys under vmap: JAX's draws
                sub_all, nxt_all = nps.split_parts(key, 2)
                nxt = nxt_all[idx]
                v = nps.uniform(sub_all, shape, dt, vmapped=True)[idx]
            else:
                sub, nxt = nps.split_parts(key[idx], 2)
                v = nps.uniform(sub, shape, dt)
            key[idx] = nxt
            gs = geom_sum[idx]
            num_geom[idx] = np.where(gs <= count[idx], num_geom[idx] + T(1), num_geom[idx])
            lv = xm.log(v)
            if scalar:
                g = np.ceil((lv * (T(1) / log1minusprob[idx]).astype(dt)).astype(dt))
            else:
                g = np.ceil((lv / log1minusprob[idx]).astype(dt))
            geom_sum[idx] = (gs + g).astype(dt)
            rows = geom_sum[idx] <= count[idx]
            running[idx] = rows.any(axis=axes) if axes else rows
    return (num_geom - T(1)).astype(dt)


def _btrs_np(keys, count, prob, scalar):
    dt = prob.dtype
    T = dt.type
    shape = prob.shape[1:]
    axes = tuple(range(1, prob.ndim))
    with np.errstate(all="ignore"):
        one = T(1)
        stddev = np.sqrt((count * prob).astype(dt) * (one - prob)).astype(dt)
        b = nps.fma(T(2.53), stddev, T(1.15))
        a = nps.fma(T(0.01), prob, nps.fma(T(0.0248), b, T(-0.0873)))
        c = nps.fma(count, prob, T(0.5))
        v_r = (T(0.92) - (T(4.2) / b).astype(dt)).astype(dt)
        r = (prob / (one - prob)).astype(dt)
        alpha = ((T(2.83) + (T(5.1) / b).astype(dt)).astype(dt) * stddev).astype(dt)
        m = np.floor(((count + one).astype(dt) * prob).astype(dt))
        k_out = np.full(prob.shape, T(-1), dt)
        accepted = np.zeros(prob.shape, bool)
        key = keys.copy()
        running = np.ones(keys.shape[0], bool)
        while running.any():
            idx = np.nonzero(running)[0]
            if nps.batched_draws(key.shape[0]):     # rbg keys under vmap: JAX's draws
                nxt_all, s0_all, s1_all = nps.split_parts(key, 3)
                nxt = nxt_all[idx]
                uu = nps.uniform(s0_all, shape, dt, vmapped=True)[idx]
                v = nps.uniform(s1_all, shape, dt, vmapped=True)[idx]
            else:
                nxt, s0, s1 = nps.split_parts(key[idx], 3)
                uu = nps.uniform(s0, shape, dt)
                v = nps.uniform(s1, shape, dt)
            key[idx] = nxt
            cnt, ai, bi, ci = count[idx], a[idx], b[idx], c[idx]
            ri, mi = r[idx], m[idx]
            uu = (uu - T(0.5)).astype(dt)
            us = (T(0.5) - np.abs(uu)).astype(dt)
            accept1 = (us >= T(0.07)) & (v <= v_r[idx])
            kk = np.floor(nps.fma(((T(2) * ai) / us + bi).astype(dt), uu, ci))
            reject = (kk < 0) | (kk > cnt)
            vv = xm.log(((v * alpha[idx]).astype(dt) /
                         ((ai / (us * us)).astype(dt) + bi).astype(dt)).astype(dt))
            cm1 = (cnt - mi + one).astype(dt)
            ck1 = (cnt - kk + one).astype(dt)
            # A*B + C*D fuses the first product; so does the next "+ E*F".
            ub = nps.fma((mi + T(0.5)).astype(dt), xm.log(((mi + one) / (ri * cm1)).astype(dt)),
                         ((cnt + one) * xm.log((cm1 / ck1).astype(dt))).astype(dt))
            ub = nps.fma((kk + T(0.5)).astype(dt),
                         xm.log(((ri * ck1).astype(dt) / (kk + one)).astype(dt)), ub)
            ub = (ub + _stirling_approx_tail(mi)).astype(dt)
            ub = (ub + _stirling_approx_tail((cnt - mi).astype(dt))).astype(dt)
            ub = (ub - _stirling_approx_tail(kk)).astype(dt)
            ub = (ub - _stirling_approx_tail((cnt - kk).astype(dt))).astype(dt)
            accept = accept1 | (~reject & (vv <= ub))
            k_out[idx] = np.where(accept, kk, k_out[idx])
            accepted[idx] |= accept
            rows = ~accepted[idx]
            running[idx] = rows.any(axis=axes) if axes else rows
    return k_out


def _binomial_impl(keys, count, prob, *, scalar, impl=None):
    with nps.using(impl):
        return _binomial_impl_keys(keys, count, prob, scalar)


def _binomial_impl_keys(keys, count, prob, scalar):
    dt = prob.dtype
    T = dt.type
    kshape = keys.shape[:-1]
    shape = prob.shape[len(kshape):]
    K = math.prod(kshape)
    keys2 = keys.reshape(K, keys.shape[-1])
    count = count.reshape((K,) + shape)
    prob = prob.reshape((K,) + shape)
    with np.errstate(all="ignore"):
        p_lt_half = prob < T(0.5)
        q = np.where(p_lt_half, prob, (T(1) - prob).astype(dt))
        count_nan_or_neg = np.isnan(count) | (count < T(0))
        count_inf = np.isinf(count)
        q_is_nan = np.isnan(q)
        q_l_0 = q < T(0)
        q = np.where(q_is_nan | q_l_0, T(0.01), q).astype(dt)
        use_inversion = count_nan_or_neg | ((count * q).astype(dt) <= T(10))
        count = np.floor(count)
        count_inv = np.where(use_inversion, count, T(0)).astype(dt)
        count_btrs = np.where(use_inversion, T(1e4), count).astype(dt)
        q_btrs = np.where(use_inversion, T(0.5), q).astype(dt)
        samples = np.where(use_inversion, _binomial_inversion_np(keys2, count_inv, q, scalar),
                           _btrs_np(keys2, count_btrs, q_btrs, scalar))
        invalid = q_l_0 | q_is_nan | count_nan_or_neg
        samples = np.where(invalid, T(np.nan), samples)
        samples = np.where(count_inf & ~invalid, T(np.inf), samples)
        samples = np.where(p_lt_half | count_nan_or_neg | q_is_nan | count_inf, samples,
                           (count - samples).astype(dt))
    return samples.astype(dt).reshape(kshape + shape)


def _binomial_abstract_eval(keys, count, prob, *, scalar, impl=None):
    return ShapedArray(prob.shape, prob.dtype)


random_binomial_p = standard_primitive("random_binomial", _binomial_abstract_eval,
                                       _binomial_impl, weak_type_rule=lambda *a, **k: False)
ad.defjvp_zero(random_binomial_p)


def _binomial_batch(axis_data, vals, dims, *, scalar, impl=None):
    size = axis_data.size
    out = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    scalar = scalar and dims[1] is None and dims[2] is None
    return random_binomial_p.bind(*out, scalar=scalar, impl=impl), 0


batching.batch_rules[random_binomial_p] = _binomial_batch


def binomial(key, n, p, shape=None, dtype=None):
    """Binomial(n, p) samples, as floats of ``dtype``."""
    key, _ = check_prng_key("binomial", key)
    dtype = float_dtype("binomial", dtype)
    if shape is not None:
        shape = canonicalize_shape(shape)
    return _binomial(key, n, p, shape, dtype)


def _binomial(key, count, prob, shape, dtype):
    if shape is None:
        shape = tuple(np.broadcast_shapes(u.shape(count), u.shape(prob)))
    else:
        check_shape("binomial", shape, u.shape(count), u.shape(prob))
    # Divisions by parameters that are broadcast scalars become reciprocal products in XLA.
    scalar = not u.shape(prob) and len(shape) > 0
    (prob,) = u.promote_inexact(prob)
    count = u.convert(count, u.dtype_of(prob))
    count = u.broadcast_to(count, shape)
    prob = u.broadcast_to(prob, shape)
    out = random_binomial_p.bind(key._base_array, count, prob, scalar=scalar,
                                 impl=_impl_param(key))
    return u.convert(out, dtype) if u.dtype_of(out) != dtype else out


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
    """Counts of ``n`` trials over the outcomes of the last axis of ``p``."""
    key, _ = check_prng_key("multinomial", key)
    n, p = u.promote_inexact(n, p)
    dtype = float_dtype("multinomial", dtype)
    if shape is None:
        shape = u.shape(p)
    shape = tuple(shape)
    n = u.broadcast_to(n, shape[:-1])
    p = u.broadcast_to(p, shape)
    p = u.moveaxis(p, -1, 0)
    lax = u.lax()
    remaining = lax.cumsum(p, 0, reverse=True)
    zero = u.const(remaining, 0)
    ratios = u.div(p, u.select(u.eq(remaining, zero), u.const(remaining, 1), remaining))
    k = u.shape(ratios)[0]
    keys = split(key, k)
    counts = []
    remainder = n
    pdt = u.dtype_of(remainder)
    for i in range(k):
        ratio = u.reshape(lax.index_in_dim(ratios, i, 0, keepdims=False), u.shape(ratios)[1:])
        ratio = lax.clamp(u.const(ratio, 0), ratio, u.const(ratio, 1))
        count = binomial(keys[i], remainder, ratio, dtype=pdt)
        remainder = u.sub(remainder, count)
        counts.append(count)
    out = lax.concatenate([u.expand_dims(c, (0,)) for c in counts], 0)
    out = u.moveaxis(out, 0, -1)
    return u.convert(out, dtype) if u.dtype_of(out) != dtype else out
