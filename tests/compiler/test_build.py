"""Tests of kiln.compiler.build.build: the C build, its disk cache, integrity checks and loading.

Every test gets its own cache directory (``KILN_CACHE_DIR`` under ``tmp_path``). Sources
are tiny (a compile costs ~30 ms); those that go through an in-process cache
(``load_library``, ``build_extension``) are made unique per test run.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
import uuid

import pytest

from kiln.compiler.build import build

pytestmark = pytest.mark.skipif(build.find_compiler() is None, reason="no C compiler")

SRC = "int kiln_test_triple(int x) { return 3 * x; }\n"


def _unique(src: str) -> str:
    """``src`` with a comment making its key unseen by this process's caches."""
    return f"/* {uuid.uuid4().hex} */\n{src}"


def _delta(before: dict, key: str) -> float:
    return build.stats()[key] - before[key]


def _entry_files(path: pathlib.Path) -> list[pathlib.Path]:
    stem = path.name.split(".", 1)[0]
    return sorted(path.parent.glob(stem + ".*"))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> pathlib.Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("KILN_CACHE_DIR", str(d))
    monkeypatch.delenv("KILN_DUMP", raising=False)
    monkeypatch.delenv("KILN_CFLAGS", raising=False)
    monkeypatch.delenv("KILN_CACHE_MAX_BYTES", raising=False)
    return d


def test_build_and_call(cache):
    lib = build.load_library(_unique(SRC), name="triple")
    lib.kiln_test_triple.argtypes = [ctypes.c_int]
    lib.kiln_test_triple.restype = ctypes.c_int
    assert lib.kiln_test_triple(14) == 42
    libs = list((cache / "so").glob("triple-*.so"))
    assert len(libs) == 1 and len(libs[0].name) == len("triple-") + 32 + len(".so")


def test_default_flags_are_ieee(cache, monkeypatch):
    flags = build.default_flags()
    assert "-ffast-math" not in flags and "-Ofast" not in flags
    assert {"-fPIC", "-shared", "-fno-math-errno", "-ffp-contract=off"} <= set(flags)
    assert build.openmp_available() == ("-fopenmp" in flags)
    monkeypatch.setenv("KILN_CFLAGS", "-O1")
    flags = build.default_flags()
    assert "-O1" in flags and "-O3" not in flags and "-march=native" not in flags
    assert "-fPIC" in flags


def test_gold_linker_used_when_the_toolchain_has_it(cache, monkeypatch):
    """``-fuse-ld=gold`` is in the flags exactly when a probe link with it works; the
    verdict is recorded beside the other probes."""
    monkeypatch.setattr(build, "_flags_cache", {})
    flags = build.default_flags()
    argv = build._compiler_argv()
    works = build._probe(argv, [f for f in flags if f != "-fuse-ld=gold"] + ["-fuse-ld=gold"])
    assert ("-fuse-ld=gold" in flags) == works
    records = [json.loads(p.read_text()) for p in (cache / "so").glob("flags-*.json")]
    assert records and all(r["gold"] == works for r in records)
    lib = build.load_library(_unique(SRC), name="goldlink")
    lib.kiln_test_triple.argtypes = [ctypes.c_int]
    lib.kiln_test_triple.restype = ctypes.c_int
    assert lib.kiln_test_triple(5) == 15


