"""Faults degrade, never break (issue 25).

A read-only or full cache, a failing or hanging ``CC``: in sync and async compile mode,
one warning naming the cause and the fix, then the program runs correctly (the reference
backend or a private build directory). A hanging compiler is killed after
``KILN_BUILD_TIMEOUT`` seconds, Ctrl-C during a build leaves the program buildable, and a
process with a build pending exits promptly.
"""
import errno
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu
from kiln.compiler.build import build
from kiln.config import config

REAL_CC = build.find_compiler()
# kiln's native eager math kernels (exp, sin, ...: JAX's bits) are one library loaded once
# per process; load it now with the real compiler, so that the reference-backend runs of
# the programs below (with a broken fake CC) do not try to build it and add a warning of
# their own depending on test order.
jnp.sin(jnp.exp(jnp.ones(3)))
jnp.sin(jnp.exp(jnp.ones(3, np.float64))) if config.jax_enable_x64 else None
pytestmark = pytest.mark.skipif(not hasattr(os, "killpg") or REAL_CC is None,
                                reason="needs POSIX and a C compiler")
ROOT = str(pathlib.Path(build.__file__).parents[3])


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie waiting for a reaper counts as ended)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _fake_cc(tmp_path: pathlib.Path, body: str) -> str:
    """A compiler script: ``--version`` and the flag probes go to the real compiler
    (so only program builds meet ``body``) unless ``body`` says otherwise."""
    script = tmp_path / "fakecc"
    script.write_text(f"""#!/bin/sh
{body}
""")
    script.chmod(0o755)
    return str(script)


PASS_PROBES = f"""case "$*" in *--version*|*probe.c*) exec {REAL_CC} "$@";; esac"""


@pytest.fixture(params=["sync", "async"])
def mode(request, monkeypatch):
    old = config.kiln_compile
    config.update("kiln_compile", request.param)
    yield request.param
    config.update("kiln_compile", old)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KILN_CFLAGS", raising=False)
    monkeypatch.delenv("KILN_DUMP", raising=False)
    monkeypatch.setattr(build, "_warned", set())
    monkeypatch.setattr(build, "_fallback", {})
    monkeypatch.setattr(build, "_libraries", {})
    monkeypatch.setattr(cpu, "_warned_faults", set())
    monkeypatch.setattr(cpu, "_disabled_reason", [])


def _program():
    """A jitted function not seen before (a fresh constant), and its NumPy reference."""
    c = float(np.random.default_rng().integers(2, 10_000)) / 7
    f = kiln.jit(lambda v: jnp.exp(-v * v) * c + jnp.sin(v))
    x = np.linspace(-3.0, 3.0, 101, dtype=np.float32)
    want = np.exp(-x * x) * np.float32(c) + np.sin(x)
    return f, x, want


def _call(f, x):
    """The first two calls (the first may run on the reference backend), after any
    background build has ended; returns the outputs and the kiln warnings met."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out1 = np.asarray(f(x))
        cpu.wait_for_compiles()
        out2 = np.asarray(f(x))
    return out1, out2, [str(w.message) for w in record if "kiln" in str(w.message)]


def _check(outs, want):
    for out in outs:
        np.testing.assert_allclose(out, want, rtol=3e-6, atol=3e-6)


def test_failing_cc(tmp_path, monkeypatch, fresh, mode):
    monkeypatch.setenv("CC", _fake_cc(tmp_path, f"""case "$*" in *--version*) exec {REAL_CC} "$@";; esac
echo "fakecc: internal error" >&2; exit 1"""))
    f, x, want = _program()
    out1, out2, msgs = _call(f, x)
    _check([out1, out2], want)
    assert len(msgs) == 1, msgs
    assert "fails to build" in msgs[0] and "fakecc: internal error" in msgs[0]
    assert "set CC" in msgs[0]
    g, y, want_g = _program()      # no further warning, still right
    *outs, more = _call(g, y)
    _check(outs, want_g)
    assert more == []


def test_cc_failing_on_programs_only(tmp_path, monkeypatch, fresh, mode):
    monkeypatch.setenv("CC", _fake_cc(tmp_path, PASS_PROBES + '\necho "fakecc: no" >&2; exit 3'))
    f, x, want = _program()
    out1, out2, msgs = _call(f, x)
    _check([out1, out2], want)
    assert len(msgs) == 1, msgs
    assert "status 3" in msgs[0] and "fakecc: no" in msgs[0] and "Fix:" in msgs[0]
    assert "reference backend" in msgs[0]


def test_hanging_cc_is_killed(tmp_path, monkeypatch, fresh, mode):
    pidfile = tmp_path / "pid"
    monkeypatch.setenv("CC", _fake_cc(tmp_path, PASS_PROBES
                                      + f"\nsleep 60 & echo $! > {pidfile}; wait"))
    monkeypatch.setenv("KILN_BUILD_TIMEOUT", "1")
    f, x, want = _program()
    t0 = time.monotonic()
    out1, out2, msgs = _call(f, x)
    assert time.monotonic() - t0 < 20
    _check([out1, out2], want)
    assert len(msgs) == 1, msgs
    assert "ran over 1 s" in msgs[0] and "killed" in msgs[0]
    assert "KILN_BUILD_TIMEOUT" in msgs[0]
    if pidfile.exists():    # (under heavy load the script may be killed before writing it)
        assert _gone(int(pidfile.read_text()))     # the whole process group went
    g, y, want_g = _program()        # compilation is off from now on: no second wait
    t0 = time.monotonic()
    *outs, more = _call(g, y)
    assert time.monotonic() - t0 < 5 and more == []
    _check(outs, want_g)


def test_hanging_probe(tmp_path, monkeypatch, fresh):
    monkeypatch.setenv("CC", _fake_cc(tmp_path, f"""case "$*" in *--version*) exec {REAL_CC} "$@";; esac
