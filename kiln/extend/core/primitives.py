"""``jax.extend.core.primitives``: kiln's primitives under the names JAX exports them.

Each name resolves, on first use, to the kiln primitive that computes the same operation
(``jit_p`` is kiln's ``jit`` call primitive, ``closed_call_p``/``call_p`` are in
:mod:`kiln.interpreters.calls`, ``add_jaxvals_p`` is ``add_any``). A JAX primitive kiln
has no counterpart for raises ``AttributeError`` naming it (``from ... import`` turns
that into ``ImportError``, which libraries use to detect optional primitives).
"""
from __future__ import annotations

import importlib

# Every name JAX 0.10.2's ``jax.extend.core.primitives`` exports.
JAX_NAMES = (
    "name_p", "remat_p", "stop_gradient_p", "call_p", "closed_call_p", "custom_jvp_call_p",
    "custom_vjp_call_p", "device_put_p", "add_jaxvals_p", "custom_lin_p", "abs_p", "acos_p",
    "acosh_p", "add_p", "after_all_p", "and_p", "argmax_p", "argmin_p", "asin_p", "asinh_p",
    "atan_p", "atan2_p", "atanh_p", "bitcast_convert_type_p", "broadcast_in_dim_p",
    "cbrt_p", "ceil_p", "clamp_p", "clz_p", "complex_p", "concatenate_p", "conj_p",
    "convert_element_type_p", "copy_p", "cos_p", "cosh_p", "create_token_p", "div_p",
    "dot_general_p", "eq_p", "eq_to_p", "exp_p", "exp2_p", "expm1_p", "floor_p", "ge_p",
    "gt_p", "imag_p", "integer_pow_p", "iota_p", "is_finite_p", "le_p", "le_to_p",
    "log1p_p", "log_p", "logistic_p", "lt_p", "lt_to_p", "max_p", "min_p", "mul_p", "ne_p",
    "neg_p", "nextafter_p", "not_p", "or_p", "pad_p", "population_count_p", "pow_p",
    "real_p", "reduce_and_p", "reduce_max_p", "reduce_min_p", "reduce_or_p", "reduce_p",
    "reduce_precision_p", "reduce_prod_p", "reduce_sum_p", "reduce_xor_p", "rem_p",
    "reshape_p", "rev_p", "rng_bit_generator_p", "rng_uniform_p", "round_p", "rsqrt_p",
    "select_n_p", "shift_left_p", "shift_right_arithmetic_p", "shift_right_logical_p",
    "sign_p", "sin_p", "sinh_p", "sort_p", "sqrt_p", "square_p", "squeeze_p", "sub_p",
    "tan_p", "tanh_p", "top_k_p", "transpose_p", "xor_p", "empty2_p", "bessel_i0e_p",
    "bessel_i1e_p", "digamma_p", "erfc_p", "erf_inv_p", "erf_p", "igammac_p",
    "igamma_grad_a_p", "igamma_p", "lgamma_p", "polygamma_p",
    "regularized_incomplete_beta_p", "zeta_p", "dynamic_slice_p", "dynamic_update_slice_p",
    "gather_p", "scatter_add_p", "scatter_max_p", "scatter_min_p", "scatter_mul_p",
    "scatter_p", "slice_p", "conv_general_dilated_p", "reduce_window_max_p",
    "reduce_window_min_p", "reduce_window_p", "reduce_window_sum_p",
    "select_and_gather_add_p", "select_and_scatter_p", "select_and_scatter_add_p", "cond_p",
    "cumlogsumexp_p", "cummax_p", "cummin_p", "cumprod_p", "cumsum_p", "linear_solve_p",
    "scan_p", "while_p", "fft_p", "all_gather_p", "all_to_all_p", "axis_index_p", "pmax_p",
    "pmin_p", "ppermute_p", "psum_p", "ragged_all_to_all_p", "approx_top_k_p", "cholesky_p",
    "eig_p", "eigh_p", "hessenberg_p", "lu_p", "householder_product_p", "qr_p", "svd_p",
    "triangular_solve_p", "tridiagonal_p", "tridiagonal_solve_p", "schur_p", "jit_p",
    "sharding_constraint_p", "random_bits_p", "random_fold_in_p", "random_seed_p",
    "random_split_p", "threefry2x32_p", "random_gamma_p", "get_p", "swap_p"
)

# Where kiln defines its primitives, searched in order.
_MODULES = (
    "kiln.lax", "kiln.lax.linalg", "kiln.interpreters.calls", "kiln.interpreters.pjit",
    "kiln.custom_derivatives", "kiln.interpreters.ad", "kiln.random._keys",
    "kiln.parallel.constraint",
)
_RENAMED = {"pjit_p": "jit_p", "sharding_constraint_p": "sharding_constraint_p"}


def _find(name: str):
    target = _RENAMED.get(name, name)
    for modname in _MODULES:
        value = getattr(importlib.import_module(modname), target, None)
        if value is not None:
            return value
    return None


def __getattr__(name: str):
    value = _find(name) if name in JAX_NAMES or name in _RENAMED else None
    if value is None:
        if name in JAX_NAMES:
            raise AttributeError(
                f"jax.extend.core.primitives.{name}: kiln has no counterpart of JAX's "
                f"primitive {name!r}")
        raise AttributeError(
            f"module 'jax.extend.core.primitives' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(n for n in JAX_NAMES if _find(n) is not None)
