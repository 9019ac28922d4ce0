"""Compile visibility: ``jax_log_compiles``, ``jax_explain_cache_misses`` (JAX 0.10's
wording, compared with JAX's own log records), the retrace warning, and the tracing
context in jit's cache key."""
import logging
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _compile_log

config_context = sys.modules["kiln.config"].config_context


@pytest.fixture
def kiln_logs(caplog):
    caplog.set_level(logging.DEBUG, logger="kiln")
    return caplog


def _messages(caplog, logger_prefix):
    return [r.getMessage() for r in caplog.records if r.name.startswith(logger_prefix)]


def test_log_compiles_messages(kiln_logs):
    def f(x):
        return x * 2.0 + 1.0

    jf = kiln.jit(f)
    with kiln.log_compiles(True):
        jf(jnp.ones(3))
        jf(jnp.ones(3))                         # cached: nothing logged
    warn = [r.getMessage() for r in kiln_logs.records
            if r.name == "kiln" and r.levelno == logging.WARNING]
    assert len([m for m in warn if m.startswith("Finished tracing")]) == 1
    assert re.fullmatch(r"Finished tracing f for jit in \d+\.\d+(e-\d+)? sec", warn[0])
    assert "Compiling jit(f) with global shapes and types (ShapedArray(float32[3]),)." in warn
    assert any(re.match(r"Finished jaxpr to C conversion jit\(f\) in [\d.e-]+ sec", m)
               for m in warn)
    assert any(re.fullmatch(r"Finished C compilation of jit\(f\) in [\d.e-]+ sec", m)
               for m in warn)


def test_log_compiles_wording_matches_jax(kiln_logs):
    jax = pytest.importorskip("jax")

    def g(x):
        return x + 1.0

    with jax.log_compiles(True):
        jax.jit(g)(np.ones((2, 3), np.float32))
    with kiln.log_compiles(True):
        kiln.jit(g)(jnp.ones((2, 3)))
    jax_msgs = _messages(kiln_logs, "jax")
    kiln_msgs = _messages(kiln_logs, "kiln")
    strip = re.compile(r" in [\d.e-]+ sec.*$")
    jax_trace = [strip.sub("", m) for m in jax_msgs if m.startswith("Finished tracing g")]
    kiln_trace = [strip.sub("", m) for m in kiln_msgs if m.startswith("Finished tracing g")]
    assert jax_trace == kiln_trace == ["Finished tracing g for jit"]
    jax_compiling = next(m for m in jax_msgs if m.startswith("Compiling jit(g)"))
    kiln_compiling = next(m for m in kiln_msgs if m.startswith("Compiling jit(g)"))
    # JAX adds the argument shardings ("Argument mapping: ..."), which kiln does not have.
    assert jax_compiling.startswith(kiln_compiling[:-1])


def test_log_compiles_off_logs_only_at_debug(kiln_logs):
    kiln.jit(lambda x: x - 1.0)(jnp.ones(2))
    records = [r for r in kiln_logs.records if r.name == "kiln"]
    assert records and all(r.levelno == logging.DEBUG for r in records)
    assert kiln.config.jax_log_compiles is False


def test_log_compiles_context_manager_restores():
    with kiln.log_compiles():
        assert kiln.config.jax_log_compiles is True
    assert kiln.config.jax_log_compiles is False


# ----------------------------------------------------------------------------------------------
# explain_cache_misses, compared with JAX's records

def _explain_f(x, y=1.0):
    return x


def _explain_h(a, b, c):
    return a


def _explain_s(x, n):
    return x


def _explain_v(a, *args, **kw):
    return a


def _call(jf, *args, **kwargs):
    jf(*args, **kwargs)      # every call site of the scenarios is this line


def _scenarios(np_):
    """The same calls for both libraries (``np_`` makes arrays)."""
    A = lambda *shape, dt=np.float32: np_(np.ones(shape, dt))  # noqa: E731
    return [
        (_explain_f, {}, [((A(3),), {}), ((A(4),), {}), ((A(4, dt=np.int32),), {}),
                          ((1.0,), {}), ((A(4),), {"y": A()}), ((A(4), A()), {})]),
        (_explain_h, {}, [((A(4), {"p": A(2)}, [1.0, 2.0]), {}),
                          ((A(4), {"p": A(3)}, [1.0, A(3, dt=np.int32)]), {}),
                          ((A(4), {"p": A(3)}, [1.0]), {}),
                          ((A(4), {"q": A(3)}, [1.0, 2.0]), {})]),
        (_explain_s, {"static_argnums": 1}, [((A(4), 2.0), {}), ((A(4), 3.0), {}),
                                              ((A(4),), {"n": 3.0})]),
        (_explain_v, {}, [((A(1), A(2)), {"z": A(3)}), ((A(1), A(3)), {"z": A(3)}),
                          ((A(1), A(3)), {"z": A(4)}), ((), {"a": A(2), "z": A(4)})]),
    ]


def _normalize(msg):
    msg = re.sub(r"id=\d+", "id=ID", msg)
    msg = msg.replace("({})", "")                        # JAX's sharding suffix
    msg = msg.replace("jax._src.tree_util.Static", "STATIC")
    msg = msg.replace("kiln._compile_log.Static", "STATIC")
    return msg


