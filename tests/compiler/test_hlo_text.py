"""``Lowered.compiler_ir("hlo"|"stablehlo")``: kiln's optimised program in XLA's syntaxes,
compared with JAX's HLO text after normalising instruction names."""
import re

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.jaxpr import ClosedJaxpr

X23 = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
Y34 = np.linspace(0, 2, 12, dtype=np.float32).reshape(3, 4)
C2 = np.array([4 + 1j, 5.2 + 1j], np.complex64)


def hlo(f, *args):
    return kiln.jit(f).lower(*args).compiler_ir(dialect="hlo").as_hlo_text()


def entry_ops(text, layouts=True):
    """(type, opcode) of each instruction of the ENTRY computation, names dropped (and
    layouts, unless ``layouts``: XLA's layout assignment gives a transpose the layout
    ``{0,1}``; kiln prints default layouts)."""
    body = re.search(r"ENTRY [^{]*\{\n(.*?)\n\}", text, re.DOTALL).group(1)
    out = []
    for line in body.splitlines():
        m = re.match(r"\s*(?:ROOT )?\S+ = (.*?) ([a-z][a-z0-9-]*)\(", line)
        t = m.group(1) if layouts else re.sub(r"\{[0-9,]*\}", "", m.group(1))
        out.append((t, m.group(2)))
    return out


# (name, function of (numpy-like module, lax module), arguments)
CASES = [
    ("square", lambda np_, lax_: lambda x: x * x, (X23,)),
    ("pow2", lambda np_, lax_: lambda x: x ** 2, (X23,)),
    ("pow3", lambda np_, lax_: lambda x: lax_.integer_pow(x, 3), (X23,)),
    ("elementwise", lambda np_, lax_: lambda a, b: np_.sin(a) + 2.0 * a - np_.exp(b),
     (X23, X23)),
    ("sum_axis", lambda np_, lax_: lambda a: np_.sum(a, axis=1), (X23,)),
    ("max_all", lambda np_, lax_: lambda a: np_.max(a), (X23,)),
    ("matmul", lambda np_, lax_: lambda a, b: a @ b, (X23, Y34)),
    ("movement", lambda np_, lax_: lambda a: a.T.reshape(6)[1:4], (X23,)),
    ("compare", lambda np_, lax_: lambda a: a > 0.5, (X23,)),
    ("convert", lambda np_, lax_: lambda a: a.astype(np.int32), (X23,)),
    ("abs_sq_complex", lambda np_, lax_: lambda x: (x.conj() * x).real, (C2,)),
    ("tanh_tuple", lambda np_, lax_: lambda a: (np_.tanh(a), np_.abs(a), np_.floor(a)),
     (X23,)),
]


@pytest.mark.parametrize("name,make,args", CASES, ids=[c[0] for c in CASES])
def test_entry_matches_jax(name, make, args):
    jax = pytest.importorskip("jax")
    layouts = name != "movement"
    ours = entry_ops(hlo(make(jnp, lax), *args), layouts)
    theirs = entry_ops(jax.jit(make(jax.numpy, jax.lax)).lower(*args)
                       .compiler_ir(dialect="hlo").as_hlo_text(), layouts)
    assert ours == theirs


def test_module_text_exact():
    text = hlo(lambda x: x * x, np.array([1.0, 2.0], np.float32))
    assert text == (
        "HloModule jit__lambda, entry_computation_layout={(f32[2]{0})->f32[2]{0}}\n\n"
        "ENTRY main.1 {\n"
        "  Arg_0.1 = f32[2]{0} parameter(0)\n"
        "  ROOT mul.1 = f32[2]{0} multiply(Arg_0.1, Arg_0.1)\n"
        "}\n\n")


def test_reduce_region_and_layout():
    text = hlo(lambda a: jnp.sum(a, axis=1), X23)
    assert "entry_computation_layout={(f32[2,3]{1,0})->f32[2]{0}}" in text
    assert re.search(r"region_0\.1 \{\n.*ROOT reduce_sum\.\d+ = f32\[\] add\(", text,
                     re.DOTALL)
    assert "reduce(Arg_0.1, constant.1), dimensions={1}, to_apply=region_0.1" in text