def test_directory_mode(tmp_path, monkeypatch):
    d = tmp_path / "a" / "kiln"
    monkeypatch.setenv("KILN_CACHE_DIR", str(d))
    assert build.cache_dir() == d
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    path = build.build_shared(SRC)
    assert path.parent == d / "so"
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    os.chmod(path.parent, 0o777)  # loosened: refused (one warning), a private dir instead
    with pytest.warns(RuntimeWarning, match="writable by group or others"):
        other = build.build_shared(SRC)
    assert other.parent != path.parent and stat.S_IMODE(os.stat(other.parent).st_mode) == 0o700
    # cache_dir() reads the environment on every call
    monkeypatch.delenv("KILN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg" / "kiln"
    assert stat.S_IMODE(os.stat(tmp_path / "xdg" / "kiln").st_mode) == 0o700


def test_second_build_is_cache_hit(cache):
    before = build.stats()
    p1 = build.build_shared(SRC)
    assert _delta(before, "builds") == 1 and _delta(before, "hits") == 0
    assert _delta(before, "seconds") > 0 and build.last_build_seconds() > 0
    old = time.time() - 1000
    os.utime(p1, (old, old))
    p2 = build.build_shared(SRC)
    assert p2 == p1
    assert _delta(before, "builds") == 1 and _delta(before, "hits") == 1
    assert os.stat(p1).st_mtime > old + 500  # a hit marks the entry as recently used
    # another flag is another library
    p3 = build.build_shared(SRC, extra_flags=["-DKILN_TEST_OTHER=1"])
    assert p3 != p1 and _delta(before, "builds") == 2


def _meta(path: pathlib.Path) -> dict:
    return json.loads(path.with_name(path.name.split(".", 1)[0] + ".json").read_text())


def test_tampered_library_is_rebuilt(cache):
    path = build.build_shared(SRC, name="tamper")
    good = path.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    path.write_bytes(bytes(bad))
    before = build.stats()
    assert build.build_shared(SRC, name="tamper") == path
    assert _delta(before, "builds") == 1 and _delta(before, "hits") == 0
    data = path.read_bytes()
    assert data != bytes(bad)
    assert hashlib.sha256(data).hexdigest() == _meta(path)["sha256"]
    lib = ctypes.CDLL(str(path))
    assert lib.kiln_test_triple(5) == 15


def test_planted_or_unsafe_library_is_rebuilt(cache):
    path = build.build_shared(SRC, name="plant")
    meta = path.with_name(path.name.split(".", 1)[0] + ".json")

    def rebuilt() -> bool:
        before = build.stats()
        assert build.build_shared(SRC, name="plant") == path
        return _delta(before, "builds") == 1

    # a planted file with no metadata
    meta.unlink()
    path.write_bytes(b"\x7fELF planted")
    assert rebuilt()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == _meta(path)["sha256"]
    # metadata matching planted bytes but recorded for another key
    path.write_bytes(b"planted again")
    record = _meta(path)
    record.update(sha256=hashlib.sha256(b"planted again").hexdigest(), key="0" * 64)
    meta.write_text(json.dumps(record))
    assert rebuilt()
    # intact bytes, but writable by others
    os.chmod(path, 0o777)
    assert rebuilt()
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o022 == 0
    # intact and safe: a hit
    assert not rebuilt()


def test_concurrent_threads_build_once(cache):
    src = _unique(SRC)
    barrier = threading.Barrier(2)
    results: list = [None, None]

    def work(i: int) -> None:
        barrier.wait()
        results[i] = build.load_library(src, name="threads")

    before = build.stats()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results[0] is not None and results[0] is results[1]
    assert _delta(before, "builds") == 1
    assert len(list((cache / "so").glob("threads-*.so"))) == 1
    assert results[0].kiln_test_triple(2) == 6


_CHILD = textwrap.dedent("""
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("kiln_build_child", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src = sys.stdin.read()
    path = mod.build_shared(src, name="procs")
    print(json.dumps({"path": str(path), "builds": mod.stats()["builds"]}))
""")


def test_concurrent_processes_build_once(cache):
    src = SRC + "int kiln_test_procs(void) { return 1; }\n"
    env = {**os.environ, "KILN_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, build.__file__],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    for p in procs:
        p.stdin.write(src)
        p.stdin.close()
    outs = []
    for p in procs:
        p.wait(120)
        err = p.stderr.read()
        assert p.returncode == 0, err
        outs.append(json.loads(p.stdout.read()))
    assert outs[0]["path"] == outs[1]["path"]
    assert outs[0]["builds"] + outs[1]["builds"] == 1
    libs = list((cache / "so").glob("procs-*"))
    assert sorted(p.suffix for p in libs) == [".json", ".lock", ".so"]
    before = build.stats()
    assert str(build.build_shared(src, name="procs")) == outs[0]["path"]
    assert _delta(before, "hits") == 1


def _tree_size(cache: pathlib.Path) -> int:
    return sum(p.stat().st_size for d in ("so", "failed") if (cache / d).exists()
               for p in (cache / d).iterdir() if p.is_file())


def test_lru_eviction(cache, monkeypatch):
    template = "int kiln_test_lru(void) {{ return {}; }}\n"
    a = build.build_shared(template.format(1), name="lru")
    b = build.build_shared(template.format(2), name="lru")
    now = time.time()
    for path, age in ((a, 300), (b, 200)):
        for f in _entry_files(path):
            os.utime(f, (now - age, now - age))
    build.build_shared(template.format(1), name="lru")  # hit: `a` is now the newest
    size_b = sum(f.stat().st_size for f in _entry_files(b))
    total_after = _tree_size(cache) + size_b  # the next build adds an entry like b
    # over the cap after the build; evicting one entry gets under 80% of it
    cap = int(((total_after - size_b) / 0.8 + total_after) / 2)
    assert (total_after - size_b) / 0.8 < cap < total_after
    monkeypatch.setenv("KILN_CACHE_MAX_BYTES", str(cap))
    before = build.stats()
    c = build.build_shared(template.format(3), name="lru")
    assert _delta(before, "evictions") == 1
    assert not b.exists() and not _entry_files(b)
    assert a.exists() and c.exists()
    assert _tree_size(cache) <= 0.8 * cap


def test_compile_error_message(cache):
    src = "int kiln_test_broken(void) { return kiln_undeclared_thing; }\n"
    before = build.stats()
    with pytest.raises(build.BuildError) as info:
        build.build_shared(src, name="broken")
    msg = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert "kiln_undeclared_thing" in msg and "error" in msg
    saved = info.value.source_path
    assert saved is not None and str(saved) in msg and saved.read_text() == src
    assert _delta(before, "failures") == 1
    assert not list((cache / "so").glob("broken-*.so"))


def test_cc_env_var_honoured(cache, tmp_path, monkeypatch):
    real = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    sh = shutil.which("sh")
    if real is None or sh is None:
        pytest.skip("needs cc and sh on PATH")
    log = tmp_path / "cc.log"
    wrapper = tmp_path / "my-cc"
    wrapper.write_text(f'#!{sh}\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", f"{wrapper} -DKILN_VIA_CC=1")  # a command with arguments
    assert build.find_compiler() == f"{wrapper} -DKILN_VIA_CC=1"
    assert str(wrapper) in build.compiler_identity()
    src = "#ifndef KILN_VIA_CC\n#error CC arguments not passed\n#endif\n" + SRC
    path = build.build_shared(src, name="viacc")
    assert any("-shared" in line and "viacc" in line for line in log.read_text().splitlines())
    assert ctypes.CDLL(str(path)).kiln_test_triple(3) == 9
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert build.find_compiler() is None
    with pytest.raises(build.CompilerNotFound):
        build.build_shared(SRC)
    monkeypatch.delenv("CC")
    assert build.find_compiler() is not None


EXT_SRC = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *add(PyObject *self, PyObject *args) {
  long a, b;
  if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
  return PyLong_FromLong(a + b);
}

static PyMethodDef methods[] = {{"add", add, METH_VARARGS, "a + b"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "kiln_test_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_kiln_test_ext(void) { return PyModule_Create(&def); }
"""


def test_build_extension(cache):
    src = _unique(EXT_SRC)
    before = build.stats()
    mod = build.build_extension(src, "kiln_test_ext")
    assert mod.__name__ == "kiln_test_ext"
    assert mod.add(2, 40) == 42
    assert _delta(before, "builds") == 1
    assert build.build_extension(src, "kiln_test_ext") is mod
    assert _delta(before, "memory_hits") == 1
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert len([p for p in (cache / "so").glob("kiln_test_ext-*") if p.name.endswith(suffix)]) == 1


def test_dump_c(cache, monkeypatch, capsys):
    monkeypatch.setenv("KILN_DUMP", "passes,c")
    src = "int kiln_test_dumped(void) { return 17; }\n"
    build.build_shared(src, name="dump")
    err = capsys.readouterr().err
    assert "kiln: C source of dump-" in err and "kiln_test_dumped" in err
    assert "compiled in" in err and " ms " in err
    build.build_shared(src, name="dump")
    err = capsys.readouterr().err
    assert "kiln_test_dumped" in err and "cache hit" in err and "compiled in" not in err
    monkeypatch.setenv("KILN_DUMP", "passes")
    build.build_shared(src, name="dump")
    assert "kiln_test_dumped" not in capsys.readouterr().err


def test_translation_units_build_in_parallel_and_link(cache):
    common = f"/* {uuid.uuid4().hex} */\nstatic inline int helper(int x) {{ return 2 * x; }}\n"
    src = (common + build.UNIT_MARK + "\nint kiln_u0(int x) { return helper(x) + 1; }\n" +
           build.UNIT_MARK + "\nint kiln_u1(int x);\nint kiln_u1(int x) { return helper(x) + 2; }\n")
    lib = build.load_library(src, name="units")
    for name, want in (("kiln_u0", 21), ("kiln_u1", 22)):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        assert fn(10) == want


def test_translation_unit_error_names_the_unit(cache):
    src = ("static int ok(void) { return 1; }\n" + build.UNIT_MARK +
           "\nint kiln_fine(void) { return ok(); }\n" + build.UNIT_MARK +
           "\nint kiln_broken_unit(void) { return kiln_undeclared_in_unit; }\n")
    with pytest.raises(build.BuildError) as info:
        build.build_shared(src, name="brokenunit")
    assert "kiln_undeclared_in_unit" in str(info.value)


def test_large_programs_render_as_units():
    import numpy as np

    import kiln
    import kiln.numpy as jnp
    x = np.ones((8, 8), np.float32)

    def f(x):
        for k in range(40):
            x = jnp.sum(jnp.tanh(x * (k + 1.0)), axis=0, keepdims=True) + x
        return x
    text = kiln.jit(f).lower(x).compile().as_text()
    from kiln.compiler.render.render_c import CRenderer
    if CRenderer.build_units > 1:
        assert text.count(build.UNIT_MARK) == CRenderer.build_units
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x)), np.asarray(f(x)), rtol=1e-5)


def test_serial_units_build_the_same_library(cache):
    src = (f"/* {uuid.uuid4().hex} */\n" + build.UNIT_MARK + "\nint kiln_s0(void) { return 3; }\n" +
           build.UNIT_MARK + "\nint kiln_s1(void) { return 4; }\n")
    with build.serial_units():
        path = build.build_shared(src, name="serial")
    assert build.build_shared(src, name="serial") == path     # same key: a cache hit
    lib = ctypes.CDLL(str(path))
    assert lib.kiln_s0() + lib.kiln_s1() == 7


def test_small_loops_compile_without_the_vectorizer():
    """Functions with only small loops are marked KILN_SMALL (no loop vectorizer, peeling
    or unrolling: build time), large ones are not; both compute the same values."""
    import numpy as np

    import kiln
    import kiln.numpy as jnp
    from kiln.compiler.render.render_c import SMALL_ELEMENTS

    def f(x):
        return jnp.exp(x) * 2.0 + jnp.sum(jnp.tanh(x), axis=-1, keepdims=True)

    r = np.random.default_rng(3)
    small = r.standard_normal((8, 10)).astype(np.float32)
    large = r.standard_normal((SMALL_ELEMENTS // 64, 128)).astype(np.float32)
    text_small = kiln.jit(f).lower(small).compile().as_text()
    text_large = kiln.jit(f).lower(large).compile().as_text()
    assert "KILN_SMALL void seg" in text_small
    assert "KILN_SMALL void seg" not in text_large
    for x in (small, large):
        want = np.exp(x.astype(np.float64)) * 2 + np.tanh(x.astype(np.float64)).sum(-1, keepdims=True)
        np.testing.assert_allclose(np.asarray(kiln.jit(f)(x)), want, rtol=2e-5, atol=2e-5)
