"""Traceback filtering at kiln's API boundaries (``jax_traceback_filtering``), against
JAX's behaviour in the same situations."""
import os
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _traceback_util as tbu
from kiln.config import config_context

KILN_DIR = os.path.dirname(os.path.abspath(kiln.__file__))
THIS = os.path.abspath(__file__)
OLD_PYTHON = sys.version_info < (3, 11)
needs_311 = pytest.mark.skipif(OLD_PYTHON, reason="Python 3.10 keeps one boundary frame")


class UserError(Exception):
    pass


def bad(x):
    raise UserError("raised by the user's function")


def bad2(c, x):
    raise UserError("raised by the user's loop body")


def _catch(thunk):
    try:
        thunk()
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("no exception")


def _frames(e):
    frames = [(os.path.abspath(f.filename), f.name)
              for f in traceback.extract_tb(e.__traceback__)]
    ours = [i for i, f in enumerate(frames) if f[0].startswith(KILN_DIR + os.sep)]
    if OLD_PYTHON and len(ours) == 1:
        del frames[ours[0]]  # Python 3.10 keeps the outermost boundary's frame
    return frames


def _kiln_frames(e):
    return [f for f in _frames(e) if f[0].startswith(KILN_DIR + os.sep)]


def _names(e):
    return [name for _, name in _frames(e)]


def _custom_jvp(lib):
    f = lib.custom_jvp(bad)
    f.defjvp(lambda p, t: (p[0], t[0]))
    return f


def _custom_vjp(lib):
    f = lib.custom_vjp(bad)
    f.defvjp(lambda x: (x, None), lambda r, g: (g,))
    return f