def test_tuple_root_index_markers():
    text = hlo(lambda a: tuple(a + i for i in range(6)), X23)
    assert "/*index=5*/" in text
    assert re.search(r"ROOT tuple\.1 = \(f32\[2,3\]\{1,0\}, .*\) tuple\(", text)


def _optax_normalise(text):
    # The substitutions of Optax's numerics_test.test_abs_sqr_hlo_equivalence.
    text = re.search(r"ENTRY.*", text, re.DOTALL).group()
    text = re.sub("ENTRY.*?{", "ENTRY XXXX", text)
    text = re.sub("HloModule.*?\n", "", text)
    return re.sub("ROOT.*?=", "ROOT result.2 =", text)


def _abs_sq(x):
    return (x.conj() * x).real


@pytest.mark.parametrize("x", [3.0, np.array([4, 5.2], np.float32), 1j, 3.0 + 1j, C2])
@pytest.mark.parametrize("sq", [lambda x: x ** 2, lambda x: x * x, jnp.square])
def test_abs_sq_equivalence(sq, x):
    a = _optax_normalise(hlo(sq, x))
    b = _optax_normalise(hlo(_abs_sq, x))
    if np.iscomplexobj(x):
        assert a != b
        assert "complex(" in b and "real(" in b
    else:
        assert a == b


def test_stablehlo_text():
    ir = kiln.jit(lambda x: x * x).lower(np.array([1.0, 2.0], np.float32)) \
        .compiler_ir(dialect="stablehlo")
    expected = (
        "module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, "
        "mhlo.num_replicas = 1 : i32} {\n"
        "  func.func public @main(%arg0: tensor<2xf32>) -> (tensor<2xf32> "
        '{jax.result_info = "result"}) {\n'
        "    %0 = stablehlo.multiply %arg0, %arg0 : tensor<2xf32>\n"
        "    return %0 : tensor<2xf32>\n"
        "  }\n"
        "}\n")
    assert str(ir) == expected
    assert ir.operation.get_asm() == expected
    assert ir.operation.get_asm(binary=True) == expected.encode()


def test_stablehlo_regions_and_results():
    def f(a):
        s = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0), (0, a))
        return {"r": jnp.sum(a, axis=1), "w": s}
    text = str(kiln.jit(f).lower(X23).compiler_ir("stablehlo"))
    assert 'jax.result_info = "result[\'r\']"' in text
    assert 'jax.result_info = "result[\'w\'][1]"' in text
    assert ("stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = "
            "[1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>") in text
    assert re.search(r"%\d+:2 = stablehlo\.while\(%iterArg = %c, %iterArg_0 = %arg0\)", text)
    assert "} do {" in text and "stablehlo.return" in text


def test_control_flow_hlo():
    text = hlo(lambda a: lax.cond(a[0, 0] > 0, lambda v: v + 1.0, lambda v: v - 1.0, a), X23)
    assert re.search(r"ROOT cond\.1 = f32\[2,3\]\{1,0\} conditional\(convert_element_type\.1, "
                     r"Arg_0\.\d+, Arg_0\.\d+\), branch_computations=\{region_0\.1, "
                     r"region_1\.2\}", text)
    text = hlo(lambda a: lax.while_loop(lambda c: c[0] < 3,
                                        lambda c: (c[0] + 1, c[1] * 2.0), (0, a)), X23)
    assert re.search(r"while\.\d+ = \(s32\[\], f32\[2,3\]\{1,0\}\) while\(while\.\d+\), "
                     r"condition=region_1\.2, body=region_0\.1", text)


def test_custom_call_fallback():
    text = hlo(lambda a: lax.lgamma(a), X23)
    assert re.search(r'ROOT lgamma\.1 = f32\[2,3\]\{1,0\} custom-call\(Arg_0\.1\), '
                     r'custom_call_target="kiln\.lgamma"', text)
    text = hlo(lambda a: lax.scan(lambda c, x: (c + x, c * x), 0.0, a), X23[0])
    assert 'custom_call_target="kiln.scan", called_computations={scan_jaxpr.1}' in text
    st = str(kiln.jit(lambda a: lax.lgamma(a)).lower(X23).compiler_ir("stablehlo"))
    assert "stablehlo.custom_call @kiln.lgamma(%arg0) : (tensor<2x3xf32>) -> " \
           "tensor<2x3xf32>" in st


