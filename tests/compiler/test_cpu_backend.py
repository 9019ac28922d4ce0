"""The cpu backend against the reference backend: each program is run both ways.

Integer and boolean results must be identical; floats agree to a few ulps.
Also checks what is fused (kernel counts, the cost rule) and that islands work.
"""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu, reference
from kiln.compiler.lower.lower import lower
from kiln.compiler.lower.program import Gemm, Island, Kernel, Reduce
from kiln.compiler.passes.passes import optimize


def _both(f, *args, passes=False):
    """The compiled program's outputs, the reference backend's (of the program as
    written, or with ``passes`` after the compiler's passes: XLA's rewrites and FMA
    contraction, which change the rounding) and the executable."""
    closed = kiln.make_jaxpr(f)(*args)
    flat = [np.asarray(a) for a in kiln.tree_util.tree_leaves(args)]
    exe = cpu.executable_for(closed)
    assert exe is not None, "nothing native in this program"
    got = exe(flat)
    ref = cpu._reference_form(closed) if passes else closed
    want = reference.run_jaxpr(ref.jaxpr, ref.consts, flat)
    return got, want, exe


def _check(f, *args, ulps=4):
    got, want, exe = _both(f, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind == "f":
            # ulps of the result's scale: composite expressions cancel (a - b), so a
            # per-element relative bound would be meaningless there.
            eps = np.finfo(g.dtype).eps
            finite = np.isfinite(w)
            scale = max(1.0, float(np.max(np.abs(w[finite]), initial=0.0)))
            np.testing.assert_allclose(g, w, rtol=ulps * eps, atol=ulps * eps * scale,
                                       equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)
    return exe


def _steps(exe, kind):
    return [s for s in exe.prog.steps if isinstance(s, kind)]


R = np.random.default_rng(0)
X = R.standard_normal((6, 5)).astype(np.float32)
Y = R.standard_normal((5, 4)).astype(np.float32)
V = R.standard_normal(7).astype(np.float32)
I = R.integers(-50, 50, (6, 5)).astype(np.int32)


@pytest.mark.parametrize("f", [
    lambda x: x * x + x * 2.0,
    lambda x: jnp.tanh(x) * jnp.exp(-x) + jnp.log1p(jnp.abs(x)),
    lambda x: jnp.where(x > 0, x, 0.1 * x),
    lambda x: jnp.maximum(x, jnp.nan) - jnp.minimum(x, 0.0),
    lambda x: x.T @ x,
    lambda x: x.reshape(5, 6).T + 1.0,
    lambda x: x[::2, 1:4],
    lambda x: x[::-1, ::-2],
    lambda x: jnp.pad(x, ((1, 2), (0, 3)), constant_values=7.0),
    lambda x: lax.pad(x, 0.0, ((1, -1, 1), (-2, 1, 2))),
    lambda x: jnp.concatenate([x, 2 * x, x[:1]], axis=0),
    lambda x: jnp.concatenate([x, x[:, :2]], axis=1),
    lambda x: jnp.broadcast_to(x[:, None, :], (6, 3, 5)).reshape(18, 5),
    lambda x: jnp.sum(x), lambda x: jnp.sum(x, axis=0), lambda x: jnp.sum(x, axis=1),
    lambda x: jnp.max(x, axis=0), lambda x: jnp.min(x), lambda x: jnp.prod(x, axis=1),
    lambda x: jnp.argmax(x, axis=0), lambda x: jnp.argmin(x, axis=1),
    lambda x: jnp.mean(x * x, axis=(0, 1), keepdims=True),
    lambda x: jax_logsumexp(x),
    lambda x: jnp.clip(x, -0.5, 0.5).astype(jnp.int32),
    lambda x: (x * 1e10).astype(jnp.int32), lambda x: (x * 1e3).astype(jnp.uint8),
    lambda x: lax.iota(jnp.int32, 6)[:, None] * x.astype(jnp.int32),
    lambda x: jnp.round(x * 4) + jnp.floor(x) + jnp.ceil(x) + jnp.sign(x),
    lambda x: x ** 3 + x ** -2 + jnp.sqrt(jnp.abs(x)) + lax.rsqrt(jnp.abs(x) + 1),
    lambda x: jnp.float32(2.0) ** x,
])
def test_float_programs(f):
    _check(f, X)


def jax_logsumexp(x):
    m = jnp.max(x, axis=1, keepdims=True)
    return jnp.log(jnp.sum(jnp.exp(x - m), axis=1)) + m[:, 0]


@pytest.mark.parametrize("f", [
    lambda i: i // 7 + i % 7, lambda i: lax.div(i, jnp.zeros_like(i)),
    lambda i: lax.rem(i, jnp.zeros_like(i)),
    lambda i: i << 3, lambda i: i >> 2, lambda i: lax.shift_right_logical(i, 33 + i * 0),
    lambda i: lax.shift_left(i, i), lambda i: ~i & 0xF0 | (i ^ 3),
    lambda i: jnp.sum(i), lambda i: jnp.max(i, axis=1), lambda i: jnp.prod(i[:3, :3], axis=0),
    lambda i: jnp.abs(i) - i, lambda i: jnp.sign(i), lambda i: i * i * i * i * i * i * i,
    lambda i: lax.population_count(i) + lax.clz(i),
    lambda i: (i > 3) & (i < 30), lambda i: jnp.any(i > 40, axis=0),
    lambda i: jnp.all(i > -40), lambda i: i.astype(jnp.float32) / 3,
    lambda i: i.astype(jnp.int8) * jnp.int8(100), lambda i: i.astype(jnp.uint32) * 3 // 7,
    lambda i: i @ i.T,
])
def test_integer_programs(f):
    _check(f, I)


def test_nan_semantics_match_reference():
    x = np.array([1.0, np.nan, -np.inf, np.inf, -0.0, 0.0, 3.0], np.float32)
    _check(lambda v: (jnp.max(v), jnp.min(v), jnp.argmax(v), jnp.argmin(v),
                      jnp.maximum(v, 1.0), v.astype(jnp.int32), v.astype(jnp.uint8),
                      jnp.sign(v)), x)


def test_x64_programs():
    with kiln.enable_x64():
        xd = X.astype(np.float64)
        _check(lambda x: (x @ x.T, jnp.exp(x).sum(0), (x * 1e18).astype(jnp.int64),
                          jnp.arange(30).reshape(6, 5) * x), xd)
        i64 = I.astype(np.int64) * 10**12
        _check(lambda i: (i // 3, i % 7, i >> 40, lax.div(i, i * 0), jnp.sum(i)), i64)


def test_dynamic_slice_clamps():
    for start in (-3, 0, 2, 5, 100):
        _check(lambda v, s: lax.dynamic_slice(v, (s,), (3,)) * 2, V, np.int32(start))


def test_elementwise_chain_is_one_kernel():
    exe = _check(lambda x: jnp.tanh(x * x + 1.0) * 3.0 - x, X)
    assert len(_steps(exe, Kernel)) == 1 and len(exe.prog.steps) == 1


def test_producer_fuses_into_reduction():
    exe = _check(lambda x: jnp.sum(jnp.exp(x) * 2.0, axis=1), X)
    assert len(exe.prog.steps) == 1 and isinstance(exe.prog.steps[0], Reduce)


def test_logsumexp_reads_input_twice_at_most():
    exe = _check(jax_logsumexp, X)
    reductions = _steps(exe, Reduce)
    assert len(reductions) == 2
    # no intermediate of the input's size is stored
    big = [b for b in exe.prog.buffers if b.kind == "tmp" and b.size >= X.size]
    assert not big


def test_cost_rule_materializes_expensive_broadcast_producer():
    # exp(v) broadcast to a large shape would be recomputed 1000x per element: stored once.
    v = np.linspace(-1, 1, 8).astype(np.float32)
    exe = _check(lambda v: jnp.broadcast_to(jnp.exp(v), (1000, 8)) + 1.0, v)
    tmps = [b for b in exe.prog.buffers if b.kind == "tmp"]
    assert [b.shape for b in tmps] == [(8,)]
    # a cheap producer is recomputed instead
    exe = _check(lambda v: jnp.broadcast_to(v + 1.0, (1000, 8)) * 2.0, v)
    assert not [b for b in exe.prog.buffers if b.kind == "tmp"]


def test_cost_rule_materializes_shared_expensive_value():
    exe = _check(lambda x: (jnp.sum(jnp.exp(x)), jnp.max(jnp.exp(x), axis=0)), X)
    assert [b.shape for b in exe.prog.buffers if b.kind == "tmp"] == [X.shape]


def test_large_matmul_uses_blas_with_fused_epilogue():
    from kiln.compiler.lower import blas_support
    if not blas_support.available():
        pytest.skip("no BLAS")
    a = R.standard_normal((64, 48)).astype(np.float32)
    b = R.standard_normal((48, 32)).astype(np.float32)
    exe = _check(lambda a, b: jnp.tanh(a @ b + 1.0), a, b, ulps=64)
    assert len(_steps(exe, Gemm)) == 1
    exe = _check(lambda a, b: jnp.einsum("ij,kj->ik", a, b.T), a, b, ulps=64)
    assert len(_steps(exe, Gemm)) == 1 and not _steps(exe, Kernel)  # transposes are free


def test_batched_matmul():
    a = R.standard_normal((3, 40, 50)).astype(np.float32)
    b = R.standard_normal((3, 50, 20)).astype(np.float32)
    _check(lambda a, b: jnp.matmul(a, b), a, b, ulps=64)
    _check(lambda a, b: jnp.einsum("bij,bkj->bik", a, b.transpose(0, 2, 1)), a, b, ulps=64)


def test_islands_run_between_native_segments():
    exe = _check(lambda x: jnp.sort(x * 2.0, axis=0) + 1.0, X)
    kinds = [type(s).__name__ for s in exe.prog.steps]
    assert "Island" in kinds and kinds[0] == "Kernel"


def test_unsupported_dtypes_are_islands():
    exe = _check(lambda x: (x.astype(jnp.bfloat16) * 2).astype(jnp.float32) + 1.0, X)
    assert _steps(exe, Island)


def test_outputs_that_are_inputs_and_literals():
    _check(lambda x: (x, 3.0, x + 1), X)


def test_jit_runs_compiled_code():
    f = kiln.jit(lambda x: jnp.sin(x) * 2)
    out = f(X)
    np.testing.assert_allclose(np.asarray(out), np.sin(X) * 2, rtol=1e-6)
    closed = f.lower(X).jaxpr
    assert cpu.executable_for(closed) is not None


def test_reference_backend_switch():
    f = kiln.jit(lambda x: x + 1)
    kiln.config.update("kiln_backend", "reference")
    try:
        np.testing.assert_array_equal(np.asarray(f(I)), I + 1)
    finally:
        kiln.config.update("kiln_backend", "cpu")


def test_as_text_shows_c():
    c = kiln.jit(lambda x: jnp.exp(x) + 1.0).lower(X).compile().as_text()
    assert "void seg0(void **b)" in c and "for (int64_t" in c


def test_empty_and_zero_size():
    z = np.zeros((0, 5), np.float32)
    _check(lambda z: (z * 2, jnp.sum(z, axis=0)), z)
    # XLA reduces an empty axis to the identity (the reference's np.max raises there)
    closed = kiln.make_jaxpr(lambda z: lax.reduce_max(z, (0,)))(z)
    (out,) = cpu.executable_for(closed)([z])
    np.testing.assert_array_equal(out, np.full(5, -np.inf, np.float32))


def test_optimize_then_lower_has_no_calls():
    closed = kiln.make_jaxpr(lambda x: kiln.jit(lambda y: y * 2)(x) + 1)(X)
    prog = lower(optimize(closed))
    assert not [s for s in prog.steps if isinstance(s, Island)]


G_IDX = np.array([0, 5, -1, 3, 9, -8], np.int32)


@pytest.mark.parametrize("f,args", [
    (lambda x, i: jnp.take(x, i, axis=0), (X, G_IDX)),                  # fill mode: NaN rows
    (lambda x, i: jnp.take(x, i, axis=1, mode="clip") * 2.0, (X, G_IDX)),
    (lambda x, i: x[i] + 1.0, (X, np.array([1, 2, -1], np.int32))),
    (lambda x, i: x[i, i], (X, np.array([0, 3, 4], np.int32))),
    (lambda x, i: jnp.take_along_axis(x, i, axis=1),
     (X, np.array([[0, 4], [1, 1], [2, 3], [4, 0], [3, 3], [0, 1]], np.int32))),
    (kiln.vmap(lambda r, i: jnp.take(r, i, axis=0)),
     (X, np.array([[0, 1], [2, 3], [4, 1], [0, 0], [4, 4], [1, 2]], np.int32))),
    (lambda x, i: jnp.take(x, i), (np.arange(20, dtype=np.int32),
                                   np.array([3, 19, 25, -3], np.int8))),
    (lambda x, i: jnp.sum(x[i] * x[i], axis=1), (X, np.array([1, 0, 5, 5], np.int16))),
])
def test_gather_is_native(f, args):
    exe = _check(f, *args)
    assert not [s for s in exe.prog.steps if isinstance(s, Island)]


@pytest.mark.parametrize("op", [lax.cumsum, lax.cumprod, lax.cummax, lax.cummin])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_ops_are_native(op, axis, reverse):
    x = R.standard_normal((3, 4, 5)).astype(np.float32)
    x[1, 2, 3] = np.nan if op in (lax.cummax, lax.cummin) else x[1, 2, 3]
    xi = R.integers(-4, 5, (3, 4, 5)).astype(np.int32)
    for arg, f in [(x, lambda v: op(v * 1.5 + 0.5, axis=axis, reverse=reverse)),
                   (xi, lambda v: op(v, axis=axis, reverse=reverse))]:
        got, want, exe = _both(f, arg, passes=True)  # v * 1.5 + 0.5: an fma
        assert not _steps(exe, Island)
        # Sequential, as NumPy's accumulate: the same bits.
        np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))


def test_cumsum_fuses_its_producer_and_consumer():
    exe = _check(lambda x: jnp.sum(jnp.cumsum(jnp.exp(x), axis=1), axis=0), X)
    assert len(exe.prog.steps) == 2 and not _steps(exe, Kernel)


S_IDX = np.array([0, 5, -1, 3, 9, 0, 0], np.int32)        # duplicates and out of bounds
S_UPD = R.standard_normal((7, 5)).astype(np.float32)


@pytest.mark.parametrize("f", [
    lambda x, i, u: x.at[i].add(u),
    lambda x, i, u: x.at[i].set(u * 2.0),                  # later duplicates win
    lambda x, i, u: x.at[i].multiply(u),
    lambda x, i, u: x.at[i].min(u),
    lambda x, i, u: x.at[i].max(u, mode="clip"),
    lambda x, i, u: x.at[i, 2].add(1.0),
    kiln.grad(lambda x, i, u: jnp.sum(jnp.take(x, i, axis=0, mode="clip") * u)),
])
def test_scatter_is_native_and_exact(f):
    X6 = R.standard_normal((6, 5)).astype(np.float32)
    got, want, exe = _both(f, X6, S_IDX, S_UPD)
    assert not _steps(exe, Island)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))