# Each entry: lib (kiln or jax) -> a thunk that calls a transformation of a raising user
# function. JAX's traceback of the same call is the oracle for the frames that remain.
CASES = {
    "jit": lambda lib: lambda: lib.jit(bad)(1.0),
    "jit_lower": lambda lib: lambda: lib.jit(bad).lower(1.0),
    "grad": lambda lib: lambda: lib.grad(bad)(1.0),
    "value_and_grad": lambda lib: lambda: lib.value_and_grad(bad)(1.0),
    "vmap": lambda lib: lambda: lib.vmap(bad)(np.ones(3, np.float32)),
    "jvp": lambda lib: lambda: lib.jvp(bad, (1.0,), (1.0,)),
    "vjp": lambda lib: lambda: lib.vjp(bad, 1.0),
    "linearize": lambda lib: lambda: lib.linearize(bad, 1.0),
    "jacfwd": lambda lib: lambda: lib.jacfwd(bad)(1.0),
    "jacrev": lambda lib: lambda: lib.jacrev(bad)(1.0),
    "hessian": lambda lib: lambda: lib.hessian(bad)(1.0),
    "make_jaxpr": lambda lib: lambda: lib.make_jaxpr(bad)(1.0),
    "eval_shape": lambda lib: lambda: lib.eval_shape(bad, 1.0),
    "checkpoint": lambda lib: lambda: lib.checkpoint(bad)(1.0),
    "custom_jvp": lambda lib: lambda: _custom_jvp(lib)(1.0),
    "custom_vjp": lambda lib: lambda: _custom_vjp(lib)(1.0),
    "scan": lambda lib: lambda: lib.lax.scan(bad2, 0.0, np.ones(3, np.float32)),
    "fori_loop": lambda lib: lambda: lib.lax.fori_loop(0, 3, bad2, 0.0),
    "while_loop": lambda lib: lambda: lib.lax.while_loop(lambda c: True, bad, 0.0),
    "cond": lambda lib: lambda: lib.lax.cond(True, bad, bad, 1.0),
    "switch": lambda lib: lambda: lib.lax.switch(0, [bad, bad], 1.0),
    "map": lambda lib: lambda: lib.lax.map(bad, np.ones(3, np.float32)),
    "pmap": lambda lib: lambda: lib.pmap(bad)(np.ones((1, 3), np.float32)),
    "shard_map": lambda lib: lambda: lib.shard_map(
        bad, mesh=lib.make_mesh((1,), ("i",)), in_specs=lib.sharding.PartitionSpec(),
        out_specs=lib.sharding.PartitionSpec())(np.ones(2, np.float32)),
    "nested": lambda lib: lambda: lib.jit(lib.grad(lib.vmap(lambda x: bad(x).sum())))(
        np.ones(3, np.float32)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_error_has_only_user_frames(case):
    e = _catch(CASES[case](kiln))
    assert isinstance(e, UserError)
    assert _kiln_frames(e) == []
    frames = _frames(e)
    assert frames[0] == (THIS, "_catch")          # the frame that caught it
    assert frames[-1][1] in ("bad", "bad2")       # the line that raised
    assert all(f[0] == THIS for f in frames)
    assert e.__notes__ == [tbu._NOTE]             # once, also for nested boundaries
    assert e.__cause__ is None


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_frames_as_jax(case):
    jax = pytest.importorskip("jax")
    if case == "jit_lower":
        pytest.skip("jax's lower traces through a jit-decorated function of its own")
    je = _catch(CASES[case](jax))
    ke = _catch(CASES[case](kiln))
    assert type(ke) is type(je)
    # (JAX leaves one of its own frames in hessian's traceback: jacfun in jax/_src/api.py.)
    jax_dir = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep
    assert _names(ke) == [n for f, n in _frames(je) if not f.startswith(jax_dir)]
    assert len(je.__notes__) == len(ke.__notes__) == 1


@needs_311
def test_note_text_says_how_to_turn_it_off():
    e = _catch(CASES["jit"](kiln))
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    assert "kiln left its own internal frames out of the traceback" in text
    assert "JAX_TRACEBACK_FILTERING=off" in text
    assert "KILN_TRACEBACK_FILTERING=off" in text
    assert "kiln.config.update('jax_traceback_filtering', 'off')" in text
    assert 'raise UserError("raised by the user\'s function")' in text
    assert f'File "{THIS}"' in text and KILN_DIR not in text


def test_errors_kiln_raises_itself_show_the_call_site():
    # Bad arguments to a transformation: kiln's checks raise, only the user's call is left.
    cases = [lambda: kiln.vmap(lambda x: x, in_axes=2)(jnp.ones(3)),
             lambda: kiln.grad(lambda x: x)(1),
             lambda: kiln.jit(lambda x: x)("not an array"),
             lambda: kiln.lax.scan(lambda c, x: (c, x), 0.0, jnp.ones(3), length=4)]
    for thunk in cases:
        e = _catch(thunk)
        assert _names(e) == ["_catch", "<lambda>"], _frames(e)
        assert e.__notes__ == [tbu._NOTE]


def test_kiln_numpy_inside_jit_is_filtered():
    def f(x):
        return jnp.reshape(x, (5,))
    e = _catch(lambda: kiln.jit(f)(jnp.ones(3)))
    assert isinstance(e, TypeError)
    assert _names(e) == ["_catch", "<lambda>", "f"]


def test_off_keeps_every_frame():
    with config_context(jax_traceback_filtering="off"):
        e = _catch(CASES["nested"](kiln))
    assert isinstance(e, UserError)
    assert len(_kiln_frames(e)) > 5
    assert getattr(e, "__notes__", None) is None and e.__cause__ is None
    assert _frames(e)[-1][1] == "bad"


def test_remove_frames_keeps_the_unfiltered_traceback_as_cause():
    with config_context(jax_traceback_filtering="remove_frames"):
        e = _catch(CASES["jit"](kiln))
    assert _names(e) == ["_catch", "<lambda>", "bad"]
    assert getattr(e, "__notes__", None) is None
    cause = e.__cause__
    assert type(cause).__name__ == "UnfilteredStackTrace"
    assert isinstance(cause, tbu.UnfilteredStackTrace)
    assert str(cause).startswith("test_traceback_filtering.UserError: raised by the user's")
    assert "JAX_TRACEBACK_FILTERING=off" in str(cause)
    full = [(os.path.abspath(f.filename), f.name) for f in
            traceback.extract_tb(cause.__traceback__)]
    assert full[-1] == (THIS, "bad")
    assert any(f[0] == os.path.join(KILN_DIR, "jitting.py") for f in full)
    # The callers of the boundary come first (under pytest, up to pytest's own main
    # module), then the original frames from the boundary down, kiln's included.
    first_kiln = [i for i, f in enumerate(full) if f[0].startswith(KILN_DIR + os.sep)][0]
    assert [n for _, n in full[first_kiln - 2:first_kiln]] == ["_catch", "<lambda>"]
    assert e.__context__ is None


def test_remove_frames_matches_jax():
    jax = pytest.importorskip("jax")
    with config_context(jax_traceback_filtering="remove_frames"):
        ke = _catch(CASES["grad"](kiln))
    jax.config.update("jax_traceback_filtering", "remove_frames")
    try:
        je = _catch(CASES["grad"](jax))
    finally:
        jax.config.update("jax_traceback_filtering", "auto")
    assert _names(ke) == _names(je)
    assert type(ke.__cause__).__name__ == type(je.__cause__).__name__
    kfull = traceback.extract_tb(ke.__cause__.__traceback__)
    jfull = traceback.extract_tb(je.__cause__.__traceback__)
    assert [f.name for f in kfull if f.filename == __file__] == \
        [f.name for f in jfull if f.filename == __file__]


def test_tracebackhide_marks_internal_frames_only():
    with config_context(jax_traceback_filtering="tracebackhide"):
        e = _catch(CASES["vmap"](kiln))
    marked = [(f.f_code.co_filename, f.f_locals.get("__tracebackhide__", False))
              for f, _ in traceback.walk_tb(e.__traceback__)]
    assert len(marked) > 3
    for filename, hidden in marked:
        assert hidden == os.path.abspath(filename).startswith(KILN_DIR + os.sep), filename
    assert getattr(e, "__notes__", None) is None


def test_auto_is_tracebackhide_under_ipython(monkeypatch):
    import builtins
    import types
    assert tbu._filtering_mode() == "quiet_remove_frames"
    monkeypatch.setattr(builtins, "get_ipython", lambda: None, raising=False)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(version_info=(8, 12)))
    assert tbu._filtering_mode() == "tracebackhide"
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(version_info=(7, 16)))
    assert tbu._filtering_mode() == "quiet_remove_frames"


