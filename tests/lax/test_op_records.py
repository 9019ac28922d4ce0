"""The generic op-record driver (DESIGN.md §6).

Every module in ``tests/lax/records/`` exports ``RECORDS`` (a list of ``op_records.OpRecord``).
Each record becomes these tests, with the record's name as the test id:

- ``test_value``: eager result vs the NumPy/SciPy ``ref`` (values; dtypes when ``check_dtype``);
- ``test_jit``: ``jit(fun)`` equals eager (values, dtype, weak type) and the staged jaxpr
  passes ``check_jaxpr``;
- ``test_jvp_fd``: ``jvp`` against central finite differences on ``diff_argnums``;
- ``test_jvp2_fd``: jvp of jvp against finite differences of jvp (``grad_order >= 2``);
- ``test_vjp_vs_jvp``: ``<u, J v> == <J^T u, v>``;
- ``test_vmap*``: ``vmap`` over a stack of 3 samples equals a Python loop (axis 0, some
  arguments unmapped, axis 1 with ``out_axes=-1``), ``jit(vmap)`` and ``vmap(grad)``.

Plus rule coverage: every primitive exported from ``kiln.lax`` has impl, abstract eval,
batching and JVP rules; the linear ones have transpose rules; every primitive appears in
some record (or in ``RECORD_EXEMPT`` with the reason).

Derivatives are checked only for inexact inputs and outputs; integer/bool arguments are
held fixed (closed over) and integer/bool outputs are dropped. Complex values use the
pairing ``Re(sum(u * w))`` under which JAX's transpose convention (no conjugation) is the
transpose.

A record tagged ``"fwd_only"`` (e.g. ``while_loop``, which JAX cannot reverse-differentiate)
skips the reverse-mode tests.

Set ``KILN_RECORDS_DIR`` to run the driver over another directory of record modules.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
import sys
import zlib

import numpy as np
import pytest

import kiln
from kiln import dtypes, lax
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, check_jaxpr
from kiln.core.trace import Primitive, get_aval
from kiln.interpreters import ad, batching
from kiln.tree_util import tree_flatten

TESTS_DIR = pathlib.Path(__file__).resolve().parent
for _p in (str(TESTS_DIR), str(TESTS_DIR.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _sampling import sample_cases  # noqa: E402 - tests/ is on sys.path from here on

RECORDS_DIR = pathlib.Path(os.environ.get("KILN_RECORDS_DIR", TESTS_DIR / "records"))


# ================================================================================================
# Loading the record tables
# ================================================================================================

def _load_record_modules():
    """Returns ``(records, errors)``: all records, and ``{module: exception}`` for modules
    that failed to import (reported as failing tests, not as a collection error)."""
    records, errors = [], {}
    if not RECORDS_DIR.is_dir():
        return records, errors
    for path in sorted(RECORDS_DIR.glob("*.py")):
        if path.name.startswith("_"):
            continue
        mod_name = f"kiln_records_{path.stem}"
        try:
            spec = importlib.util.spec_from_file_location(mod_name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = mod
            spec.loader.exec_module(mod)
            recs = list(mod.RECORDS)
        except Exception as e:  # noqa: BLE001 - any failure becomes a test failure
            errors[path.stem] = e
            continue
        for r in recs:
            r._module = path.stem
            records.append(r)
    return records, errors


RECORDS, RECORD_ERRORS = _load_record_modules()


def _jaxpr_primitives(jaxpr: Jaxpr, acc: set):
    for eqn in jaxpr.eqns:
        acc.add(eqn.primitive.name)
        for p in eqn.params.values():
            subs = p if isinstance(p, (tuple, list)) else [p]
            for s in subs:
                if isinstance(s, ClosedJaxpr):
                    _jaxpr_primitives(s.jaxpr, acc)
                elif isinstance(s, Jaxpr):
                    _jaxpr_primitives(s, acc)
    return acc


_PRIMITIVES: dict = {}


def _record_primitives(rec) -> frozenset | None:
    """The primitives in ``rec``'s jaxpr (None when it cannot be staged: test_jit says why)."""
    if rec.name not in _PRIMITIVES:
        try:
            jaxpr = kiln.make_jaxpr(rec.fun)(*_sample(rec)).jaxpr
            _PRIMITIVES[rec.name] = frozenset(_jaxpr_primitives(jaxpr, set()))
        except Exception:  # noqa: BLE001 - reported by test_jit for that record
            _PRIMITIVES[rec.name] = None
    return _PRIMITIVES[rec.name]


