"""``jax_debug_nans`` / ``jax_debug_infs`` on the compiled path, eagerly and under
transformations, against JAX 0.10's messages."""
import sys
import traceback

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu, reference

config_context = sys.modules["kiln.config"].config_context
jax = pytest.importorskip("jax")
jjnp = jax.numpy


def _jax_message(fn, *args, flag="jax_debug_nans"):
    # JAX's message depends on what it compiled before (other tests in this process
    # jit the same jnp functions): start from empty caches.
    jax.clear_caches()
    jax.config.update(flag, True)
    try:
        fn(*args)
    except FloatingPointError as e:
        return str(e)
    finally:
        jax.config.update(flag, False)
    return None


def _kiln_error(fn, *args):
    with pytest.raises(FloatingPointError) as info:
        fn(*args)
    return info.value


def _f(x):
    return jnp.sum(jnp.log(x - 2.0))   # the line the errors must name


_F_LINE = _f.__code__.co_firstlineno + 1


def test_acceptance_jit_value_and_grad_names_log_and_line(capsys):
    with kiln.debug_nans(True):
        err = _kiln_error(kiln.jit(kiln.value_and_grad(_f)), 1.0)
    assert str(err) == "invalid value (nan) encountered in log"
    expected = _jax_message(jax.jit(jax.value_and_grad(lambda x: jjnp.sum(jjnp.log(x - 2.0)))),
                            1.0)
    assert str(err) == expected
    frames = traceback.extract_tb(err.__traceback__)
    assert any(f.filename == __file__ and f.lineno == _F_LINE for f in frames)
    notes = "".join(getattr(err, "__notes__", []))
    assert f"{__file__}:{_F_LINE}" in notes and "`log`" in notes
    assert ("Invalid nan value encountered in the output of a jax.jit function. Calling the "
            "de-optimized version.") in capsys.readouterr().out


def test_compiled_code_runs_and_outputs_are_checked(monkeypatch):
    """With the flags on, a clean call runs the compiled program (no op-by-op reference
    run); a NaN output then triggers the op-by-op re-run."""
    calls = []
    real = reference.run_jaxpr

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    f = kiln.jit(lambda x: jnp.log(x) * 2.0)
    x = jnp.ones(4)
    f(x)
    monkeypatch.setattr(reference, "run_jaxpr", counting)
    with kiln.debug_nans(True):
        np.testing.assert_allclose(f(x + 1.0), np.log(2.0) * 2.0 * np.ones(4), rtol=1e-6)
        assert not calls
        err = _kiln_error(f, jnp.array([1.0, -1.0, 2.0, 3.0]))
    assert calls and str(err) == "invalid value (nan) encountered in log"


def test_flags_off_gives_nan_silently():
    out = kiln.jit(jnp.log)(jnp.float32(-1.0))
    assert np.isnan(out)
    assert cpu.plain_mode()


@pytest.mark.parametrize("name,kfn,jfn,arg,flag", [
    ("eager log", jnp.log, jjnp.log, -1.0, "jax_debug_nans"),
    ("eager 0/0", lambda x: x / x, lambda x: x / x, 0.0, "jax_debug_nans"),
    ("eager 1/0 inf", lambda x: 1.0 / x, lambda x: 1.0 / x, 0.0, "jax_debug_infs"),
    ("jit log inf", kiln.jit(jnp.log), jax.jit(jjnp.log), 0.0, "jax_debug_infs"),
    ("jit div", kiln.jit(lambda x: (x * 0.0) / (x * 0.0) + 1.0),
     jax.jit(lambda x: (x * 0.0) / (x * 0.0) + 1.0), 1.0, "jax_debug_nans"),
    ("grad sqrt", kiln.grad(jnp.sqrt), jax.grad(jjnp.sqrt), -1.0, "jax_debug_nans"),
    ("grad jit sqrt inf", kiln.grad(kiln.jit(jnp.sqrt)), jax.grad(jax.jit(jjnp.sqrt)), 0.0,
     "jax_debug_infs"),
    ("jit grad sqrt inf", kiln.jit(kiln.grad(jnp.sqrt)), jax.jit(jax.grad(jjnp.sqrt)), 0.0,
     "jax_debug_infs"),
    ("vmap jit", kiln.vmap(kiln.jit(jnp.log)), jax.vmap(jax.jit(jjnp.log)), [1.0, -1.0],
     "jax_debug_nans"),
    ("static arg", kiln.jit(lambda x, n: jnp.log(x - n), static_argnums=1),
     jax.jit(lambda x, n: jjnp.log(x - n), static_argnums=1), (1.0, 2.0), "jax_debug_nans"),
])
def test_messages_match_jax(name, kfn, jfn, arg, flag):
    if isinstance(arg, tuple):
        kargs = jargs = arg
    else:
        kargs = (jnp.asarray(np.asarray(arg, np.float32)),)
        jargs = (jjnp.asarray(np.asarray(arg, np.float32)),)
    expected = _jax_message(jfn, *jargs, flag=flag)
    with config_context(**{flag: True}):
        err = _kiln_error(kfn, *kargs)
    assert str(err) == expected