sleep 60"""))
    monkeypatch.setenv("KILN_BUILD_TIMEOUT", "0.5")
    f, x, want = _program()
    out1, out2, msgs = _call(f, x)
    _check([out1, out2], want)
    assert len(msgs) == 1 and "ran over 0.5 s" in msgs[0], msgs


def _cache_dir_only(exc_errno):
    """A stand-in for ``build._create_at``/``_mkdir_at`` failing in the user's cache."""
    def fails_in(real):
        def wrapped(name, dir_fd, *rest):
            where = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else name
            if os.environ["KILN_CACHE_DIR"] in where:
                raise OSError(exc_errno, os.strerror(exc_errno), name)
            return real(name, dir_fd, *rest)
        return wrapped
    return fails_in


def _swap_args(real):
    """``_create_at(dir_fd, name)`` -> the ``(name, dir_fd)`` order of ``_mkdir_at``."""
    return lambda name, dir_fd: real(dir_fd, name)


@pytest.fixture
def read_only_cache(tmp_path, monkeypatch, fresh):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")
    root = tmp_path / "cache"
    build.build_shared("int kiln_fault_probe(void) { return 1; }")   # root and so/ exist
    if os.geteuid() != 0:
        os.chmod(root / "so", 0o555)
        yield root
        os.chmod(root / "so", 0o700)
        return
    fail = _cache_dir_only(errno.EROFS)    # root ignores modes: simulate a read-only mount
    monkeypatch.setattr(build, "_mkdir_at", fail(build._mkdir_at))
    real_create = build._create_at
    wrapped = fail(_swap_args(real_create))
    monkeypatch.setattr(build, "_create_at", lambda dir_fd, name: wrapped(name, dir_fd))
    yield root


def test_read_only_cache(read_only_cache, mode):
    f, x, want = _program()
    out1, out2, msgs = _call(f, x)
    _check([out1, out2], want)
    assert len(msgs) == 1, msgs
    assert str(read_only_cache) in msgs[0]
    assert "ead-only" in msgs[0] or "ermission denied" in msgs[0]
    assert "KILN_CACHE_DIR" in msgs[0]
    private = build._fallback[str(read_only_cache)]      # built all the same, there
    assert any(p.suffix == ".so" for p in (private / "so").iterdir())


def test_full_disk(tmp_path, monkeypatch, fresh, mode):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")
    fail = _cache_dir_only(errno.ENOSPC)
    real_create = build._create_at
    wrapped = fail(_swap_args(real_create))
    monkeypatch.setattr(build, "_create_at", lambda dir_fd, name: wrapped(name, dir_fd))
    f, x, want = _program()
    out1, out2, msgs = _call(f, x)
    _check([out1, out2], want)
    assert len(msgs) == 1, msgs
    assert "No space left on device" in msgs[0] and "free disk space" in msgs[0]


def test_full_disk_everywhere(tmp_path, monkeypatch, fresh, mode):
    def full(dir_fd, name):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)
    monkeypatch.setattr(build, "_create_at", full)
    f, x, want = _program()
    out1, out2, msgs = _call(f, x)
    _check([out1, out2], want)
    assert 1 <= len(msgs) <= 2, msgs      # the cache's, then the private directory's
    assert all("No space left on device" in m for m in msgs)
    assert any("reference backend" in m for m in msgs)