def _op_of(rec) -> str:
    """The operation a record tests: the primitives it stages (records that differ only in
    dtypes, shapes or parameters of the same primitives are cases of one operation)."""
    prims = _record_primitives(rec)
    return f"record:{rec.name}" if prims is None else ",".join(sorted(prims))


def _params(test: str, pred=None):
    """One ``pytest.param`` per record satisfying ``pred`` for the test function ``test``,
    sampled per operation by ``KILN_NUM_GENERATED_CASES`` (tests/_sampling.py): every
    operation keeps at least one case in every test function."""
    recs = [r for r in RECORDS if pred is None or pred(r)]
    recs = sample_cases(recs, _op_of, salt=f"op_records.{test}")
    ps = [pytest.param(r, id=r.name) for r in recs]
    if not ps:
        ps = [pytest.param(None, id="no-records",
                           marks=pytest.mark.skip(reason="no op records found in "
                                                  f"{RECORDS_DIR}"))]
    return ps


@pytest.mark.parametrize("module", sorted(RECORD_ERRORS) or
                         [pytest.param(None, marks=pytest.mark.skip(reason="all imported"))])
def test_record_module_imports(module):
    err = RECORD_ERRORS[module]
    raise AssertionError(f"tests/lax/records/{module}.py failed to import: "
                         f"{type(err).__name__}: {err}") from err


def test_sampling_keeps_every_operation_under_every_transformation():
    """KILN_NUM_GENERATED_CASES may drop cases, never an operation: for each test function
    below, the sampled records stage the same primitive sets as all eligible records."""
    preds = {"value": lambda r: r.ref is not None, "jit": lambda r: r.jit,
             "jvp_fd": lambda r: r.diff_argnums and r.grad_order >= 1,
             "jvp2_fd": lambda r: r.diff_argnums and r.grad_order >= 2,
             "vjp_vs_jvp": _reverse_ok, "vmap": lambda r: r.vmap,
             "vmap_unmapped_args": lambda r: r.vmap, "vmap_axis1": lambda r: r.vmap,
             "jit_of_vmap": lambda r: r.vmap and r.jit,
             "vmap_of_grad": lambda r: r.vmap and _reverse_ok(r)}
    for test, pred in preds.items():
        every = {_op_of(r) for r in RECORDS if pred(r)}
        kept = {_op_of(p.values[0]) for p in _params(test, pred) if p.values[0] is not None}
        assert kept == every, f"test_{test} lost operations: {sorted(every - kept)}"


def test_record_names_unique():
    seen = {}
    for r in RECORDS:
        seen.setdefault(r.name, []).append(r._module)
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    assert not dups, f"duplicate record names (test ids must be unique): {dups}"


# ================================================================================================
# Helpers
# ================================================================================================

def _seed(rec, k=0):
    return zlib.crc32(f"{rec.name}/{k}".encode())


def _sample(rec, k=0):
    args = rec.args(np.random.default_rng(_seed(rec, k)))
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    return args


def _leaves(x):
    return tree_flatten(x)[0]


def _dtype(x):
    return get_aval(x).dtype


def _inexact(dt) -> bool:
    return dt != dtypes.float0 and dtypes.issubdtype(dt, np.inexact)


def _complex(dt) -> bool:
    return dtypes.issubdtype(dt, np.complexfloating)


def _wide(x):
    """float64/complex128 NumPy copy of an array-like (for finite differences)."""
    v = np.asarray(x)
    if _complex(v.dtype):
        return v.astype(np.complex128)
    if _inexact(v.dtype):
        return v.astype(np.float64)
    return v