def test_constants():
    text = hlo(lambda a: (a + jnp.array([[1, 2, 3], [4, 5, 6.5]], np.float32),
                          a + np.arange(30, dtype=np.float32).reshape(2, 15)[:, :3] ** 2,
                          a > -np.inf), X23)
    assert "f32[2,3]{1,0} constant({ { 1, 2, 3 }, { 4, 5, 6.5 } })" in text
    assert "constant(-inf)" in text


def test_dialects():
    lowered = kiln.jit(lambda x: x + 1).lower(1.0)
    assert isinstance(lowered.compiler_ir(), ClosedJaxpr)
    h = lowered.compiler_ir("hlo")
    assert h.as_hlo_module() is h and h.as_hlo_module().to_string() == h.as_hlo_text()
    with pytest.raises(ValueError, match="unknown dialect 'mhlo'"):
        lowered.compiler_ir("mhlo")


def _op_line(text, marker):
    """The right-hand side of the first line of ``text`` containing ``marker``."""
    return next(ln for ln in text.splitlines() if marker in ln).split(" = ", 1)[1]


def _texts(lowered):
    return {"hlo": lowered.compiler_ir(dialect="hlo").as_hlo_text(),
            "stablehlo": str(lowered.compiler_ir(dialect="stablehlo"))}


_PRECISIONS = [None, "DEFAULT", "HIGH", "HIGHEST", ("DEFAULT", "HIGHEST"), "bfloat16",
               "F32_F32_F32", "BF16_BF16_F32", "BF16_BF16_F32_X3"]


def _precision(lax_, p):
    if isinstance(p, tuple):
        return tuple(lax_.Precision[q] for q in p)
    if p in ("DEFAULT", "HIGH", "HIGHEST"):
        return lax_.Precision[p]
    if p is not None and p.isupper():
        return lax_.DotAlgorithmPreset[p]
    return p


def _strip_names(line):
    return re.sub(r"\((?:Arg_0|a)\.1, (?:Arg_1|b)\.1\)", "(x, y)", line)


@pytest.mark.parametrize("p", _PRECISIONS, ids=str)
def test_dot_precision_text_matches_jax(p):
    """XLA prints ``operand_precision={high,high}`` (Haiku's tests look for it) or
    ``algorithm=dot_...``; StableHLO always prints the pair of precisions."""
    jax = pytest.importorskip("jax")

    def make(lax_):
        return lambda a, b: lax_.dot(a, b, precision=_precision(lax_, p))
    ours = _texts(kiln.jit(make(lax)).lower(X23, Y34))
    theirs = _texts(jax.jit(make(jax.lax)).lower(X23, Y34))
    for dialect, marker in (("hlo", " dot("), ("stablehlo", "stablehlo.dot_general")):
        assert (_strip_names(_op_line(ours[dialect], marker))
                == _strip_names(_op_line(theirs[dialect], marker)))


@pytest.mark.parametrize("p", [None, "HIGHEST", ("HIGH", "DEFAULT"), "F32_F32_F32"], ids=str)
def test_conv_precision_text_matches_jax(p):
    jax = pytest.importorskip("jax")
    im, k = np.ones((1, 5, 5, 1), np.float32), np.ones((3, 3, 1, 1), np.float32)

    def make(lax_):
        return lambda a, b: lax_.conv_general_dilated(
            a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
            precision=_precision(lax_, p))
    ours = _texts(kiln.jit(make(lax)).lower(im, k))
    theirs = _texts(jax.jit(make(jax.lax)).lower(im, k))
    for dialect, marker in (("hlo", " convolution("), ("stablehlo", "stablehlo.convolution")):
        assert (_strip_names(_op_line(ours[dialect], marker))
                == _strip_names(_op_line(theirs[dialect], marker)))
