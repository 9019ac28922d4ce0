"""``kiln.debug.breakpoint``: the ``jdb`` prompt with concrete traced values, eagerly and
under jit/vmap/grad, driven through a non-interactive stdin and compared with JAX."""
import os
import subprocess
import sys
import textwrap

import pytest

import kiln
import kiln.numpy as jnp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent('''
    import sys
    if sys.argv[1] == "jax":
        import jax, jax.numpy as jnp
    else:
        import kiln as jax, kiln.numpy as jnp

    def f(x):
        y = x * 2.0
        jax.debug.breakpoint()
        return y + 1.0

    def g(x):
        z = x + 1.0
        jax.debug.breakpoint(num_frames=1)
        return z

    case = sys.argv[2]
    if case == "jit":
        print(jax.jit(f)(jnp.arange(3.0)))
    elif case == "vmap":
        print(jax.vmap(g)(jnp.arange(2.0)))
    elif case == "eager":
        print(f(jnp.float32(4.0)))
    elif case == "grad":
        print(jax.grad(lambda x: f(x).sum())(jnp.arange(2.0)))
    elif case == "token":
        def h(x):
            y = x - 1.0
            x = jax.debug.breakpoint(token=x)
            return x * y
        print(jax.jit(h)(jnp.float32(3.0)))
    elif case == "jit_vmap":
        print(jax.jit(jax.vmap(g))(jnp.arange(2.0)))
    print("done")
''')


def _run(tmp_path, lib, case, commands):
    path = tmp_path / "bp_script.py"
    path.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(path), lib, case], input=commands,
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    return proc.returncode, proc.stdout.replace(str(path), "SCRIPT"), proc.stderr


CASES = [
    ("jit", "p x\np y\nl\nw\nu\nd\np foo\nc\n"),
    ("vmap", "p z\nc\np z\npp {'z': z}\nc\n"),
    ("eager", "p x\ny\nc\n"),
    ("grad", "p y\nc\n"),
    ("token", "p y\nc\n"),
    ("jit_vmap", "p x\nc\np x\nc\n"),
]


@pytest.mark.parametrize("case,commands", CASES)
def test_breakpoint_matches_jax(tmp_path, case, commands):
    pytest.importorskip("jax")
    k_rc, k_out, k_err = _run(tmp_path, "kiln", case, commands)
    j_rc, j_out, _ = _run(tmp_path, "jax", case, commands)
    assert k_rc == 0, k_err
    assert (k_rc, k_out) == (j_rc, j_out)


def test_breakpoint_shows_concrete_values_under_jit(tmp_path):
    rc, out, err = _run(tmp_path, "kiln", "jit", "p x\np y\nc\n")
    assert rc == 0, err
    assert out.splitlines()[:3] == [
        "Entering jdb:",
        "(jdb) Array([0., 1., 2.], dtype=float32)",
        "(jdb) Array([0., 2., 4.], dtype=float32)"]
    assert out.splitlines()[-2:] == ["(jdb) [1. 3. 5.]", "done"]


def test_quit_and_end_of_input_exit(tmp_path):
    rc, out, _ = _run(tmp_path, "kiln", "jit", "q\n")
    assert rc == 0 and "done" not in out
    rc, out, _ = _run(tmp_path, "kiln", "eager", "")
    assert rc == 0 and "done" not in out


def test_breakpoint_in_process_with_custom_stdin(monkeypatch, capsys):
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO("p a + 1\nc\n"))

    @kiln.jit
    def f(a):
        kiln.debug.breakpoint()
        return a * 3

    assert float(f(jnp.float32(2.0))) == 6.0
    out = capsys.readouterr().out
    assert "Array(3., dtype=float32)" in out


def test_ordered_and_token_are_exclusive():
    with pytest.raises(ValueError, match="mutually exclusive"):
        kiln.debug.breakpoint(ordered=True, token=jnp.ones(1))