def _low_precision(dt) -> bool:
    return _inexact(dt) and np.dtype(dt).itemsize * (1 if not _complex(dt) else 0.5) < 4


def _diff_argnums(rec, args):
    return tuple(i for i in rec.diff_argnums
                 if i < len(args) and _inexact(np.asarray(args[i]).dtype))


def _close_over(fun, args, argnums):
    """``fun`` as a function of ``args[argnums]`` only, returning its inexact output leaves."""
    def g(*dargs):
        full = list(args)
        for i, a in zip(argnums, dargs):
            full[i] = a
        return [o for o in _leaves(fun(*full)) if _inexact(_dtype(o))]
    return g


def _random_like(rng, x, dtype=None):
    a = np.asarray(x)
    dt = np.dtype(dtype or a.dtype)
    v = rng.standard_normal(a.shape)
    if _complex(dt):
        v = v + 1j * rng.standard_normal(a.shape)
    return v.astype(np.complex128 if _complex(dt) else np.float64)


def _fd(g, primals, dirs, eps):
    """Central differences of ``g`` (leaves out) along ``dirs`` in float64.

    Returns ``(effective_dirs, fd)``: the direction actually realised after rounding the
    perturbed points to the primal dtype, and the finite-difference output leaves."""
    xp = [(_wide(p) + eps * d).astype(np.asarray(p).dtype) for p, d in zip(primals, dirs)]
    xm = [(_wide(p) - eps * d).astype(np.asarray(p).dtype) for p, d in zip(primals, dirs)]
    eff = [(_wide(a) - _wide(b)) / (2 * eps) for a, b in zip(xp, xm)]
    fp = [_wide(o) for o in g(*xp)]
    fm = [_wide(o) for o in g(*xm)]
    return eff, [(a - b) / (2 * eps) for a, b in zip(fp, fm)]


def _cast(vals, like):
    return [np.asarray(v).astype(np.asarray(p).dtype) for v, p in zip(vals, like)]


def _assert_close(actual, expected, rtol, atol, what):
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    if a.dtype == dtypes.float0 or e.dtype == dtypes.float0:
        return
    if a.dtype == np.bool_ or e.dtype == np.bool_:
        np.testing.assert_array_equal(a, e, err_msg=what)
        return
    np.testing.assert_allclose(_wide(a), _wide(e), rtol=rtol, atol=atol, err_msg=what)


def _pair(u, w):
    """Re(sum(u * w)) in float64/complex128."""
    return float(np.real(np.sum(_wide(u) * _wide(w))))


def _skip_without_derivatives(rec, args):
    if not rec.diff_argnums:
        pytest.skip("record has no diff_argnums")
    argnums = _diff_argnums(rec, args)
    if not argnums:
        pytest.skip("no inexact argument among diff_argnums")
    g = _close_over(rec.fun, args, argnums)
    primals = [args[i] for i in argnums]
    if not g(*primals):
        pytest.skip("no inexact outputs")
    return argnums, g, primals


# ================================================================================================
# (a) values, (b) jit
# ================================================================================================

@pytest.mark.parametrize("rec", _params("value", lambda r: r.ref is not None))
def test_value(rec):
    args = _sample(rec)
    out = _leaves(rec.fun(*args))
    ref = rec.ref(*args)
    ref = [np.asarray(r) for r in (ref if isinstance(ref, (tuple, list)) else [ref])]
    assert len(out) == len(ref), f"{len(out)} outputs, reference has {len(ref)}"
    for i, (o, r) in enumerate(zip(out, ref)):
        o = np.asarray(o)
        if rec.check_dtype:
            assert o.dtype == r.dtype, f"output {i}: dtype {o.dtype} != reference {r.dtype}"
        _assert_close(o, r, rec.tol, rec.tol, f"output {i} vs reference")