def test_explain_cache_misses_matches_jax(kiln_logs):
    jax = pytest.importorskip("jax")
    for lib, np_ in ((jax, jax.numpy.asarray), (kiln, jnp.asarray)):
        with lib.explain_cache_misses(True):
            for fun, opts, calls in _scenarios(np_):
                jf = lib.jit(fun, **opts)
                for args, kwargs in calls:
                    _call(jf, *args, **kwargs)
    jax_msgs = [_normalize(m) for m in _messages(kiln_logs, "jax")
                if m.startswith("TRACING CACHE MISS")]
    kiln_msgs = [_normalize(m) for m in _messages(kiln_logs, "kiln")
                 if m.startswith("TRACING CACHE MISS")]
    assert len(kiln_msgs) == len(jax_msgs) == 17
    for k, j in zip(kiln_msgs, jax_msgs):
        assert k == j


def test_explain_cache_miss_context_and_redefinition(kiln_logs):
    def h(a):
        return a

    jh = kiln.jit(h)
    with kiln.explain_cache_misses(True):
        jh(jnp.ones(2, jnp.int32))
        with kiln.enable_x64(True):
            jh(jnp.ones(2, jnp.int32))
        for _ in range(2):
            kiln.jit(lambda x: x)(1.0)
    msgs = [m for m in _messages(kiln_logs, "kiln") if m.startswith("TRACING CACHE MISS")]
    assert len(msgs) == 4
    assert msgs[1].endswith("all previously seen cache keys differ. For the closest previous "
                            "key:\n  Tracing context doesn't match, e.g. due to config or "
                            "context manager.\n  * jax_enable_x64 differs: now True and before "
                            "False")
    assert "never seen function" in msgs[2] and "maybe the function is" not in msgs[2]
    assert msgs[3].endswith("but seen another function defined on the same line; maybe the "
                            "function is\n  being re-defined repeatedly, preventing caching?")


def test_x64_is_part_of_the_trace_cache_key():
    f = kiln.jit(lambda x: jnp.ones(2) + x)
    assert f(jnp.int32(1)).dtype == np.float32
    with kiln.enable_x64(True):
        assert f(jnp.int32(1)).dtype == np.float64
    assert f(jnp.int32(1)).dtype == np.float32


def test_rank_promotion_change_is_not_served_from_the_fast_cache():
    f = kiln.jit(lambda x, y: x + y)
    a, b = jnp.ones(3), jnp.ones((2, 3))
    f(a, b)
    f(a, b)
    with config_context(jax_numpy_rank_promotion="raise"):
        with pytest.raises(ValueError):
            f(a, b)


# ----------------------------------------------------------------------------------------------
# Retrace warning

def test_retrace_warning_names_function_and_argument():
    _compile_log.reset_counts()

    def step(x):
        return x * 2

    jf = kiln.jit(step)
    with config_context(kiln_warn_retrace=True, kiln_retrace_warning_threshold=3), warnings.catch_warnings(
            record=True) as w:
        warnings.simplefilter("always")
        for n in range(1, 7):
            jf(jnp.ones(n))
    hits = [x for x in w if issubclass(x.category, _compile_log.RetraceWarning)]
    assert len(hits) == 1
    msg = str(hits[0].message)
    assert "the jitted function step defined at" in msg and "traced 4 times" in msg
    assert "* at x, now f32[4] and before f32[3]" in msg
    assert hits[0].filename == __file__


def test_retrace_warning_static_argument_and_new_function_objects():
    _compile_log.reset_counts()
    g = kiln.jit(lambda x, n: x * n, static_argnums=1)
    with config_context(kiln_warn_retrace=True, kiln_retrace_warning_threshold=2), warnings.catch_warnings(
            record=True) as w:
        warnings.simplefilter("always")
        for i in range(4):
            g(1.0, i)
        for _ in range(4):
            kiln.jit(lambda x: x + 1)(1.0)
    msgs = [str(x.message) for x in w if issubclass(x.category, _compile_log.RetraceWarning)]
    assert len(msgs) == 2
    assert "Static(val=2) and before" in msgs[0] and "static argument's value changed" in msgs[0]
    assert "new function object each time" in msgs[1]


def test_retrace_warning_off_and_default():
    assert kiln.config.kiln_retrace_warning_threshold == 10
    _compile_log.reset_counts()
    f = kiln.jit(lambda x: x)
    with config_context(kiln_warn_retrace=True, kiln_retrace_warning_threshold=0), \
            warnings.catch_warnings():
        warnings.simplefilter("error", _compile_log.RetraceWarning)
        for n in range(1, 5):
            f(jnp.ones(n))


def test_retrace_warning_is_opt_in():
    """JAX emits no retrace warning: by default kiln neither (kiln_warn_retrace off), even
    under ``simplefilter("error")`` and far past the threshold."""
    assert kiln.config.kiln_warn_retrace is False
    _compile_log.reset_counts()
    f = kiln.jit(lambda x: x * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in range(1, 15):
            f(jnp.ones(n))
        for _ in range(12):
            kiln.jit(lambda x: x + 1)(1.0)


def test_retrace_warning_env_var():
    code = ("import warnings, kiln, kiln.numpy as jnp\n"
            "assert kiln.config.kiln_warn_retrace\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    f = kiln.jit(lambda x: x)\n"
            "    for n in range(1, 5): f(jnp.ones(n))\n"
            "print(sum('traced' in str(x.message) for x in w))\n")
    env = dict(os.environ, KILN_WARN_RETRACE="1", KILN_RETRACE_WARNING_THRESHOLD="2",
               KILN_BACKEND="reference")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "1"
