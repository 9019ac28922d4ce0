"""``jax._src.error_check`` on kiln (``kiln/_error_check.py``): ``set_error_if`` records
an error at run time, ``raise_if_error`` raises the first one; eagerly, under ``jit``,
``vmap``, ``grad`` and control flow, with meshes, and through ``wrap_for_export`` /
``unwrap_from_import``."""
import traceback

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _error_check as error_check
from kiln.sharding import AxisType, NamedSharding
from kiln.sharding import PartitionSpec as P

JaxValueError = error_check.JaxValueError


@pytest.fixture(autouse=True)
def _clean_state():
    """Each test starts and ends with no error set."""
    try:
        error_check.raise_if_error()
    except JaxValueError:
        pass
    yield
    try:
        error_check.raise_if_error()
    except JaxValueError:
        pass


def _positive(x):
    error_check.set_error_if(x <= 0, "x must be greater than 0")
    return x + 1


def _raised() -> str | None:
    """The message ``raise_if_error`` raises, or None."""
    try:
        error_check.raise_if_error()
    except JaxValueError as e:
        return str(e)
    return None


TRANSFORMS = {
    "eager": lambda f: f,
    "jit": kiln.jit,
    "vmap": kiln.vmap,
    "jit_vmap": lambda f: kiln.jit(kiln.vmap(f)),
    "vmap_jit": lambda f: kiln.vmap(kiln.jit(f)),
    "vmap_vmap": lambda f: kiln.vmap(kiln.vmap(f)),
}


@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("values,expected", [
    ([[1, 2], [3, 4]], None),
    ([[1, 2], [3, -4]], "x must be greater than 0"),      # one element of one member
    ([[0, 0], [0, 0]], "x must be greater than 0"),
])
def test_set_error_if_then_raise(name, values, expected):
    f = TRANSFORMS[name](_positive)
    out = f(jnp.array(values, dtype=jnp.int32))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(values) + 1)
    assert _raised() == expected
    assert _raised() is None          # raising clears the error


@pytest.mark.parametrize("jit", [False, True])
def test_first_error_is_kept(jit):
    def f(x):
        error_check.set_error_if(x >= 1, "in f")
        return x + 1

    def g(x):
        error_check.set_error_if(x >= 1, "in g")
        return x + 1

    if jit:
        f, g = kiln.jit(f), kiln.jit(g)
    x = f(jnp.zeros(3, jnp.int32))       # passes
    x = g(x)                             # fails: sets the error
    f(x)                                 # fails too, but the first error stays
    assert _raised() == "in g"


@pytest.mark.parametrize("jit", [False, True])
def test_traceback_points_at_the_check(jit):
    def function_with_a_check(x):
        error_check.set_error_if(  # the check's own line
            x <= 0, "x must be greater than 0")
        return x

    f = kiln.jit(function_with_a_check) if jit else function_with_a_check
    f(jnp.zeros(2, jnp.int32))
    with pytest.raises(JaxValueError) as info:
        error_check.raise_if_error()
    text = "".join(traceback.format_tb(info.value.__traceback__))
    assert "function_with_a_check" in text
    assert "# the check's own line" in text
    assert "kiln/_error_check.py\", line" not in text.split("raise_if_error")[-1]


def test_predicate_may_be_numeric_or_python():
    error_check.set_error_if(jnp.array([0, 2]), "nonzero number")
    assert _raised() == "nonzero number"
    error_check.set_error_if(False, "never")
    assert _raised() is None


def test_grad():
    def loss(x):
        return _positive(x) ** 2

    assert float(kiln.grad(loss)(2.0)) == 6.0
    assert _raised() is None
    kiln.jit(kiln.grad(loss))(-1.0)
    assert _raised() == "x must be greater than 0"


@pytest.mark.parametrize("jit", [False, True])
def test_cond_reports_the_branch_taken(jit):
    def f(x):
        error_check.set_error_if(x == 0, "in f")
        return x + 1

    def g(x):
        error_check.set_error_if(x == 0, "in g")
        return x + 1

    def body(pred, x):
        return kiln.lax.cond(pred, f, g, x)

    if jit:
        body = kiln.jit(body)
    x = jnp.zeros(3, jnp.int32)
    body(True, x)
    assert _raised() == "in f"
    body(False, x)
    assert _raised() == "in g"


