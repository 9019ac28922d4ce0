"""The build cache trusts only directories nobody else can write (issue 25).

A cache root, or a directory under it, owned by another user or writable by group or
others is refused with one warning naming the path, the cause and the fix; libraries then
go to a private temporary directory removed at exit. Files are used through directory
descriptors (a directory swapped in after the check is never looked at), and a library
that matches its hash but does not load is rebuilt once.
"""
import ctypes
import json
import os
import pathlib
import stat
import subprocess
import sys
import uuid
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu
from kiln.compiler.build import build

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid") or build.find_compiler() is None,
                                reason="needs POSIX and a C compiler")

NOBODY = 65534


def _source(value: int = 3) -> str:
    tag = uuid.uuid4().hex
    return (f"/* {tag} */\nint kiln_test_value(void) {{ return {value}; }}\n")


def _value(lib) -> int:
    lib.kiln_test_value.restype = ctypes.c_int
    return lib.kiln_test_value()


@pytest.fixture
def fresh(monkeypatch):
    """A clean slate of the process-wide state the cache keeps (warnings, fallbacks)."""
    monkeypatch.setattr(build, "_warned", set())
    monkeypatch.setattr(build, "_fallback", {})
    monkeypatch.setattr(build, "_libraries", {})
    monkeypatch.delenv("KILN_CACHE_MAX_BYTES", raising=False)
    monkeypatch.delenv("KILN_DUMP", raising=False)
    monkeypatch.setattr(cpu, "_warned_faults", set())


def _foreign(path: pathlib.Path, monkeypatch) -> str:
    """Make ``path`` another user's: chown as root, else pretend we are someone else."""
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
        return f"owned by uid {NOBODY}"
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 1)
    return f"owned by uid {real}"


def _kiln_warnings(record) -> list[str]:
    return [str(w.message) for w in record if str(w.message).startswith("kiln:")]


def test_foreign_root_is_refused_with_one_warning(tmp_path, monkeypatch, fresh):
    root = tmp_path / "shared-cache"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o777)
    cause = _foreign(root, monkeypatch)
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        path = build.build_shared(_source())
        lib = build.load_library(_source(7))
        build.build_shared(_source())
    msgs = _kiln_warnings(record)
    assert len(msgs) == 1, msgs
    assert str(root) in msgs[0] and cause in msgs[0] and "KILN_CACHE_DIR" in msgs[0]
    assert "chmod 700" in msgs[0] and "private temporary directory" in msgs[0]
    assert _value(lib) == 7
    assert not str(path).startswith(str(root))      # nothing of ours in their directory
    assert not (root / "so").exists()
    private = path.parent.parent
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
    assert build.cache_dir() == private


def test_group_writable_root_is_refused(tmp_path, monkeypatch, fresh):
    root = tmp_path / "loose"
    root.mkdir()
    os.chmod(root, 0o775)
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    with pytest.warns(RuntimeWarning, match=r"writable by group or others \(mode 0775\)"):
        lib = build.load_library(_source(11))
    assert _value(lib) == 11
    assert not (root / "so").exists()


def test_foreign_so_directory_is_refused(tmp_path, monkeypatch, fresh):
    root = tmp_path / "mine"
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    build.build_shared(_source())
    cause = _foreign(root / "so", monkeypatch)
    with pytest.warns(RuntimeWarning) as record:
        lib = build.load_library(_source(5))
    msgs = _kiln_warnings(record)
    assert len(msgs) == 1 and str(root / "so") in msgs[0] and cause in msgs[0]
    assert _value(lib) == 5


def test_symlinked_so_directory_is_refused(tmp_path, monkeypatch, fresh):
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (root / "so").symlink_to(elsewhere)
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    with pytest.warns(RuntimeWarning, match="symbolic link"):
        lib = build.load_library(_source(9))
    assert _value(lib) == 9
    assert list(elsewhere.iterdir()) == []


def test_directory_swapped_after_the_check_is_not_used(tmp_path, monkeypatch, fresh):
    """What is loaded is what was checked: the name goes through the directory's fd."""
    root = tmp_path / "root"
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    src = _source(1)
    built = build._build(src, extra_flags=(), include_dirs=(), libraries=(), name="kiln",
                         suffix=".so", key_extra=())
    try:
        if built.load_path() == str(built.path):
            pytest.skip("no /proc/<pid>/fd on this system")
        planted = build.build_shared(_source(666))
        os.rename(root, tmp_path / "moved")          # swap the whole tree...
        (root / "so").mkdir(parents=True)
        bad = (tmp_path / "moved" / "so" / planted.name).read_bytes()
        (root / "so" / built.path.name).write_bytes(bad)  # ...with another library
        lib = ctypes.CDLL(built.load_path())
        assert _value(lib) == 1
    finally:
        built.close()


