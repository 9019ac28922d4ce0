"""Issue 14 (API items): ``kiln.Array`` as the abstract array type, tracer reprs, ``*_like``
and ``linear_transpose`` with ``ShapeDtypeStruct``, ``config_with_absl``, ``lax.composite``,
``lax.DotAlgorithm``/``DotAlgorithmPreset``, ``cost_analysis``, and indexing with tuples of
integer sequences under transformations. Each checked against JAX 0.10.2."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from functools import partial

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln import lax as klax

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax as jlax  # noqa: E402

LIBS = {"jax": (jax, jnp, jlax), "kiln": (kiln, knp, klax)}


def _error(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def _outcome(f):
    """``("ok", value, dtype, weak)`` or ``("err", exception class name)``."""
    try:
        r = f()
    except Exception as e:  # noqa: BLE001
        return ("err", type(e).__name__)
    leaves = jax.tree_util.tree_leaves(r)
    return ("ok", [(np.asarray(x).tolist(), str(x.dtype), bool(getattr(x, "weak_type", False)))
                   for x in leaves])


def _both(make):
    """``make(lib, lnp, llax)`` run against JAX and kiln; returns the two outcomes."""
    return _outcome(lambda: make(*LIBS["jax"])), _outcome(lambda: make(*LIBS["kiln"]))


# 1. kiln.Array is the abstract array type --------------------------------------------------------

def test_ndarray_is_array_and_concrete_instances():
    assert knp.ndarray is kiln.Array and jnp.ndarray is jax.Array
    x = knp.ones(3)
    assert type(x).__name__ == type(jnp.ones(3)).__name__ == "ArrayImpl"
    assert isinstance(x, kiln.Array) and issubclass(type(x), kiln.Array)
    for v in (np.ones(3), np.float32(1), 1.0, 3, True, [1.0], np.ndarray):
        assert isinstance(v, kiln.Array) is isinstance(v, jax.Array) is False
    assert not issubclass(np.ndarray, kiln.Array) and not issubclass(np.ndarray, jax.Array)
    assert isinstance(kiln.random.key(0), kiln.Array) and isinstance(jax.random.key(0), jax.Array)
    assert isinstance(kiln.eval_shape(lambda a: a, x), kiln.Array) is False
    with pytest.raises(TypeError):
        kiln.Array()
    assert kiln.Array.__name__ == "Array" and repr(kiln.Array) == "<class 'kiln.Array'>"


@pytest.mark.parametrize("which", ["jax", "kiln"])
def test_tracers_are_array_instances(which):
    lib, lnp, llax = LIBS[which]
    seen = []

    def f(x):
        seen.append((isinstance(x, lib.Array), isinstance(x, lnp.ndarray)))
        return x * 1.0

    x = lnp.ones(3)
    lib.jit(f)(x)
    lib.vmap(f)(lnp.ones((2, 3)))
    lib.grad(lambda v: f(v).sum())(x)
    lib.jvp(f, (x,), (x,))
    lib.linearize(f, x)
    lib.make_jaxpr(f)(x)
    llax.scan(lambda c, r: (f(c), r), x, lnp.ones(2))
    llax.cond(True, f, f, x)
    llax.while_loop(lambda c: c[0] < 1.0, lambda c: f(c) + 1.0, x)
    assert seen and all(a and b for a, b in seen), seen


def test_array_methods_on_every_tracer():
    # A jit tracer's internal slot once hid the ``var`` method.
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    for lib, lnp in ((kiln, knp), (jax, jnp)):
        f = lambda v: v.var() + v.std(axis=0).sum() + v.mean()  # noqa: E731
        vals = [lib.jit(f)(lnp.asarray(x)), lib.vmap(f)(lnp.asarray(x[None])),
                lib.grad(f)(lnp.asarray(x))]
        if lib is kiln:
            got = vals
        else:
            expected = vals
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-6)


def test_internal_array_name_stays_concrete():
    from kiln.array import Array as Concrete
    seen = []

    def f(x):
        seen.append(isinstance(x, Concrete))
        return x

    kiln.jit(f)(knp.ones(2))
    assert seen == [False]
    assert isinstance(knp.ones(2), Concrete)


# 2. tracer reprs ---------------------------------------------------------------------------------

def _repr_log(lib, lnp, llax):
    out = {}

    def mk(tag):
        def f(x):
            try:
                format(x, ">5")
                fmt = "no error"
            except TypeError as e:
                fmt = str(e)
            out.setdefault(tag, set()).add((repr(x), str(x), f"{x}", fmt))
            return x
        return f

    lib.jit(mk("jit"))(lnp.ones(3))
    lib.jit(mk("jit-weak"))(1.0)
    lib.jit(mk("jit-int"))(lnp.ones(3, lnp.int32))
    lib.jit(mk("jit-bool"))(lnp.ones((), lnp.bool_))
    lib.jit(mk("jit-bf16"))(lnp.ones((2, 2), lnp.bfloat16))
    lib.vmap(mk("vmap"))(lnp.ones((2, 3)))
    lib.vmap(mk("vmap-ax1"), in_axes=1)(lnp.ones((2, 3)))
    lib.grad(lambda x: mk("grad")(x).sum())(lnp.ones(3))
    lib.grad(mk("grad-scalar"))(1.0)
    lib.jvp(mk("jvp"), (lnp.ones(3),), (lnp.ones(3),))
    lib.jvp(mk("jvp-scalar"), (1.0,), (1.0,))
    lib.make_jaxpr(mk("make_jaxpr"))(lnp.ones(3))
    lib.linearize(mk("linearize"), lnp.ones(3))
    lib.vjp(mk("vjp"), lnp.ones(3))
    llax.scan(lambda c, x: (mk("scan")(c), x), lnp.ones(3), lnp.ones(2))
    lib.eval_shape(mk("eval_shape"), lnp.ones(3))
    lib.jit(lib.grad(lambda x: mk("jitgrad")(x).sum()))(lnp.ones(3))
    lib.vmap(lib.grad(lambda x: mk("vmapgrad")(x).sum()))(lnp.ones((2, 3)))
    lib.jit(lib.vmap(mk("jitvmap")))(lnp.ones((2, 3)))
    lib.jacfwd(mk("jacfwd"))(lnp.ones(2))
    lib.jacrev(mk("jacrev"))(lnp.ones(2))
    lib.hessian(lambda x: mk("hessian")(x).sum())(lnp.ones(2))
    llax.cond(True, mk("cond"), mk("cond"), lnp.ones(2))
    lib.checkpoint(mk("checkpoint"))(lnp.ones(2))
    lib.grad(lambda x: mk("grad-bf16")(x).sum().astype(lnp.float32))(lnp.ones(2, lnp.bfloat16))
    lib.jit(lambda x: mk("jit-weak-op")(x * 2.0))(1.0)
    return out


def test_tracer_reprs_match_jax():
    expected = _repr_log(*LIBS["jax"])
    got = _repr_log(*LIBS["kiln"])
    assert got == expected
    assert ("JitTracer(float32[3])",) * 3 == next(iter(got["jit"]))[:3]


# 3. *_like with ShapeDtypeStruct, linear_transpose with ShapeDtypeStruct ----------------------

class _Duck:
    shape = (2,)
    dtype = np.dtype("int16")


LIKE_CASES = {
    "zeros_eval_shape": lambda lib, lnp: lnp.zeros_like(lib.eval_shape(lambda x: x * 2,
                                                                       lnp.ones((2, 3)))),
    "ones_sds": lambda lib, lnp: lnp.ones_like(lib.ShapeDtypeStruct((2, 3), lnp.float32)),
    "empty_sds": lambda lib, lnp: lnp.empty_like(lib.ShapeDtypeStruct((2,), lnp.int32)),
    "full_sds": lambda lib, lnp: lnp.full_like(lib.ShapeDtypeStruct((2, 2), lnp.float32), 3),
    "full_sds_dtype": lambda lib, lnp: lnp.full_like(lib.ShapeDtypeStruct((2,), lnp.float32),
                                                     3, dtype=lnp.int8),
    "full_sds_array_fill": lambda lib, lnp: lnp.full_like(
        lib.ShapeDtypeStruct((2,), lnp.float32), lnp.arange(2)),
    "zeros_sds_shape": lambda lib, lnp: lnp.zeros_like(lib.ShapeDtypeStruct((2,), lnp.uint8),
                                                       shape=(3, 1)),
    "weak_sds_not_weak": lambda lib, lnp: lnp.zeros_like(
        lib.ShapeDtypeStruct((2,), lnp.float32, weak_type=True)),
    "f64_sds_canonical": lambda lib, lnp: lnp.ones_like(lib.ShapeDtypeStruct((2,), np.float64)),
    "bool_sds": lambda lib, lnp: lnp.ones_like(lib.ShapeDtypeStruct((2,), lnp.bool_)),
    "complex_sds": lambda lib, lnp: lnp.full_like(lib.ShapeDtypeStruct((2,), lnp.complex64),
                                                  1 + 2j),
    "duck": lambda lib, lnp: lnp.zeros_like(_Duck()),
    "duck_full": lambda lib, lnp: lnp.full_like(_Duck(), 3.5),
    "weak_array": lambda lib, lnp: lnp.zeros_like(lnp.asarray(1.0) + 1.0),
    "scalar": lambda lib, lnp: lnp.ones_like(2.0),
    "list_rejected": lambda lib, lnp: lnp.zeros_like([1, 2]),
    "list_fill_rejected": lambda lib, lnp: lnp.full_like(lib.ShapeDtypeStruct((2,), lnp.float32),
                                                         [1, 2]),
    "jit_sds": lambda lib, lnp: lib.jit(lambda: lnp.zeros_like(
        lib.ShapeDtypeStruct((2,), lnp.float32)))(),
    "grad_like": lambda lib, lnp: lib.grad(lambda x: (lnp.ones_like(x) * x).sum())(lnp.ones(3)),
    "vmap_like": lambda lib, lnp: lib.vmap(lambda x: lnp.full_like(x, 2.0))(lnp.ones((2, 3))),
    "lax_full_like_sds": lambda lib, lnp: lib.lax.full_like(
        lib.ShapeDtypeStruct((2,), lnp.float32, weak_type=True), 2.0),
}


@pytest.mark.parametrize("name", list(LIKE_CASES))
def test_like_functions_accept_shape_dtype_structs(name):
    f = LIKE_CASES[name]
    expected, got = _both(lambda lib, lnp, llax: f(lib, lnp))
    assert got == expected


def _lt(lib, lnp, what):
    S = lib.ShapeDtypeStruct
    f2 = lambda x, y: (x * 2.0 + y, x.sum())  # noqa: E731
    t2 = lib.linear_transpose(f2, S((3,), lnp.float32), S((3,), lnp.float32))
    cases = {
        "sds": lambda: lib.linear_transpose(lambda x: x * 2, S((2, 3), lnp.float32))(
            lnp.ones((2, 3))),
        "two": lambda: t2((lnp.ones(3), lnp.array(2.0))),
        "jit": lambda: lib.jit(t2)((lnp.ones(3), lnp.array(2.0))),
        "vmap": lambda: lib.vmap(lib.linear_transpose(lambda x: x * 2, S((3,), lnp.float32)))(
            lnp.ones((4, 3))),
        "weak": lambda: lib.linear_transpose(lambda x: x * 2, S((3,), lnp.float32,
                                                                 weak_type=True))(lnp.ones(3)),
        "bad_ct_dtype": lambda: lib.linear_transpose(lambda x: x * 2, S((3,), lnp.float32))(
            lnp.ones(3, lnp.float16)),
        "int": lambda: lib.linear_transpose(lambda x: x * 2, S((3,), lnp.int32))(
            lnp.ones(3, lnp.int32)),
        "float_to_int": lambda: lib.linear_transpose(lambda x: x.astype(lnp.int32),
                                                     S((3,), lnp.float32)),
        "unused_input": lambda: lib.linear_transpose(lambda x, y: x * 2, S((3,), lnp.float32),
                                                     S((3,), lnp.float32))(lnp.ones(3)),
        "bad_tree": lambda: t2(lnp.ones(3)),
        "dict": lambda: lib.linear_transpose(lambda d: d["a"] * 3.0,
                                             {"a": S((2, 3), lnp.float32)})(lnp.ones((2, 3))),
        "scalar_primal": lambda: lib.linear_transpose(lambda x: 2 * x, 1.0)(3.0),
    }
    return cases[what]()


@pytest.mark.parametrize("what", ["sds", "two", "jit", "vmap", "weak", "bad_ct_dtype", "int",
                                  "float_to_int", "unused_input", "bad_tree", "dict",
                                  "scalar_primal"])
def test_linear_transpose_with_shape_dtype_structs(what):
    expected, got = _both(lambda lib, lnp, llax: _lt(lib, lnp, what))
    assert got == expected


def test_linear_transpose_is_a_pytree():
    t = kiln.linear_transpose(lambda x: x * 2.0, kiln.ShapeDtypeStruct((3,), knp.float32))
    assert isinstance(t, kiln.tree_util.Partial)
    np.testing.assert_array_equal(kiln.jit(lambda tt, c: tt(c))(t, knp.ones(3))[0], 2.0)


# 4. config_with_absl -------------------------------------------------------------------------------

def test_config_with_absl_without_absl(monkeypatch):
    monkeypatch.setitem(sys.modules, "absl", None)
    for fn in (kiln.config.config_with_absl, kiln.config.parse_flags_with_absl):
        with pytest.raises(ModuleNotFoundError):
            fn()
    assert kiln.config.use_absl is False


_FAKE_ABSL = '''
import sys, types
absl = types.ModuleType("absl"); flags = types.ModuleType("absl.flags")
app = types.ModuleType("absl.app")
class _Flag:
    def __init__(self, kind, name, default, help, extra=None):
        self.kind, self.name, self.value, self.help = kind, name, default, help
        self.extra, self.present = extra, 0
class _Flags(dict):
    def __call__(self, argv, known_only=False):
        for a in argv[1:]:
            name, _, val = a[2:].partition("=")
            f = self.get(name)
            if f is None:
                continue
            f.present = 1
            f.value = (val.lower() in ("", "true", "1")) if f.kind == "bool" else \\
                int(val) if f.kind == "int" else val
        return argv
FLAGS = _Flags()
def _define(kind):
    def define(name, default, *args):
        extra = args[0] if kind == "enum" else None
        help = args[-1]
        if name in FLAGS:
            raise ValueError("defined twice: " + name)
        FLAGS[name] = _Flag(kind, name, default, help, extra)
    return define
flags.FLAGS = FLAGS
flags.DEFINE_bool = _define("bool"); flags.DEFINE_integer = _define("int")
flags.DEFINE_string = _define("str"); flags.DEFINE_enum = _define("enum")
flags.DEFINE_float = _define("float")
_after = []
app.call_after_init = _after.append
def run(main, argv=None):
    argv = FLAGS(sys.argv if argv is None else argv)
    for cb in _after:
        cb()
    main(argv)
app.run = run
absl.flags, absl.app = flags, app
sys.modules.update({"absl": absl, "absl.flags": flags, "absl.app": app})
'''


def _run_script(body):
    code = _FAKE_ABSL + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_config_with_absl_defines_flags_and_applies_command_line():
    out = _run_script('''
        sys.argv = ["prog", "--jax_enable_x64", "--jax_numpy_rank_promotion=raise",
                    "--jax_num_cpu_devices=3", "--kiln_backend=reference"]
        import kiln
        from absl import app, flags
        kiln.config.config_with_absl()
        assert kiln.config.use_absl and kiln.config.absl_flags is flags
        F = flags.FLAGS
        assert F["jax_enable_x64"].kind == "bool" and F["jax_enable_x64"].value is False
        assert F["jax_numpy_rank_promotion"].kind == "enum"
        assert F["jax_numpy_rank_promotion"].extra == ["allow", "warn", "raise"]
        assert F["jax_num_cpu_devices"].kind == "int"
        assert F["jax_default_matmul_precision"].kind == "str"
        assert kiln.config.jax_enable_x64 is False          # applied by app.run only
        def main(argv):
            c = kiln.config
            print(c.jax_enable_x64, c.jax_numpy_rank_promotion, c.jax_num_cpu_devices,
                  c.kiln_backend, c.jax_debug_nans)
        app.run(main)
    ''')
    assert out.split() == ["True", "raise", "3", "reference", "False"]


def test_parse_flags_with_absl_reads_only_own_flags_before_double_dash():
    out = _run_script('''
        sys.argv = ["prog", "--jax_debug_nans=true", "--other=1", "--", "--jax_enable_x64"]
        import kiln
        kiln.config.parse_flags_with_absl()
        kiln.config.parse_flags_with_absl()      # a second call does nothing
        print(kiln.config.jax_debug_nans, kiln.config.jax_enable_x64)
    ''')
    assert out.split() == ["True", "False"]


def test_config_with_absl_real_absl():
    pytest.importorskip("absl")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent('''
        import sys
        sys.argv = ["prog", "--jax_enable_x64", "--jax_numpy_rank_promotion=warn"]
        import kiln
        from absl import app
        kiln.config.config_with_absl()
        def main(argv):
            print(kiln.config.jax_enable_x64, kiln.config.jax_numpy_rank_promotion)
        app.run(main)
    ''')], capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["True", "warn"], r.stderr


# 5a. lax.composite -----------------------------------------------------------------------------------

def _composite_jaxprs(lib, lnp, llax):
    @partial(llax.composite, name="my.tangent")
    def tangent(x):
        return llax.sin(x) / llax.cos(x)

    @partial(llax.composite, name="my.op", version=2)
    def op(x, y, *, scale=2.0, axis=0):
        return (x * scale + y).sum(axis), x

    @partial(llax.composite, name="my.attrs")
    def attrs(x, *, scale, d=None):
        return x * scale

    c = lnp.arange(3.0)
    x = lnp.array([1.0, 2.0, 3.0])
    return [
        str(lib.make_jaxpr(tangent)(x)),
        str(lib.make_jaxpr(op)(x, x)),
        str(lib.make_jaxpr(lambda a, b: op(a, b, scale=3.0, axis=0))(x, x)),
        str(lib.make_jaxpr(lambda a: attrs(a, scale=np.array([3.0, 1.0, 2.0], np.float32),
                                            d={"a": 1, "b": (2, 3)}))(x)),
        str(lib.make_jaxpr(llax.composite(lambda a: a + c, name="cap"))(x)),
        str(lib.make_jaxpr(llax.composite(lambda d: {"a": d["x"] * 2, "b": [d["y"]]},
                                          name="pyt"))({"x": x, "y": 1.0})),
        str(lib.make_jaxpr(lambda a: lib.jit(tangent)(a))(x)),
    ]


def test_composite_jaxprs_print_as_jax():
    assert _composite_jaxprs(*LIBS["kiln"]) == _composite_jaxprs(*LIBS["jax"])


def _composite_values(lib, lnp, llax, what):
    tangent = llax.composite(lambda x: llax.sin(x) / llax.cos(x), name="my.tangent")
    op = llax.composite(lambda x, y, *, scale=2.0: ((x * scale + y).sum(), x), name="my.op")
    x = lnp.array([0.1, 0.5, 1.0])
    return {
        "eager": lambda: tangent(x),
        "jit": lambda: lib.jit(tangent)(x),
        "jit_in_jit": lambda: lib.jit(lambda a: lib.jit(tangent)(a) * 2)(x),
        "multi": lambda: op(x, x, scale=3.0),
        "multi_jit": lambda: lib.jit(lambda a: op(a, a, scale=3.0))(x),
        "pytree": lambda: llax.composite(lambda d: {"a": d["x"] * 2, "b": d["x"] + 1},
                                         name="ns.pyt")({"x": x}),
        "closure": lambda: lib.jit(llax.composite(lambda a: a * lnp.arange(3.0),
                                                  name="ns.cap"))(x),
        "grad": lambda: lib.grad(lambda a: tangent(a).sum())(x),
        "jvp": lambda: lib.jvp(tangent, (x,), (x,)),
        "vmap": lambda: lib.vmap(tangent)(lnp.ones((2, 3))),
        "transpose": lambda: lib.linear_transpose(llax.composite(lambda a: a * 2.0, name="ns.t"),
                                                  x)(x),
        "tracer_const": lambda: lib.jit(lambda y: llax.composite(lambda a: a * y,
                                                                 name="ns.bad")(y))(x),
        "tracer_attr": lambda: lib.jit(lambda y: op(y, y, scale=y))(x),
        "custom_jvp_around": lambda: lib.grad(lambda a: _with_jvp(lib, tangent)(a).sum())(x),
    }[what]()


def _with_jvp(lib, f):
    g = lib.custom_jvp(f)
    g.defjvp(lambda p, t: (f(p[0]), t[0] / lib.numpy.cos(p[0]) ** 2))
    return g


@pytest.mark.parametrize("what", ["eager", "jit", "jit_in_jit", "multi", "multi_jit", "pytree",
                                  "closure", "grad", "jvp", "vmap", "transpose", "tracer_const",
                                  "tracer_attr", "custom_jvp_around"])
def test_composite_values_and_errors(what):
    expected, got = _both(lambda lib, lnp, llax: _composite_values(lib, lnp, llax, what))
    if expected[0] == "ok":
        assert got[0] == "ok", got
        for (ev, ed, ew), (gv, gd, gw) in zip(expected[1], got[1]):
            assert (ed, ew) == (gd, gw)
            np.testing.assert_allclose(np.asarray(gv), np.asarray(ev), rtol=2e-6, atol=1e-6)
    else:
        assert got == expected


def test_composite_error_messages_and_signature():
    f = klax.composite(lambda x: klax.sin(x), name="ns.s")
    e = _error(lambda: kiln.grad(lambda a: f(a).sum())(knp.ones(2)))
    assert isinstance(e, ValueError) and str(e).startswith("JVP rule for composite not")
    e = _error(lambda: kiln.vmap(f)(knp.ones((2, 2))))
    assert isinstance(e, NotImplementedError) and "composite" in str(e)
    assert f.__name__ == "<lambda>"

    def named(x):
        return x

    assert klax.composite(named, name="ns.n").__name__ == "named"


# 5b. DotAlgorithm / DotAlgorithmPreset -------------------------------------------------------------

_RS = np.random.RandomState(0)
_A = _RS.randn(4, 5).astype(np.float32)
_B = _RS.randn(5, 3).astype(np.float32)
_DTYPES = ["float32", "bfloat16", "float16", "int32", "bool"]


def _dot_case(lib, lnp, llax, preset, dt, how):
    p = llax.DotAlgorithmPreset[preset]
    a, b = lnp.asarray(_A, dt), lnp.asarray(_B, dt)
    if how == "eager":
        return llax.dot(a, b, precision=p)
    if how == "jit":
        return lib.jit(lambda u, v: llax.dot(u, v, precision=p))(a, b)
    return lnp.dot(a, b, precision=preset)


def _close(expected, got, tol):
    """Same outcome; values equal up to ``tol`` (one rounding of a low-precision type may
    differ: XLA and kiln add the products in different orders)."""
    assert got[0] == expected[0], (expected, got)
    if expected[0] == "err":
        assert got == expected
        return
    (ev, ed, ew), = expected[1]
    (gv, gd, gw), = got[1]
    assert (gd, gw) == (ed, ew)
    np.testing.assert_allclose(np.asarray(gv, np.float64), np.asarray(ev, np.float64),
                               rtol=tol, atol=tol)


def _tol(preset, dt):
    low = {"bfloat16": 1e-2, "float16": 2e-3}
    if "BF16" in preset:
        return max(1e-2, low.get(dt, 0))
    if "F16" in preset:
        return max(2e-3, low.get(dt, 0))
    return low.get(dt, 1e-5 if dt == "float32" else 0)


def _check_presets(preset, cases):
    for dt, how in cases:
        expected, got = _both(lambda lib, lnp, llax: _dot_case(lib, lnp, llax, preset, dt, how))
        _close(expected, got, _tol(preset, dt))


@pytest.mark.parametrize("preset", list(jlax.DotAlgorithmPreset.__members__))
def test_dot_algorithm_presets_as_jax_cpu(preset):
    _check_presets(preset, [(dt, "eager") for dt in _DTYPES]
                   + [("float32", "jit"), ("bfloat16", "name")])


@pytest.mark.slow
@pytest.mark.parametrize("preset", list(jlax.DotAlgorithmPreset.__members__))
def test_dot_algorithm_presets_as_jax_cpu_every_dtype_under_jit(preset):
    _check_presets(preset, [(dt, how) for dt in _DTYPES for how in ("jit", "name")])


def test_dot_algorithm_rounds_as_the_preset():
    a, b = knp.asarray(_A), knp.asarray(_B)
    f16 = np.asarray(klax.dot(a.astype(knp.float16), b.astype(knp.float16)), np.float32)
    np.testing.assert_array_equal(np.asarray(klax.dot(a, b, precision="F16_F16_F16")), f16)
    exact = (_A.astype(np.float64) @ _B.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(klax.dot(a, b, precision="F64_F64_F64")), exact)


DOT_MORE = {
    "mixed_lax": lambda lib, lnp, llax: llax.dot_general(
        lnp.asarray(_A, lnp.float16), lnp.asarray(_B), (((1,), (0,)), ((), ())),
        precision="BF16_BF16_F32"),
    "pet16": lambda lib, lnp, llax: llax.dot_general(
        lnp.asarray(_A), lnp.asarray(_B), (((1,), (0,)), ((), ())), precision="F32_F32_F32",
        preferred_element_type=lnp.float16),
    "int8_pet_allowed": lambda lib, lnp, llax: lnp.dot(
        lnp.asarray(_A * 3, lnp.int32), lnp.asarray(_B * 3, lnp.int32), precision="DEFAULT",
        preferred_element_type=lnp.int8),
    "int8_pet_rejected": lambda lib, lnp, llax: lnp.dot(
        lnp.asarray(_A * 3, lnp.int32), lnp.asarray(_B * 3, lnp.int32),
        preferred_element_type=lnp.int8),
    "grad": lambda lib, lnp, llax: lib.grad(lambda x: lnp.dot(
        x, lnp.asarray(_B), precision="F16_F16_F16").sum())(lnp.asarray(_A)),
    "vmap": lambda lib, lnp, llax: lib.vmap(lambda x: lnp.dot(
        x, lnp.asarray(_B), precision="BF16_BF16_F32"))(lnp.stack([lnp.asarray(_A)] * 2)),
    "einsum": lambda lib, lnp, llax: lnp.einsum("ij,jk->ik", lnp.asarray(_A), lnp.asarray(_B),
                                                precision=llax.DotAlgorithmPreset.F16_F16_F16),
    "matmul_big_jit": lambda lib, lnp, llax: lib.jit(lambda u, v: lnp.matmul(
        u, v, precision="F16_F16_F16"))(lnp.asarray(np.tile(_A, (16, 13))[:64, :64]),
                                        lnp.asarray(np.tile(_B, (13, 22))[:64, :64])),
    "explicit_algorithm": lambda lib, lnp, llax: llax.dot(
        lnp.asarray(_A), lnp.asarray(_B),
        precision=llax.DotAlgorithm(np.float32, np.float32, np.float32)),
    "unknown_name": lambda lib, lnp, llax: lnp.dot(lnp.asarray(_A), lnp.asarray(_B),
                                                   precision="nonsense"),
    "tuple_of_presets": lambda lib, lnp, llax: lnp.dot(
        lnp.asarray(_A), lnp.asarray(_B), precision=(llax.DotAlgorithmPreset.F16_F16_F16,) * 2),
    "tuple_of_names": lambda lib, lnp, llax: lnp.dot(
        lnp.asarray(_A), lnp.asarray(_B), precision=("F16_F16_F16", "highest")),
    "default_precision_config": lambda lib, lnp, llax: _with_default(lib, lnp, "F16_F16_F16"),
    "default_precision_config_cpu_error": lambda lib, lnp, llax: _with_default(
        lib, lnp, "TF32_TF32_F32"),
}


def _with_default(lib, lnp, name):
    with lib.default_matmul_precision(name):
        return lnp.dot(lnp.asarray(_A), lnp.asarray(_B))


@pytest.mark.parametrize("name", list(DOT_MORE))
def test_dot_algorithm_more(name):
    expected, got = _both(DOT_MORE[name])
    _close(expected, got, 1e-2 if "16" in name or "mixed" in name or "vmap" in name
           or "grad" in name or "einsum" in name or "config" in name else 1e-5)


def test_dot_algorithm_types_and_printing():
    P, JP = klax.DotAlgorithmPreset, jlax.DotAlgorithmPreset
    assert list(P.__members__) == list(JP.__members__)
    for name in P.__members__:
        p, jp = P[name], JP[name]
        assert (repr(p), str(p)) == (repr(jp), str(jp))
        assert p.supported_lhs_types == jp.supported_lhs_types
        assert p.supported_rhs_types == jp.supported_rhs_types
        assert p.accumulation_type == jp.accumulation_type
        for a, b in [(np.float32, np.float32), (jnp.bfloat16, jnp.bfloat16),
                     (np.float16, np.float16)]:
            assert p.supported_output_types(a, b) == jp.supported_output_types(a, b)
    alg = klax.DotAlgorithm(np.float16, np.float16, np.float32)
    assert repr(alg) == repr(jlax.DotAlgorithm(np.float16, np.float16, np.float32))
    assert klax.DotAlgorithm._fields == jlax.DotAlgorithm._fields
    txt = str(kiln.make_jaxpr(lambda a, b: knp.matmul(a, b, precision="F16_F16_F16"))(
        knp.asarray(_A), knp.asarray(_B)))
    assert "precision=F16_F16_F16" in txt
    e = _error(lambda: klax.dot(knp.asarray(_A), knp.asarray(_B), precision=P.TF32_TF32_F32))
    assert str(e) == "The precision 'TF32_TF32_F32' is not supported by dot_general on CPU"
    # Tracing does not check the CPU support (as JAX: lowering does).
    kiln.make_jaxpr(lambda a, b: klax.dot(a, b, precision=P.TF32_TF32_F32))(_A, _B)


# 6. cost_analysis ------------------------------------------------------------------------------------

COST_CASES = {
    "matmul": (lambda lnp: (lambda a, b: a @ b), lambda lnp: (lnp.ones((8, 16)),
                                                              lnp.ones((16, 4)))),
    "batched_matmul": (lambda lnp: (lambda a, b: a @ b),
                       lambda lnp: (lnp.ones((3, 8, 16)), lnp.ones((3, 16, 4)))),
    "int_matmul": (lambda lnp: (lambda a: a @ a), lambda lnp: (lnp.ones((10, 10), lnp.int32),)),
    "elementwise_chain": (lambda lnp: (lambda x: lnp.sin(x) * 2 + lnp.exp(x)),
                          lambda lnp: (lnp.ones((10, 10)),)),
    "add": (lambda lnp: (lambda x, y: x + y), lambda lnp: (lnp.ones((10, 10)),) * 2),
    "div_scalar": (lambda lnp: (lambda x: x / 3.0), lambda lnp: (lnp.ones((10, 10)),)),
    "tanh": (lambda lnp: lnp.tanh, lambda lnp: (lnp.ones((10, 10)),)),
    "sum": (lambda lnp: (lambda x: x.sum()), lambda lnp: (lnp.ones((10, 10)),)),
    "sum_axis": (lambda lnp: (lambda x: x.sum(0)), lambda lnp: (lnp.ones((10, 20)),)),
    "max": (lambda lnp: (lambda x: x.max()), lambda lnp: (lnp.ones((10, 10)),)),
    "mean": (lambda lnp: (lambda x: x.mean()), lambda lnp: (lnp.ones((10, 10)),)),
    "cube": (lambda lnp: (lambda x: x ** 3), lambda lnp: (lnp.ones((10, 10)),)),
    "cumsum": (lambda lnp: (lambda x: lnp.cumsum(x, 0)), lambda lnp: (lnp.ones((10, 10)),)),
    "sort": (lambda lnp: (lambda x: lnp.sort(x, 0)), lambda lnp: (lnp.ones((10, 10)),)),
    "bf16": (lambda lnp: (lambda x: x * x), lambda lnp: (lnp.ones((10, 10), lnp.bfloat16),)),
    "grad": (lambda lnp: None, lambda lnp: (lnp.ones((10, 10)),)),
    "identity": (lambda lnp: (lambda x: x), lambda lnp: (lnp.ones((10, 10)),)),
}


def _cost(lib, lnp, name, compiled=False):
    mk, args = COST_CASES[name]
    f = mk(lnp)
    if f is None:
        f = lib.grad(lambda x: (lnp.sin(x) * x).sum())
    lo = lib.jit(f).lower(*args(lnp))
    return (lo.compile() if compiled else lo).cost_analysis()


@pytest.mark.parametrize("name", list(COST_CASES))
def test_cost_analysis_lowered_matches_xla(name):
    assert _cost(kiln, knp, name) == _cost(jax, jnp, name)


def test_cost_analysis_more_flops():
    def both(f, *shapes):
        kargs = [knp.ones(s) for s in shapes]
        jargs = [jnp.ones(s) for s in shapes]
        k = kiln.jit(f(knp, klax)).lower(*kargs).cost_analysis()
        j = jax.jit(f(jnp, jlax)).lower(*jargs).cost_analysis()
        return k, j

    for f, shapes in [
        (lambda m, l: (lambda x, w: l.conv(x, w, (1, 1), "VALID")), [(1, 2, 8, 8), (3, 2, 3, 3)]),
        (lambda m, l: (lambda x, w: l.conv(x, w, (1, 1), "SAME")), [(1, 2, 8, 8), (3, 2, 3, 3)]),
        (lambda m, l: (lambda x, w: l.conv_general_dilated(x, w, (1, 1), "VALID",
                                                           feature_group_count=2)),
         [(2, 4, 9, 9), (6, 2, 3, 3)]),
        (lambda m, l: (lambda x: m.fft.fft(x)), [(10, 10)]),
        (lambda m, l: (lambda x: l.cond(x.sum() > 0, lambda: x * 2, lambda: x + 1)), [(10, 10)]),
        (lambda m, l: (lambda x, w, b: m.tanh(x @ w + b)), [(10, 10), (10, 10), (10,)]),
        (lambda m, l: (lambda x: l.logistic(x)), [(10, 10)]),
        (lambda m, l: (lambda x: l.reduce_window(x, 0.0, l.add, (3, 3), (1, 1), "VALID")),
         [(10, 10)]),
    ]:
        k, j = both(f, *shapes)
        assert (k.get("flops"), k.get("transcendentals")) == \
            (j.get("flops"), j.get("transcendentals")), (k, j)


def test_cost_analysis_compiled_and_custom_calls():
    lo = kiln.jit(lambda a, b: a @ b).lower(knp.ones((8, 16)), knp.ones((16, 4)))
    assert lo.compile().cost_analysis() == lo.cost_analysis()
    assert lo.cost_analysis()["flops"] == 2 * 8 * 16 * 4
    c = kiln.jit(lambda x: klax.linalg.triangular_solve(x, x, left_side=True, lower=True)).lower(
        knp.ones((3, 3))).cost_analysis()
    j = jax.jit(lambda x: jlax.linalg.triangular_solve(x, x, left_side=True, lower=True)).lower(
        jnp.ones((3, 3))).cost_analysis()
    assert c == j


# 7. indexing with tuples of integer sequences ------------------------------------------------------

INDEXES = {
    "tuple_pair": ((0, 1, 0), (3, 3, 2)),
    "tuple_single": ((0, 1, 0),),
    "tuple_in_tuple": (((0, 1), (1, 2)),),
    "tuple_and_list": (((0, 1), [1, 2]),),
    "list_of_tuples": ([(0, 1), (1, 2)],),
    "tuple_slice": ((0, 1), slice(None)),
    "ellipsis_tuple": (Ellipsis, (0, 1)),
    "tuple_none_tuple": ((0, 1), None, (1, 2)),
    "tuple_2d": (((0, 1), (1, 0)), (2, 3)),
    "tuple_of_bools": ((True, False, True, False),),
    "tuple_of_floats": ((0, 1.0), 1),
    "empty_tuple": ((), 1),
    "array_in_tuple": ((0, np.int32(1)), 1),
    "ragged": ((0, (1, 2)), 1),
    "lists": ([0, 1], [2, 3]),
    "list_of_lists": ([[0, 1], [1, 2]], [[3, 3], [2, 2]]),
    "negative": ((-1, 0), (-2, 5)),
    "out_of_bounds": ((0, 7), (0, 1)),
    "int_and_tuple": (1, (0, 2)),
    "bool_list": ([True, False, True, False],),
    "none_in_tuple": ((0, None), 1),
    "bare_list": [0, 1],
}

_X = np.arange(24.0, dtype=np.float32).reshape(4, 6)


def _index_outcomes(lib, lnp, idx):
    x = lnp.asarray(_X)
    return {
        "eager": _outcome(lambda: x[idx]),
        "jit": _outcome(lambda: lib.jit(lambda v: v[idx])(x)),
        "grad": _outcome(lambda: lib.grad(lambda v: v[idx].sum())(x)),
        "vjp": _outcome(lambda: lib.vjp(lambda v: v[idx], x)[1](x[idx] * 2)),
        "vmap": _outcome(lambda: lib.vmap(lambda v: v[idx])(lnp.stack([x, x + 1]))),
        "at_set_jit": _outcome(lambda: lib.jit(lambda v: v.at[idx].set(-1.0))(x)),
        "at_add_grad": _outcome(lambda: lib.grad(
            lambda v: (v.at[idx].add(v[0, 0] * 2.0) ** 2).sum())(x)),
        "at_get": _outcome(lambda: x.at[idx].get()),
    }


@pytest.mark.parametrize("name", list(INDEXES))
def test_tuple_sequence_indexing_under_transformations(name):
    idx = INDEXES[name]
    expected = _index_outcomes(jax, jnp, idx)
    got = _index_outcomes(kiln, knp, idx)
    assert got == expected


def test_traced_entries_in_index_tuples():
    x = knp.asarray(_X)
    f = kiln.jit(lambda v, i: v[(i, 1), (2, 3)])
    np.testing.assert_array_equal(np.asarray(f(x, 2)), _X[(2, 1), (2, 3)])
    g = kiln.grad(lambda v, i: v.at[(i, 1), (2, 3)].multiply(3.0).sum())
    np.testing.assert_array_equal(np.asarray(g(x, 0)),
                                  np.asarray(jax.grad(lambda v, i: v.at[(i, 1), (2, 3)].multiply(
                                      3.0).sum())(jnp.asarray(_X), 0)))