@pytest.mark.parametrize("rec", _params("jit", lambda r: r.jit))
def test_jit(rec):
    args = _sample(rec)
    eager = _leaves(rec.fun(*args))
    jitted = _leaves(kiln.jit(rec.fun)(*args))
    assert len(eager) == len(jitted)
    for i, (e, j) in enumerate(zip(eager, jitted)):
        ea, ja = get_aval(e), get_aval(j)
        assert (ja.shape, ja.dtype) == (ea.shape, ea.dtype), \
            f"output {i}: jit gives {ja.str_short()}, eager {ea.str_short()}"
        assert ja.weak_type == ea.weak_type, f"output {i}: weak_type differs under jit"
        tol = rec.tol if _low_precision(ea.dtype) else (rec.jit_tol or 1e-6)
        _assert_close(j, e, tol, tol, f"output {i}: jit vs eager")
    closed = kiln.make_jaxpr(rec.fun)(*args)
    check_jaxpr(closed.jaxpr)
    out_avals = [get_aval(e) for e in eager]
    for a, b in zip(closed.out_avals, out_avals):
        assert (a.shape, a.dtype, a.weak_type) == (b.shape, b.dtype, b.weak_type), \
            f"jaxpr out aval {a} vs eager {b}"


# ================================================================================================
# (c) jvp, (d) second order, (e) vjp vs jvp
# ================================================================================================

@pytest.mark.parametrize("rec", _params("jvp_fd", lambda r: r.diff_argnums and r.grad_order >= 1))
def test_jvp_fd(rec):
    args = _sample(rec)
    argnums, g, primals = _skip_without_derivatives(rec, args)
    rng = np.random.default_rng(_seed(rec, 100))
    dirs = [_random_like(rng, p) for p in primals]
    eff, fd = _fd(g, primals, dirs, rec.eps)
    p_out, t_out = kiln.jvp(g, tuple(primals), tuple(_cast(eff, primals)))
    for i, (p, o) in enumerate(zip(p_out, g(*primals))):
        _assert_close(p, o, 1e-6, 1e-6, f"jvp primal output {i}")
    for i, (t, f) in enumerate(zip(t_out, fd)):
        assert _dtype(t) == _dtype(p_out[i]), "tangent dtype differs from primal dtype"
        _assert_close(t, f, rec.grad_tol, rec.grad_tol, f"jvp output {i} vs finite differences")


@pytest.mark.parametrize("rec", _params("jvp2_fd", lambda r: r.diff_argnums and r.grad_order >= 2))
def test_jvp2_fd(rec):
    args = _sample(rec)
    argnums, g, primals = _skip_without_derivatives(rec, args)
    rng = np.random.default_rng(_seed(rec, 200))
    v = _cast([_random_like(rng, p) for p in primals], primals)

    def h(*xs):
        return kiln.jvp(g, tuple(xs), tuple(v))[1]

    w = [_random_like(rng, p) for p in primals]
    eff, fd = _fd(h, primals, w, rec.eps)
    _, t2 = kiln.jvp(h, tuple(primals), tuple(_cast(eff, primals)))
    for i, (t, f) in enumerate(zip(t2, fd)):
        _assert_close(t, f, rec.grad_tol, rec.grad_tol,
                      f"second-order jvp output {i} vs finite differences of jvp")


def _reverse_ok(r):
    return r.diff_argnums and r.grad_order >= 1 and "fwd_only" not in r.tags


