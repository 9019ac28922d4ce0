"""Each staged equation carries the user's source line (issue 13, source locations)."""
import kiln
import kiln.numpy as jnp


def f(x):
    y = jnp.sin(x)
    return y * 2


def test_equations_know_the_users_line():
    closed = kiln.make_jaxpr(f)(1.)
    sis = [e.source_info for e in closed.jaxpr.eqns]
    assert all(si is not None for si in sis)
    assert [si.lineno for si in sis] == [7, 8]
    assert sis[0].file == __file__ and sis[0].function == "f"
    assert sis[0].column == 8          # where `jnp.sin(x)` starts (Python >= 3.11)


def test_pretty_print_with_source_info():
    text = kiln.make_jaxpr(f)(1.).pretty_print(source_info=True)
    lines = text.splitlines()
    assert lines[1].strip().startswith("b:f32[] = sin a  # ")
    assert lines[1].endswith(f"{__file__}:7:8 (f)")
    assert lines[2].endswith(f"{__file__}:8:11 (f)")
    # plain printing is unchanged
    assert str(kiln.make_jaxpr(f)(1.)) == (
        "{ lambda ; a:f32[]. let b:f32[] = sin a; c:f32[] = mul b 2.0:f32[] in (c,) }")


def test_nested_jit_body_lines():
    g = kiln.jit(f)
    text = kiln.make_jaxpr(lambda x: g(x) + 1)(1.).pretty_print(source_info=True)
    assert f"{__file__}:7:8 (f)" in text and "(<lambda>)" in text


def test_backward_pass_equations_carry_the_forward_lines():
    # As JAX: the transpose of each equation is staged at that equation's line.
    closed = kiln.make_jaxpr(kiln.grad(lambda x: f(x) * 3.0))(1.)
    lines = {(e.primitive.name, e.source_info.lineno) for e in closed.jaxpr.eqns}
    assert ("cos", 7) in lines                    # sin's derivative, at `jnp.sin(x)`
    assert all(si.file == __file__ for si in (e.source_info for e in closed.jaxpr.eqns))
    jax = __import__("pytest").importorskip("jax")
    import jax.numpy as jjnp

    def jf(x):
        y = jjnp.sin(x)
        return y * 2
    from jax._src import source_info_util as siu
    jlines = [(e.primitive.name, int(siu.summarize(e.source_info).split(":")[1]))
              for e in jax.make_jaxpr(jax.grad(lambda x: jf(x) * 3.0))(1.).jaxpr.eqns]
    first = jf.__code__.co_firstlineno
    assert ("cos", first + 1) in jlines