def test_foreign_so_directory_in_every_mode(tmp_path, monkeypatch, fresh, mode):
    root = tmp_path / "cache"
    build.build_shared("int kiln_fault_probe(void) { return 1; }")
    if os.geteuid() == 0:
        os.chown(root / "so", 65534, 65534)
    else:
        os.chmod(root / "so", 0o777)
    f, x, want = _program()
    out1, out2, msgs = _call(f, x)
    _check([out1, out2], want)
    assert len(msgs) == 1 and str(root / "so") in msgs[0], msgs


def test_interrupted_build_builds_again(tmp_path, monkeypatch, fresh):
    """Ctrl-C while the compiler runs (sync): the entry is dropped, the compiler killed,
    no partial file left; the next call builds the program."""
    flag = tmp_path / "hang"
    flag.touch()
    monkeypatch.setenv("CC", _fake_cc(tmp_path, f"""{PASS_PROBES}
if [ -e {flag} ]; then sleep 60; fi
exec {REAL_CC} "$@\""""))
    old = config.kiln_compile
    config.update("kiln_compile", "sync")
    try:
        f, x, want = _program()
        main = threading.main_thread().ident
        timer = threading.Timer(1.0, signal.pthread_kill, (main, signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            f(x)
        timer.join()
        so = tmp_path / "cache" / "so"
        assert [p.name for p in so.iterdir() if ".build-" in p.name] == []
        flag.unlink()
        before = build.stats()["builds"]
        out = np.asarray(f(x))
        _check([out], want)
        assert build.stats()["builds"] == before + 1, "not built after the interrupt"
    finally:
        config.update("kiln_compile", old)


_HANG_CHILD = r"""
import sys, numpy as np, kiln, kiln.numpy as jnp
# (abs, not a transcendental: eager/reference cos would build kiln's native math kernels
# with the same hanging compiler on the calling thread)
f = kiln.jit(lambda v: jnp.abs(v) * 2.0 + 0.25)
print("start", flush=True)
print(float(np.asarray(f(np.float32(0.75)))), flush=True)
"""


def _child_env(tmp_path, cc, mode):
    return {**os.environ, "CC": cc, "KILN_COMPILE": mode, "KILN_BUILD_TIMEOUT": "600",
            "KILN_CACHE_DIR": str(tmp_path / "child-cache"), "PYTHONPATH": ROOT,
            "PYTHONWARNINGS": "ignore"}


def test_sigint_during_a_build_exits_promptly(tmp_path):
    pidfile = tmp_path / "pid"
    log = tmp_path / "log"     # which compiler run started which sleep (for a failure)
    cc = _fake_cc(tmp_path, PASS_PROBES + f"\nsleep 300 & echo $! > {pidfile}; "
                  f"echo \"$$ sleep $! $*\" | cut -c1-250 >> {log}; wait")
    child = subprocess.Popen([sys.executable, "-c", _HANG_CHILD], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=_child_env(tmp_path, cc, "sync"))
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline and child.poll() is None, child.stderr.read()
            time.sleep(0.05)
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=15)
        assert time.monotonic() - t0 < 10
        assert child.returncode != 0 and "KeyboardInterrupt" in err
        assert _gone(int(pidfile.read_text())), log.read_text() + err
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()



def test_interrupt_while_a_compiler_starts_kills_it(tmp_path, monkeypatch):
    """Ctrl-C landing while a compiler process is being started (after it exists, before
    anyone holds it): the process is killed, not left running unknown to kiln."""
    started = []
    real = build._spawn_here

    def slow_start(cmd):
        p = real(cmd)
        started.append(p.pid)
        time.sleep(0.5)         # the interrupt lands now
        return p

    monkeypatch.setattr(build, "_spawn_here", slow_start)
    main = threading.main_thread().ident
    timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        build._spawn(["sleep", "30"])
        time.sleep(5)
    timer.join()
    assert len(started) == 1 and _gone(started[0])


@pytest.mark.slow  # ~60 s: waits out a pending build; test_hanging_cc_is_killed stays
def test_pending_background_build_does_not_delay_exit(tmp_path):
    pidfile = tmp_path / "pid"
    cc = _fake_cc(tmp_path, PASS_PROBES + f"\nsleep 300 & echo $! > {pidfile}; wait")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _HANG_CHILD + r"""
import os, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)      # the compiler is running now
""", str(pidfile)], capture_output=True, text=True, timeout=60,
                          env={**_child_env(tmp_path, cc, "async"), "PYTHONWARNINGS": "default"})
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr      # a cancelled build is no fault
    assert time.monotonic() - t0 < 30
    value = float(proc.stdout.split()[-1])
    assert value == 1.75
    assert _gone(int(pidfile.read_text()))