def test_integer_and_batched_scatter():
    got, want, exe = _both(lambda x, i, u: x.at[i].add(u), np.arange(10, dtype=np.int32),
                           np.array([1, 1, 3, 12, -2], np.int64),
                           np.array([5, 6, 7, 8, 9], np.int32))
    assert not _steps(exe, Island)
    np.testing.assert_array_equal(got[0], want[0])
    f = kiln.vmap(lambda r, i, v: r.at[i].add(v))
    _check(f, X, np.array([[0, 1], [2, 3], [4, 1], [0, 0], [4, 4], [1, 2]], np.int32),
           R.standard_normal((6, 2)).astype(np.float32))


@pytest.mark.parametrize("kind", ["while", "long_scan", "nested_while", "short_scan"])
def test_first_call_of_a_looping_program_waits_for_its_build(kind):
    """Under ``kiln_compile="async"`` a program with a while loop (or a scan of 64 steps or
    more, also inside a cond) is compiled before its first call returns, instead of
    running its loop on the reference backend; a short scan still runs at once."""
    from kiln.backends import cpu
    from kiln.config import config_context

    def f(x):
        if kind == "while":
            return lax.while_loop(lambda c: c[0] < 100, lambda c: (c[0] + 1, c[1] * 1.01),
                                  (0, x))[1]
        if kind == "nested_while":
            return lax.cond(x.sum() > 0, lambda y: lax.fori_loop(
                0, x.shape[0] * 50, lambda i, c: c * 1.01, y), lambda y: y, x)
        n = 100 if kind == "long_scan" else 3
        return lax.scan(lambda c, _: (c * 1.01, None), x, None, length=n)[0]

    jf = kiln.jit(f)
    x = jnp.ones(4)
    with config_context(kiln_compile="async"):
        out = jf(x)
        closed = jf._trace((x,), {})[0].jaxpr
        exe = cpu.ready_executable(closed)
    np.testing.assert_allclose(out, f(x), rtol=1e-5)
    if kind == "short_scan":
        assert not cpu._has_long_loop(closed.jaxpr)
    else:
        assert cpu._has_long_loop(closed.jaxpr) and exe is not None