@pytest.mark.parametrize("rec", _params("vjp_vs_jvp", _reverse_ok))
def test_vjp_vs_jvp(rec):
    args = _sample(rec)
    argnums, g, primals = _skip_without_derivatives(rec, args)
    rng = np.random.default_rng(_seed(rec, 300))
    v = _cast([_random_like(rng, p) for p in primals], primals)
    outs, jv = kiln.jvp(g, tuple(primals), tuple(v))
    u = [np.asarray(_random_like(rng, o)).astype(_dtype(o)) for o in outs]
    outs2, vjp_fun = kiln.vjp(g, *primals)
    jtu = vjp_fun(u)
    assert len(jtu) == len(primals)
    for c, p in zip(jtu, primals):
        assert get_aval(c).shape == np.shape(p), "cotangent shape differs from primal shape"
        assert _dtype(c) == np.asarray(p).dtype, \
            f"cotangent dtype {_dtype(c)} differs from primal dtype {np.asarray(p).dtype}"
    lhs = sum(_pair(a, b) for a, b in zip(u, jv))
    rhs = sum(_pair(a, b) for a, b in zip(jtu, v))
    scale = sum(np.sum(np.abs(_wide(a) * _wide(b))) for a, b in zip(u, jv)) + \
        sum(np.sum(np.abs(_wide(a) * _wide(b))) for a, b in zip(jtu, v))
    tol = max(rec.tol, 1e-4)
    assert abs(lhs - rhs) <= tol * (scale + 1.0), \
        f"<u, J v> = {lhs} but <J^T u, v> = {rhs} (scale {scale})"


# ================================================================================================
# (f) vmap, (g) jit of vmap and vmap of grad
# ================================================================================================

def _samples(rec, n=3):
    return [_sample(rec, k) for k in range(n)]


def _loop(fun, per_call_args):
    """Stack the output leaves of ``fun`` over a list of argument tuples."""
    outs = [[np.asarray(o) for o in _leaves(fun(*a))] for a in per_call_args]
    return [np.stack([o[i] for o in outs]) for i in range(len(outs[0]))]


def _check_batched(rec, got, expected, what, out_axis=0):
    got = _leaves(got)
    assert len(got) == len(expected), f"{what}: {len(got)} outputs, loop has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        g = np.moveaxis(np.asarray(g), out_axis, 0)
        assert g.dtype == e.dtype, f"{what} output {i}: dtype {g.dtype} != loop {e.dtype}"
        _assert_close(g, e, rec.tol, rec.tol, f"{what} output {i} vs Python loop")


@pytest.mark.parametrize("rec", _params("vmap", lambda r: r.vmap))
def test_vmap(rec):
    samples = _samples(rec)
    stacked = [np.stack(col) for col in zip(*samples)]
    _check_batched(rec, kiln.vmap(rec.fun)(*stacked), _loop(rec.fun, samples), "vmap")


@pytest.mark.parametrize("rec", _params("vmap_unmapped_args", lambda r: r.vmap))
def test_vmap_unmapped_args(rec):
    samples = _samples(rec)
    nargs = len(samples[0])
    if nargs < 2:
        pytest.skip("needs at least two arguments")
    for k in range(min(nargs, 3)):
        in_axes = tuple(None if i == k else 0 for i in range(nargs))
        call_args = [samples[0][k] if i == k else np.stack([s[i] for s in samples])
                     for i in range(nargs)]
        per_call = [tuple(samples[0][k] if i == k else s[i] for i in range(nargs))
                    for s in samples]
        got = kiln.vmap(rec.fun, in_axes=in_axes)(*call_args)
        _check_batched(rec, got, _loop(rec.fun, per_call), f"vmap in_axes={in_axes}")


@pytest.mark.parametrize("rec", _params("vmap_axis1", lambda r: r.vmap))
def test_vmap_axis1(rec):
    samples = _samples(rec)
    ranks = [np.ndim(a) for a in samples[0]]
    if not any(r >= 1 for r in ranks):
        pytest.skip("all arguments are scalars")
    in_axes = tuple(1 if r >= 1 else 0 for r in ranks)
    call_args = [np.moveaxis(np.stack(col), 0, ax) for col, ax in zip(zip(*samples), in_axes)]
    got = kiln.vmap(rec.fun, in_axes=in_axes, out_axes=-1)(*call_args)
    _check_batched(rec, got, _loop(rec.fun, samples), f"vmap in_axes={in_axes} out_axes=-1",
                   out_axis=-1)


@pytest.mark.parametrize("rec", _params("jit_of_vmap", lambda r: r.vmap and r.jit))
def test_jit_of_vmap(rec):
    samples = _samples(rec)
    stacked = [np.stack(col) for col in zip(*samples)]
    _check_batched(rec, kiln.jit(kiln.vmap(rec.fun))(*stacked), _loop(rec.fun, samples),
                   "jit(vmap)")