def test_base_exceptions_are_not_touched():
    def interrupt(x):
        raise KeyboardInterrupt
    try:
        kiln.jit(interrupt)(1.0)
    except KeyboardInterrupt as e:
        assert _kiln_frames(e) != []
        assert getattr(e, "__notes__", None) is None
    else:
        raise AssertionError("no KeyboardInterrupt")


def test_user_code_catching_inside_a_boundary_sees_the_whole_traceback():
    # Filtering happens only where the error leaves the outermost boundary.
    seen = []

    def f(x):
        try:
            kiln.grad(bad)(x)
        except UserError as e:
            seen.append((len(_kiln_frames(e)), getattr(e, "__notes__", None)))
        return x
    kiln.jit(f)(1.0)
    assert seen[0][0] > 0 and seen[0][1] is None


def test_register_exclusion_hides_a_library(tmp_path):
    lib = tmp_path / "mylib_tb.py"
    lib.write_text("def call(f, x):\n    return f(x)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import mylib_tb
        e = _catch(lambda: kiln.jit(lambda x: mylib_tb.call(bad, x))(1.0))
        assert "call" in _names(e)
        from kiln._src import traceback_util
        assert traceback_util._exclude_paths is tbu._exclude_paths
        traceback_util.register_exclusion(str(tmp_path))
        e = _catch(lambda: kiln.jit(lambda x: mylib_tb.call(bad, x))(1.0))
        assert _names(e) == ["_catch", "<lambda>", "<lambda>", "bad"]
        # Flax's show_flax_in_tracebacks removes its paths from the list directly.
        traceback_util._exclude_paths.remove(str(tmp_path))
        e = _catch(lambda: kiln.jit(lambda x: mylib_tb.call(bad, x))(1.0))
        assert "call" in _names(e)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mylib_tb", None)
        if str(tmp_path) in tbu._exclude_paths:
            tbu._exclude_paths.remove(str(tmp_path))
        from kiln import errors
        if str(tmp_path) in errors._excluded_paths:
            errors._excluded_paths.remove(str(tmp_path))


def test_api_boundary_decorator():
    @tbu.api_boundary
    def entry(f, x):
        """doc"""
        return f(x)
    assert entry.__name__ == "entry" and entry.__doc__ == "doc"
    assert entry(lambda x: x + 1, 1) == 2
    e = _catch(lambda: entry(bad, 1.0))
    assert _names(e) == ["_catch", "<lambda>", "entry", "bad"]  # entry is not kiln's


_SCRIPT = textwrap.dedent("""
    import traceback, kiln
    def bad(x):
        raise ValueError("boom")
    try:
        kiln.jit(bad)(1.0)
    except ValueError as e:
        tb = traceback.extract_tb(e.__traceback__)
        print(kiln.config.jax_traceback_filtering, len(tb),
              any("/kiln/" in f.filename for f in tb), len(getattr(e, "__notes__", [])))
""")


@needs_311
@pytest.mark.parametrize("env,expected", [
    ({}, "auto 2 False 1"),
    ({"JAX_TRACEBACK_FILTERING": "off"}, "off"),
    ({"KILN_TRACEBACK_FILTERING": "off"}, "off"),
    ({"JAX_TRACEBACK_FILTERING": "off", "KILN_TRACEBACK_FILTERING": "remove_frames"},
     "remove_frames 2 False 0"),
])
def test_mode_from_environment(env, expected):
    full = {k: v for k, v in os.environ.items() if not k.endswith("TRACEBACK_FILTERING")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=full, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    if expected == "off":
        mode, n, has_kiln, notes = line.split()
        assert mode == "off" and int(n) > 3 and has_kiln == "True" and notes == "0"
    else:
        assert line == expected


@needs_311
def test_pytest_report_shows_user_frames(tmp_path):
    test = tmp_path / "test_user_tb.py"
    test.write_text(textwrap.dedent("""
        import kiln
        def bad(x):
            raise ValueError("boom")
        def test_it():
            kiln.jit(bad)(1.0)
    """))
    env = {k: v for k, v in os.environ.items() if not k.endswith("TRACEBACK_FILTERING")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(test)], env=env, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert "1 failed" in out.stdout, out.stdout
    assert "kiln left its own internal frames out" in out.stdout
    assert os.path.join("kiln", "api.py") not in out.stdout
    assert 'raise ValueError("boom")' in out.stdout