def test_library_that_does_not_load_is_rebuilt_once(tmp_path, monkeypatch, fresh):
    root = tmp_path / "root"
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    src = _source(42)
    path = build.build_shared(src)
    junk = b"\x7fELF but not a library" * 10
    path.write_bytes(junk)
    meta = path.with_suffix(".json")
    record = json.loads(meta.read_text())
    record["sha256"] = __import__("hashlib").sha256(junk).hexdigest()
    record["size"] = len(junk)
    meta.write_text(json.dumps(record))
    before = build.stats()["builds"]
    lib = build.load_library(src)
    assert _value(lib) == 42
    assert build.stats()["builds"] == before + 1
    assert path.read_bytes() != junk


def test_jit_under_a_foreign_root_gives_numpy_results(tmp_path, monkeypatch, fresh):
    root = tmp_path / "theirs"
    root.mkdir()
    os.chmod(root, 0o777)
    _foreign(root, monkeypatch)
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    x = np.linspace(-2.0, 2.0, 33, dtype=np.float32)
    scale = float(np.random.default_rng().integers(2, 1000))   # a program not built yet
    f = kiln.jit(lambda v: jnp.tanh(v) * scale + v * v)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = np.asarray(f(x))
    msgs = _kiln_warnings(record)
    assert len(msgs) == 1 and str(root) in msgs[0], msgs
    np.testing.assert_allclose(out, np.tanh(x) * np.float32(scale) + x * x, rtol=2e-6)


_EXIT_CHILD = r"""
import os, sys, warnings
import numpy as np
import kiln, kiln.numpy as jnp
from kiln.compiler.build import build
warnings.simplefilter("ignore")
print(build.cache_dir(), flush=True)
f = kiln.jit(lambda v: jnp.sin(v) * 3.5 + 1.0)
print(float(np.asarray(f(np.float32(0.5)))), flush=True)
"""


def test_private_directory_is_removed_at_exit(tmp_path, fresh):
    root = tmp_path / "open"
    root.mkdir()
    os.chmod(root, 0o777)
    env = {**os.environ, "KILN_CACHE_DIR": str(root), "KILN_COMPILE": "sync",
           "PYTHONPATH": str(pathlib.Path(build.__file__).parents[3])}
    proc = subprocess.run([sys.executable, "-c", _EXIT_CHILD], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    private, value = proc.stdout.split()
    assert private != str(root) and not os.path.exists(private)
    assert float(value) == pytest.approx(np.sin(np.float32(0.5)) * 3.5 + 1.0, rel=1e-6)


def test_random_kernels_use_the_checked_cache(tmp_path, monkeypatch, fresh):
    """kiln.random's native kernels are built by the same cache: nothing is written
    to, or loaded from, a root someone else owns."""
    from kiln.random import _native
    root = tmp_path / "theirs"
    root.mkdir()
    os.chmod(root, 0o777)
    _foreign(root, monkeypatch)
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    monkeypatch.delenv("KILN_DISABLE_NATIVE", raising=False)
    monkeypatch.setattr(_native, "_state", {})
    with pytest.warns(RuntimeWarning, match="not using the cache directory"):
        lib = _native.lib()
    assert lib is not None and list(root.iterdir()) == []
    got = np.asarray(kiln.random.normal(kiln.random.PRNGKey(3), (4096,)))
    monkeypatch.setenv("KILN_DISABLE_NATIVE", "1")       # NumPy's kernels: same bits
    monkeypatch.setattr(_native, "_state", {})
    assert _native.lib() is None
    want = np.asarray(kiln.random.normal(kiln.random.PRNGKey(3), (4096,)))
    np.testing.assert_array_equal(got, want)


def test_group_writable_umask_still_caches(tmp_path, monkeypatch, fresh):
    """The compiler creates its output per the umask (0775 under umask 002): kiln makes
    it 0700 before recording it, so the entry is kept and found again."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    old = os.umask(0o002)
    try:
        src = _source(13)
        path = build.build_shared(src)
        before = build.stats()["hits"]
        assert build.build_shared(src) == path
    finally:
        os.umask(old)
    assert build.stats()["hits"] == before + 1
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