def _scalarized(rec, args, argnums):
    """A real scalar function of all args: sum_k Re(sum(out_k * c_k)) for fixed random c_k."""
    rng = np.random.default_rng(_seed(rec, 400))
    outs = [o for o in _leaves(rec.fun(*args)) if _inexact(_dtype(o))]
    cs = [np.asarray(_random_like(rng, o)).astype(_dtype(o)) for o in outs]
    if any(_complex(_dtype(o)) for o in outs) and not hasattr(lax, "real"):
        pytest.skip("needs lax.real for complex outputs")

    def s(*all_args):
        terms = []
        for o, c in zip([o for o in _leaves(rec.fun(*all_args)) if _inexact(_dtype(o))], cs):
            t = lax.reduce_sum(lax.mul(o, c), tuple(range(np.ndim(c))))
            if _complex(_dtype(t)):
                t = lax.real(t)
            terms.append(lax.convert_element_type(t, np.float32))
        return functools.reduce(lax.add, terms)
    return s


@pytest.mark.parametrize("rec", _params("vmap_of_grad", lambda r: r.vmap and _reverse_ok(r)))
def test_vmap_of_grad(rec):
    samples = _samples(rec)
    argnums, _, _ = _skip_without_derivatives(rec, samples[0])
    s = _scalarized(rec, samples[0], argnums)
    gfun = kiln.grad(s, argnums=argnums)
    stacked = [np.stack(col) for col in zip(*samples)]
    _check_batched(rec, kiln.vmap(gfun)(*stacked), _loop(gfun, samples), "vmap(grad)")


# ================================================================================================
# Rule coverage
# ================================================================================================

# Linear primitives: each must have a transpose rule (checked for those that exist).
LINEAR = [
    "add", "sub", "neg", "mul", "div", "add_any", "convert_element_type", "broadcast_in_dim",
    "reshape", "transpose", "squeeze", "expand_dims", "reduce_sum", "select_n", "dot_general",
    "concatenate", "pad", "slice", "dynamic_slice", "dynamic_update_slice", "gather",
    "scatter_add", "rev", "cumsum", "real", "imag", "conj", "complex", "reduce_precision",
    "copy", "copy_p", "reduce_window_sum", "conv_general_dilated", "psum", "all_gather",
    "ppermute", "all_to_all", "reduce_scatter", "pbroadcast", "jit", "checkpoint", "custom_lin",
    "cond", "scan", "fft", "triangular_solve", "scatter-add", "scatter-sub",
]

# Primitives that need no JVP rule (JAX has none either).
NO_JVP_OK = {
    "igamma_grad_a": "JAX defines no JVP for igamma_grad_a",
    "random_gamma_grad": "JAX defines no JVP for random_gamma_grad",
    "zeta": "JAX defines no JVP for zeta",
}

# Primitives that need no batching rule.
NO_BATCH_OK: dict = {}

# Primitives that no op record has to exercise, with the reason and where they are tested.
RECORD_EXEMPT = {
    "psum": "collective: needs an axis name bound by vmap/pmap (test_transformations.py)",
    "pmax": "collective: needs an axis name bound by vmap/pmap (test_transformations.py)",
    "pmin": "collective: needs an axis name bound by vmap/pmap (test_transformations.py)",
    "all_gather": "collective: needs an axis name bound by vmap/pmap (test_transformations.py)",
    "axis_index": "collective: needs an axis name bound by vmap/pmap (test_transformations.py)",
    "ppermute": "collective: needs an axis name bound by vmap/pmap (test_transformations.py)",
    "all_to_all": "collective: needs an axis name bound by vmap/pmap (test_collectives.py)",
    "reduce_scatter": "collective (lax.psum_scatter): needs an axis name bound by vmap/pmap "
                      "(test_collectives.py)",
    "pbroadcast": "collective: needs an axis name bound by vmap/pmap (test_collectives.py)",
    "pvary": "collective: marks a value device-varying inside shard_map (an identity with a psum transpose; tests/parallel/test_shard_map_vma.py)",
    "stop_gradient": "its derivative is zero by design, so finite differences disagree "
                     "(test_transformations.py::test_stop_gradient)",
    "rng_bit_generator": "JAX's batching rule draws a whole batch from its first key, so vmap "
                         "is not the per-example map (test_random_rbg.py checks it against "
                         "JAX)",
}