def test_compiler_meets_a_full_disk(tmp_path, monkeypatch, fresh, mode):
    """The compiler itself reports ENOSPC writing into the cache: a disk fault, so the
    build is redone in the private directory (one warning naming the cause and fix)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("CC", _fake_cc(tmp_path, f"""{PASS_PROBES}
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
case "$(readlink -f "$(dirname "$out")")" in
  {cache}*) echo "cc1: fatal error: error writing to $out: No space left on device" >&2
            exit 1;;
esac
exec {REAL_CC} "$@\""""))
    f, x, want = _program()
    out1, out2, msgs = _call(f, x)
    _check([out1, out2], want)
    assert len(msgs) == 1, msgs
    assert "No space left on device" in msgs[0] and "free disk space" in msgs[0]
    private = build._fallback[str(cache)]
    assert any(p.suffix == ".so" for p in (private / "so").iterdir())


def test_build_timeout_setting(monkeypatch):
    monkeypatch.delenv("KILN_BUILD_TIMEOUT", raising=False)
    assert build._build_timeout() == 120.0
    monkeypatch.setenv("KILN_BUILD_TIMEOUT", "2.5")
    assert build._build_timeout() == 2.5
    for bad in ("soon", "0", "-3"):
        monkeypatch.setenv("KILN_BUILD_TIMEOUT", bad)
        assert build._build_timeout() == 120.0


def test_compiled_as_text_degrades(tmp_path, monkeypatch, fresh):
    """``lower().compile().as_text()`` with a compiler that fails: the jaxpr's text and
    one warning, no exception; the call still gives NumPy's values."""
    monkeypatch.setenv("CC", _fake_cc(tmp_path, f"""case "$*" in *--version*) exec {REAL_CC} "$@";; esac
exit 1"""))
    f, x, want = _program()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        compiled = f.lower(x).compile()
        text = compiled.as_text()
        out = np.asarray(compiled(x))
    msgs = [str(w.message) for w in record if "kiln" in str(w.message)]
    assert len(msgs) == 1 and "fails to build" in msgs[0], msgs
    assert "exp" in text
    _check([out], want)


def test_failed_build_with_the_precompiled_header_keeps_the_cache(fresh, tmp_path):
    """A program that does not compile while the precompiled header is in the cache: the
    build is retried without the header (in case it is damaged), then fails with the
    compiler's error; the disk cache stays in use (the retry rewrote the source with an
    exclusive create, which failed and moved the process to a private cache)."""
    if not build.pch_enabled():
        pytest.skip("no precompiled header with this compiler")
    head = "#include <math.h>\nstatic inline double kiln_t_sq(double x) { return x * x; }\n"
    build.build_shared(head + build.PCH_MARK + "\ndouble kiln_t_f(double x) "
                       "{ return kiln_t_sq(x); }\n")
    build.build_shared(head + build.PCH_MARK + "\ndouble kiln_t_f2(double x) "
                       "{ return kiln_t_sq(x) + 1; }\n")        # the header is ready now
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(build.BuildError, match="kiln_t_undeclared"):
            build.build_shared(head + build.PCH_MARK + "\ndouble kiln_t_g(double x) "
                               "{ return kiln_t_undeclared; }\n")
        ok = build.build_shared(head + build.PCH_MARK + "\ndouble kiln_t_h(double x) "
                                "{ return -kiln_t_sq(x); }\n")
    assert str(ok).startswith(str(tmp_path / "cache")), ok


def test_failed_build_of_units_with_the_precompiled_header_keeps_the_cache(fresh, tmp_path):
    """The same for a source split into translation units (UNIT_MARK): the retry
    without the header writes each unit's file again."""
    if not build.pch_enabled():
        pytest.skip("no precompiled header with this compiler")
    head = "#include <math.h>\nstatic inline double kiln_t_sq(double x) { return x * x; }\n"
    u = build.UNIT_MARK
    build.build_shared(head + build.PCH_MARK + "\ndouble kiln_u_f(double x) "
                       "{ return kiln_t_sq(x); }\n")
    build.build_shared(head + build.PCH_MARK + "\ndouble kiln_u_f2(double x) "
                       "{ return kiln_t_sq(x) + 1; }\n")        # the header is ready now
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(build.BuildError, match="kiln_t_undeclared"):
            build.build_shared(head + build.PCH_MARK + f"\n{u}\ndouble kiln_u_g(double x) "
                               f"{{ return kiln_t_undeclared; }}\n{u}\ndouble kiln_u_g2"
                               "(double x) { return x; }\n")
        ok = build.build_shared(head + build.PCH_MARK + f"\n{u}\ndouble kiln_u_h(double x) "
                                f"{{ return -kiln_t_sq(x); }}\n{u}\ndouble kiln_u_h2"
                                "(double x) { return x; }\n")
    assert str(ok).startswith(str(tmp_path / "cache")), ok