@pytest.mark.parametrize("jit", [False, True])
def test_while_loop_and_scan(jit):
    def step(x):
        error_check.set_error_if(x >= 10, "x must be less than 10")
        return x + 1

    def loop(x):
        return kiln.lax.while_loop(lambda v: (v < 10).any(), step, x)

    def scan(xs):
        return kiln.lax.scan(lambda c, x: (c + step(x), None), 0, xs)[0]

    if jit:
        loop, scan = kiln.jit(loop), kiln.jit(scan)
    loop(jnp.arange(4))                  # the last step sees 10 in one element
    assert _raised() == "x must be less than 10"
    scan(jnp.arange(10))
    assert _raised() is None
    scan(jnp.arange(11))
    assert _raised() == "x must be less than 10"


def test_raise_if_error_inside_jit_is_an_error():
    _positive(jnp.int32(1))
    with pytest.raises(ValueError, match="should not be called within a traced context"):
        kiln.jit(error_check.raise_if_error)()


def test_staged_program_reads_and_writes_the_error_ref():
    text = str(kiln.make_jaxpr(_positive)(jnp.int32(1)))
    assert "Ref{u32[]}" in text.splitlines()[0]       # the error state is an operand
    assert "4294967295:u32[]" in text                 # compared with "no error"
    assert "a[...] <-" in text


def test_error_checking_context_restores_and_retraces():
    f = kiln.jit(_positive)
    with error_check.error_checking_context():
        f(jnp.int32(-1))
        inner = error_check._error_storage.ref
    assert error_check._error_storage.ref is not inner     # the previous state is back
    assert _raised() is None                                # the error stayed inside
    f(jnp.int32(-1))        # the trace made inside is not reused: writes this state
    assert _raised() == "x must be greater than 0"


def test_error_checking_context_on_a_mesh():
    mesh = kiln.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    f = kiln.jit(_positive)
    with kiln.set_mesh(mesh), error_check.error_checking_context():
        assert error_check._error_storage.ref.shape == (2, 2)   # one code per device
        y = jnp.full((4, 4), -1, dtype=jnp.int32, device=NamedSharding(mesh, P("x", "y")))
        f(y)
        assert _raised() == "x must be greater than 0"
        f(jnp.full((4, 4), 1, dtype=jnp.int32))
        assert _raised() is None


def test_predicate_on_another_mesh():
    mesh = kiln.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    other = kiln.make_mesh((4,), ("z",), axis_types=(AxisType.Explicit,))
    y = kiln.device_put(jnp.ones(4, jnp.int32), NamedSharding(other, P("z")))
    with kiln.set_mesh(mesh), error_check.error_checking_context():
        with pytest.raises(ValueError, match="must be on the same mesh"):
            error_check.set_error_if(y <= 0, "x")


def test_auto_axes_warn():
    mesh = kiln.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    with kiln.set_mesh(mesh), error_check.error_checking_context():
        y = kiln.device_put(jnp.full((4, 4), -1, jnp.int32), NamedSharding(mesh, P("x", "y")))
        with pytest.warns(RuntimeWarning, match="implicit communication"):
            error_check.set_error_if(y <= 0, "x must be greater than 0")
        assert _raised() == "x must be greater than 0"


# ----------------------------------------------------------------------------------------------
# wrap_for_export / unwrap_from_import (without serialization: kiln has no jax.export)


def test_wrapped_function_returns_its_error_state():
    wrapped = kiln.jit(error_check.wrap_for_export(kiln.jit(_positive)))
    out, err = wrapped(jnp.float32(-3.0))
    assert float(out) == -2.0
    assert int(err.error_code) == 0
    assert [m for m, _ in err.error_list] == ["x must be greater than 0"]
    assert "_positive" in err.error_list[0][1]        # the traceback, as text
    assert _raised() is None                          # the global state is untouched
    _, err = wrapped(jnp.float32(3.0))
    assert int(err.error_code) == 0xFFFFFFFF


def test_unwrapped_function_merges_its_errors():
    def first(x):
        error_check.set_error_if(x <= 0, "in first")
        return x

    imported = kiln.jit(error_check.unwrap_from_import(
        kiln.jit(error_check.wrap_for_export(kiln.jit(_positive)))))
    assert float(imported(jnp.float32(2.0))) == 3.0
    assert _raised() is None
    imported(jnp.float32(-1.0))
    msg = _raised()
    assert msg.startswith("x must be greater than 0\nThe original traceback is shown below:")
    assert "_positive" in msg
    first(jnp.float32(-1.0))
    imported(jnp.float32(-1.0))                       # does not override the first error
    assert _raised() == "in first"


def test_corrupted_error_code():
    def corrupted(x):
        return x + 1, error_check._ErrorClass(jnp.uint32(999), [])

    error_check.unwrap_from_import(corrupted)(jnp.float32(1.0))
    assert "unknown error occurred" in _raised()