# Rule holes that are known kiln bugs: kept visible as strict xfails.
KNOWN_RULE_HOLES: dict = {}

# Primitives that should have records but do not yet: strict xfails, so adding the record
# (and forgetting to delete the entry) is noticed.
KNOWN_COVERAGE_GAPS: dict = {}


def _lax_primitives():
    prims = {}
    for name in dir(lax):
        obj = getattr(lax, name)
        if name.endswith("_p") and isinstance(obj, Primitive):
            prims.setdefault(obj.name, obj)
    return prims


def _core_primitives():
    from kiln import custom_derivatives as cd
    from kiln.interpreters import pjit
    return {p.name: p for p in (ad.add_any_p, pjit.jit_p, cd.remat_p, cd.custom_jvp_call_p,
                                cd.custom_vjp_call_p, cd.custom_lin_p)}


def _rule_params():
    prims = {**_lax_primitives(), **_core_primitives()}
    out = []
    for name in sorted(prims):
        for kind in ("impl", "abstract_eval", "batch", "jvp", "transpose"):
            if kind == "transpose" and name not in LINEAR:
                continue
            if kind == "jvp" and name in NO_JVP_OK:
                continue
            if kind == "batch" and name in NO_BATCH_OK:
                continue
            marks = ()
            if (name, kind) in KNOWN_RULE_HOLES:
                marks = pytest.mark.xfail(strict=True, reason=KNOWN_RULE_HOLES[(name, kind)])
            out.append(pytest.param(prims[name], kind, id=f"{name}-{kind}", marks=marks))
    return out


@pytest.mark.parametrize("prim,kind", _rule_params())
def test_primitive_rule(prim, kind):
    if kind == "impl":
        assert callable(prim.impl), f"{prim.name} has no impl"
    elif kind == "abstract_eval":
        assert callable(prim.abstract_eval), f"{prim.name} has no abstract_eval"
    elif kind == "batch":
        assert prim in batching.batch_rules, f"{prim.name} has no batching rule"
    elif kind == "jvp":
        assert prim in ad.jvp_rules, f"{prim.name} has no jvp rule"
    else:
        assert prim in ad.transpose_rules, f"linear primitive {prim.name} has no transpose rule"


def test_lax_exports_primitives():
    # Sanity: the coverage tests above see the basic primitives.
    names = set(_lax_primitives())
    assert {"add", "mul", "sin", "reduce_sum", "broadcast_in_dim", "psum"} <= names


@functools.cache
def _record_coverage():
    covered, failures = {}, {}
    for r in RECORDS:
        prims = _record_primitives(r)
        if prims is None:
            failures[r.name] = "cannot be staged (see its test_jit)"
            continue
        for name in sorted(prims):
            covered.setdefault(name, r.name)
    return covered, failures


def _coverage_params():
    if not RECORDS:
        return [pytest.param(None, id="no-records",
                             marks=pytest.mark.skip(reason="no op record tables yet"))]
    return [pytest.param(name, id=name, marks=(
        pytest.mark.xfail(strict=True, reason=KNOWN_COVERAGE_GAPS[name])
        if name in KNOWN_COVERAGE_GAPS else ()))
        for name in sorted(_lax_primitives()) if name not in RECORD_EXEMPT]


@pytest.mark.parametrize("prim_name", _coverage_params())
def test_primitive_covered_by_a_record(prim_name):
    covered, _ = _record_coverage()
    assert prim_name in covered, (
        f"primitive {prim_name!r} is exercised by no op record in tests/lax/records/ "
        "(add a record, or an entry with a reason to RECORD_EXEMPT)")