def test_infs_flag_ignores_nans_and_nans_flag_ignores_infs():
    with kiln.debug_infs(True):
        assert np.isnan(kiln.jit(jnp.log)(jnp.float32(-1.0)))
        assert np.isnan(jnp.log(jnp.float32(-1.0)))
    with kiln.debug_nans(True):
        assert np.isinf(kiln.jit(jnp.log)(jnp.float32(0.0)))
        assert np.isinf(jnp.log(jnp.float32(0.0)))


def test_integer_results_are_not_checked():
    with kiln.debug_nans(True), kiln.debug_infs(True):
        assert int(kiln.jit(lambda x: x // 0)(jnp.int32(2))) == int(
            jax.jit(lambda x: x // 0)(np.int32(2)))


def test_nan_argument_returned_as_is_gives_jax_deoptimized_message():
    x = jnp.asarray(np.float32(np.nan))
    expected = _jax_message(jax.jit(lambda x: x), np.float32(np.nan))
    with kiln.debug_nans(True):
        err = _kiln_error(kiln.jit(lambda x: x), x)
    assert type(err) is FloatingPointError
    assert str(err) == expected
    assert str(err).startswith("('jit(<lambda>)', 'nan'). Because jax_config.debug_nans")


def test_inside_control_flow_names_the_inner_primitive_and_line():
    def body(c, x):
        return c + jnp.log(x), c   # the line

    line = body.__code__.co_firstlineno + 1
    f = kiln.jit(lambda xs: lax.scan(body, 0.0, xs))
    with kiln.debug_nans(True):
        err = _kiln_error(f, jnp.array([1.0, -1.0]))
        # JAX names the loop primitive ("scan"); kiln names the operation inside it.
        assert str(err) == "invalid value (nan) encountered in log"
        assert f"{__file__}:{line}" in "".join(err.__notes__)
        err = _kiln_error(lambda: lax.while_loop(lambda c: c < 10.0,
                                                 lambda c: jnp.sqrt(c - 3.0),
                                                 jnp.float32(1.0)))
        assert str(err) == "invalid value (nan) encountered in sqrt"


def test_backward_pass_error_names_primitive_and_line():
    def f(x):
        return jnp.sqrt(x)

    with kiln.debug_infs(True):
        err = _kiln_error(kiln.grad(kiln.jit(f)), jnp.float32(0.0))
    assert str(err) == "invalid value (inf) encountered in div"


def test_reference_backend_also_checks():
    with config_context(kiln_backend="reference", jax_debug_nans=True):
        err = _kiln_error(kiln.jit(lambda x: jnp.log(x) + 1.0), jnp.float32(-1.0))
    assert str(err) == "invalid value (nan) encountered in log"


def test_jit_caches_survive_the_flag():
    f = kiln.jit(lambda x: jnp.sin(x))
    x = jnp.arange(3.0)
    a = f(x)
    with kiln.debug_nans(True):
        b = f(x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(f(x), a)


def test_debug_infs_quiet_for_masked_float64_attention():
    # JAX's jnp reductions fold a constant `initial` (softmax's -inf): no eager
    # convert_element_type of -inf for jax_debug_infs to report (JAX's nn_test regression).
    import kiln
    import kiln.numpy as jnp
    from kiln import nn
    with kiln.enable_x64(), kiln.debug_infs(True):
        T, S, K, N, H = 5, 7, 3, 6, 11
        out = nn.dot_product_attention(jnp.zeros((T, N, H), jnp.float64),
                                       jnp.zeros((S, K, H), jnp.float64),
                                       jnp.zeros((S, K, H), jnp.float64),
                                       mask=jnp.arange(S) <= S // 2)
        assert out.dtype == jnp.float64 and out.shape == (T, N, H)
        assert float(jnp.max(jnp.array([1.0, 2.0]), initial=-float("inf"))) == 2.0
