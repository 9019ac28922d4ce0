"""The shared part of program sources (before ``build.PCH_MARK``) is compiled once into a
gcc precompiled header in the cache, built beside the first program's units; later
programs include it. The library's key stays the full source's."""
from __future__ import annotations

import ctypes
import shutil
import uuid

import pytest

from kiln.compiler.build import build

pytestmark = pytest.mark.skipif(
    build.find_compiler() is None or "clang" in build.compiler_identity().lower(),
    reason="needs gcc")

HEAD = ("#include <math.h>\n#include <stdint.h>\n"
        "static inline int kiln_head_twice(int x) { return 2 * x; }\n")


def _src(k: int, head: str = HEAD) -> str:
    return (f"{head}{build.PCH_MARK}\n/* {uuid.uuid4().hex} */\n"
            f"int kiln_pch_f(int x) {{ return kiln_head_twice(x) + {k}; }}\n")


def _call(path, x: int) -> int:
    lib = ctypes.CDLL(str(path))
    lib.kiln_pch_f.argtypes = [ctypes.c_int]
    return lib.kiln_pch_f(x)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("KILN_CACHE_DIR", str(d))
    monkeypatch.delenv("KILN_PCH", raising=False)
    monkeypatch.delenv("KILN_CFLAGS", raising=False)
    return d


def _logging_cc(tmp_path, monkeypatch):
    real, sh = shutil.which("cc") or shutil.which("gcc"), shutil.which("sh")
    if real is None or sh is None:
        pytest.skip("needs cc and sh")
    log = tmp_path / "cc.log"
    wrapper = tmp_path / "logcc"
    wrapper.write_text(f'#!{sh}\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    return log


def test_first_build_makes_the_header_later_ones_use_it(cache, tmp_path, monkeypatch):
    log = _logging_cc(tmp_path, monkeypatch)
    p1 = build.build_shared(_src(1), name="pch1")
    gch = list((cache / "so").glob("kiln_pch-*.h.gch"))
    assert len(gch) == 1 and gch[0].stat().st_size > 0
    assert (cache / "so" / gch[0].name[:-4]).read_text() == HEAD
    assert _call(p1, 5) == 11
    log.write_text("")
    p2 = build.build_shared(_src(2), name="pch2")
    lines = [line for line in log.read_text().splitlines() if "pch2" in line]
    assert lines and all("c-header" not in line for line in lines)
    # the units are given the cache's directory (through our descriptor where /proc has
    # one), where the header is
    assert any(" -I/proc/" in line or f" -I{cache / 'so'}" in line for line in lines)
    assert _call(p2, 5) == 12


def test_key_does_not_depend_on_the_header(cache, tmp_path, monkeypatch):
    src = _src(3)
    build.build_shared(_src(4), name="warm")            # the header exists from here on
    with_pch = build.build_shared(src, name="k")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "other"))
    monkeypatch.setenv("KILN_PCH", "0")
    without = build.build_shared(src, name="k")
    assert with_pch.name == without.name
    assert not list((tmp_path / "other" / "so").glob("kiln_pch-*"))
    assert _call(with_pch, 1) == _call(without, 1) == 5


def test_damaged_header_falls_back(cache):
    build.build_shared(_src(5), name="first")
    (gch,) = (cache / "so").glob("kiln_pch-*.h.gch")
    gch.write_bytes(b"gpch" + b"\0" * 64)                # not a header gcc can use
    p = build.build_shared(_src(6), name="second")
    assert _call(p, 2) == 10


def test_sources_without_the_mark_are_compiled_as_they_are(cache):
    p = build.build_shared(f"/* {uuid.uuid4().hex} */\nint kiln_pch_f(int x) "
                           "{ return x; }\n", name="plain")
    assert _call(p, 7) == 7
    assert not list((cache / "so").glob("kiln_pch-*"))


def test_background_builds_do_not_make_the_header(cache):
    """A build on the tiered mode's background thread keeps to one core: it does not
    start the header's build beside it (the next foreground build does)."""
    with build.serial_units():
        p = build.build_shared(_src(8), name="bg")
    assert _call(p, 1) == 10
    assert not list((cache / "so").glob("kiln_pch-*"))
    build.build_shared(_src(9), name="fg")
    assert list((cache / "so").glob("kiln_pch-*.h.gch"))
