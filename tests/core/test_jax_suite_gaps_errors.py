"""Exceptions that JAX's own test suite checks (issue 26): the class and message JAX
0.10.2 gives, on kiln, compared with JAX where it is installed."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


@pytest.mark.parametrize("op", [lax.ge, lax.gt, lax.le, lax.lt])
def test_ordered_comparisons_reject_complex(op):
    z = jnp.ones(2, jnp.complex64)
    with pytest.raises(TypeError, match="does not accept dtype complex64 at position 0"):
        op(z, z)
    with pytest.raises(TypeError, match="at position 1"):
        op(jnp.ones(2), z)
    with pytest.raises(TypeError, match="complex64"):
        kiln.jit(op)(z, z)


def test_max_min_eq_accept_complex():
    z = jnp.array([1 + 2j, 3 - 1j], jnp.complex64)
    w = jnp.array([1 + 1j, 3 + 0j], jnp.complex64)
    np.testing.assert_array_equal(lax.max(z, w), np.maximum(np.asarray(z), np.asarray(w)))
    np.testing.assert_array_equal(lax.eq(z, z), [True, True])


def test_jnp_complex_comparisons_are_lexicographic():
    a = np.array([1 + 2j, 1 + 0j, 3 + 0j, 2 + 1j])
    b = np.array([1 + 1j, 2 + 0j, 1 + 5j, 2 + 1j])
    for name in ["less", "less_equal", "greater", "greater_equal", "fmax", "fmin"]:
        np.testing.assert_array_equal(getattr(jnp, name)(a, b), getattr(np, name)(a, b))
    np.testing.assert_array_equal(kiln.jit(jnp.less)(a, b), np.less(a, b))
    np.testing.assert_array_equal(jnp.asarray(a) < b, a < b)


def test_squeeze_axis_out_of_bounds():
    x = jnp.ones((1, 2, 3))
    with pytest.raises(ValueError, match="axis -4 is out of bounds for array of dimension 3"):
        lax.squeeze(x, (-4,))
    with pytest.raises(ValueError, match="axis 3 is out of bounds"):
        lax.squeeze(x, (3,))
    with pytest.raises(ValueError, match="not unique"):
        lax.squeeze(jnp.ones((1, 2)), (0, -2))
    assert lax.squeeze(x, (-3,)).shape == (2, 3)
    assert kiln.vmap(lambda v: lax.squeeze(v, (-3,)))(jnp.ones((4, 1, 2, 3))).shape == (4, 2, 3)


def test_vmap_output_not_a_jax_type():
    with pytest.raises(TypeError, match="Output from batched function 'hello' with type "
                                        "<class 'str'> is not a valid JAX type"):
        kiln.vmap(lambda x: "hello")(jnp.ones(3))
    out = kiln.vmap(lambda x: (x, 1.0, np.float32(2)), out_axes=(0, None, None))(jnp.ones(3))
    assert out[0].shape == (3,)


def test_grad_has_aux_wrong_tuple_size():
    with pytest.raises(TypeError, match="expected function with aux output to return a "
                                        "two-element tuple, but got type <class 'tuple'>"):
        kiln.grad(lambda x: (x, 1, 2), has_aux=True)(1.0)


def test_arange_traced_single_argument_names_stop():
    with pytest.raises(kiln.errors.ConcretizationTypeError, match="argument 'stop'"):
        kiln.jit(lambda n: jnp.arange(n))(3)
    with pytest.raises(kiln.errors.ConcretizationTypeError, match="argument 'start'"):
        kiln.jit(lambda n: jnp.arange(n, 5))(3)


def _gen(x):
    yield x


@pytest.mark.parametrize("transform", ["jit", "grad", "vmap", "value_and_grad", "jacfwd",
                                       "jacrev"])
def test_transform_of_generator_function(transform):
    with pytest.raises(TypeError, match="Expected a function, got a generator function"):
        getattr(kiln, transform)(_gen)


def test_transform_of_non_callable():
    with pytest.raises(TypeError, match="Expected a callable value, got 1"):
        kiln.jit(1)
    with pytest.raises(TypeError, match="Expected a callable value"):
        kiln.grad(1)


def test_messages_match_jax():
    jax = pytest.importorskip("jax")
    jjnp = jax.numpy

    def msg(f):
        try:
            f()
        except Exception as e:   # noqa: BLE001
            return type(e).__name__, str(e).split("\n")[0]
        return None

    z, jz = jnp.ones(2, jnp.complex64), jjnp.ones(2, jjnp.complex64)
    assert msg(lambda: lax.ge(z, z)) == msg(lambda: jax.lax.ge(jz, jz))
    f = np.ones(2, np.float32)
    assert msg(lambda: lax.shift_left(f, f)) == msg(lambda: jax.lax.shift_left(f, f))
    assert (msg(lambda: lax.squeeze(jnp.ones((1, 2, 3)), (-4,)))
            == msg(lambda: jax.lax.squeeze(jjnp.ones((1, 2, 3)), (-4,))))
    assert (msg(lambda: kiln.vmap(lambda x: "hello")(jnp.ones(3)))
            == msg(lambda: jax.vmap(lambda x: "hello")(jjnp.ones(3))))
    assert (msg(lambda: kiln.jit(_gen))[1].split(":")[0]
            == msg(lambda: jax.jit(_gen))[1].split(":")[0])


def test_scatter_apply_has_no_derivative():
    f = lambda x: x.at[1].apply(jnp.sin)   # noqa: E731
    g = lambda x: x.at[jnp.array([1, 1])].apply(jnp.sin).sum()   # noqa: E731
    for t in (kiln.jacfwd(f), kiln.jacrev(f), kiln.grad(g), kiln.grad(kiln.jit(g))):
        with pytest.raises(NotImplementedError, match="scatter_apply JVP not implemented"):
            t(jnp.ones(3))
    # evaluation, jit and vmap are unaffected
    np.testing.assert_allclose(kiln.jit(f)(jnp.ones(3)), [1, np.sin(1), 1], rtol=1e-6)
    out = kiln.vmap(lambda x, i: x.at[i].apply(jnp.sin))(jnp.ones((2, 3)), jnp.array([0, 2]))
    np.testing.assert_allclose(out, [[np.sin(1), 1, 1], [1, 1, np.sin(1)]], rtol=1e-6)
    # a constant operand is not differentiated: grad with respect to something else works
    assert kiln.grad(lambda y: jnp.ones(3).at[1].apply(jnp.sin).sum() * y)(1.0) == \
        pytest.approx(2 + np.sin(1))


_MASKED = np.ma.array([1.0, 2.0], mask=[0, 1])


@pytest.mark.parametrize("convert", [
    lambda m: kiln.jit(jnp.asarray)(m), jnp.asarray, lambda m: jnp.add(m, 1), jnp.sin,
    lax.sin, kiln.device_put, kiln.grad(jnp.sum), kiln.vmap(jnp.sin)])
def test_masked_arrays_rejected(convert):
    with pytest.raises(ValueError, match="numpy masked arrays are not supported"):
        convert(_MASKED)


def test_jnp_array_of_masked_array_takes_data():
    out = jnp.array(_MASKED)     # as JAX: jnp.array reads the data, the mask is dropped
    np.testing.assert_array_equal(out, [1.0, 2.0])
    assert type(out._value) is np.ndarray


def test_array_from_bytearray():
    for conv in (jnp.array, jnp.asarray):
        out = conv(bytearray(b"\x01\x02"))
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(out, [1, 2])
    np.testing.assert_array_equal(jnp.array(memoryview(b"\x01\x02")), [1, 2])
    with pytest.raises(TypeError):
        jnp.array(b"\x01\x02")


# -- custom_jvp / custom_vjp rule-output errors: JAX's texts, naming the rule and function --

def test_custom_jvp_rule_structure_error_names_rule_and_function():
    import re

    @kiln.custom_jvp
    def f(x):
        return (x ** 2,)

    @f.defjvp
    def foo_jvp(primals, tangents):
        return f(primals[0]), [2 * primals[0] * tangents[0], primals[0]]

    want = ("Custom JVP rule foo_jvp for function f must produce primal and tangent outputs "
            "with equal container (pytree) structures, but got "
            f"{kiln.tree.structure((1,))} and {kiln.tree.structure([1, 2])} respectively.")
    with pytest.raises(TypeError, match=re.escape(want)):
        kiln.jvp(f, (2.,), (1.,))


def test_custom_vjp_bwd_errors_name_the_output_path_and_types():
    @kiln.custom_vjp
    def foo(x, y):
        return x

    foo.defvjp(lambda x, y: (x, None), lambda _, g: (jnp.zeros(3), jnp.zeros(3)))
    with pytest.raises(ValueError, match=r"at output\[1\] the bwd rule produced an output of "
                                         r"type float32\[3\] corresponding to an input of "
                                         r"type float32\[4\]"):
        kiln.grad(lambda x, y: foo(x, y * y).sum(), 1)(jnp.ones(3), jnp.ones(4))

    @kiln.custom_vjp
    def g(x):
        return x

    g.defvjp(lambda x: (x, None), lambda _, ct: 2. * ct)   # not a tuple
    with pytest.raises(TypeError, match=r"Custom VJP bwd rule .* must produce a tuple of "
                                        "length equal to the number of arguments"):
        kiln.grad(g)(3.)
    g.defvjp(lambda x: (x, None), lambda _, ct: [2. * ct])  # a list of the right length
    assert float(kiln.grad(g)(3.)) == 2.


def test_custom_vjp_fwd_output_must_match_the_staged_function():
    import re

    def scan_apply(f, x):
        return lax.scan(lambda c, _: (f(c), None), x, None, length=1)[0]

    @kiln.custom_vjp
    def f(x):
        return x

    def f_fwd(x):
        return (x, x), None

    f.defvjp(f_fwd, lambda _, ct: (ct,))
    with pytest.raises(TypeError, match="Custom VJP fwd rule f_fwd for function f must "
                                        "produce a pair "):
        kiln.grad(lambda x: scan_apply(f, x))(jnp.float32(1.))

    def f_fwd2(x):
        return jnp.zeros((3, *x.shape), x.dtype), None

    f.defvjp(f_fwd2, lambda _, ct: (ct,))
    with pytest.raises(TypeError, match=re.escape(
            "instead the fwd rule output's first element had shapes/dtypes of:\n"
            "    float32[3]\nwhile the custom_vjp-decorated function f had output "
            "shapes/dtypes of:\n    float32[]")):
        kiln.grad(lambda x: scan_apply(f, x))(jnp.float32(1.))


def test_vmap_out_axes_out_of_bounds_says_so_as_jax():
    x = jnp.ones((3, 4, 5))
    assert kiln.vmap(lambda y: y, in_axes=0, out_axes=-3)(x).shape == (3, 4, 5)
    with pytest.raises(ValueError, match=r"axis -4 is out of bounds for array of dimension 3"):
        kiln.vmap(lambda y: y, in_axes=0, out_axes=-4)(x)
    with pytest.raises(ValueError, match=r"axis 3 is out of bounds .*out_axes\[1\]"):
        kiln.vmap(lambda y: (y, y), in_axes=0, out_axes=(0, 3))(x)
