"""kiln's hand-written C in ``kiln/compiler/csrc``: found where kiln is installed, shipped
as package data, and built by the one build path into the one cache.

* every ``.c``/``.h`` file is read by :mod:`kiln.compiler.csrc` and matched by the
  ``[tool.setuptools.package-data]`` globs of ``pyproject.toml``;
* a copy of the package elsewhere (an installed kiln) reads its own files;
* quoted includes are expanded, so a library's cache key covers every file it uses;
* no module of kiln holds C text in a Python string any more;
* kiln.random's and the SPMD barrier's native libraries are built by
  ``kiln.compiler.build.build`` into ``$XDG_CACHE_HOME/kiln/so`` (no ``$KILN_CACHE_DIR``),
  beside the compiler's own libraries.
"""
import ast
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys

import pytest

import kiln
from kiln.compiler import csrc
from kiln.compiler.build import build

_PKG = pathlib.Path(kiln.__file__).parent
_CSRC = _PKG / "compiler" / "csrc"
_FILES = sorted(p.name for p in _CSRC.iterdir() if p.suffix in (".c", ".h"))


def test_every_file_reads_and_is_package_data():
    tomllib = pytest.importorskip("tomllib")
    pyproject = _PKG.parent / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("not a source checkout")
    data = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]
    globs = data["kiln.compiler.csrc"]
    assert len(_FILES) >= 14
    for name in _FILES:
        assert any(pathlib.PurePath(name).match(g) for g in globs), name
        assert csrc.text(name) == (_CSRC / name).read_text(encoding="utf-8")
        assert csrc.text(name) is csrc.text(name)        # read once
    with pytest.raises(FileNotFoundError):
        csrc.text("no_such_file.h")


def test_python_constants_match_their_c():
    """Values Python keeps beside a C file agree with it: fexp32's overflow bound, the
    BLAS split mark, the parameter blas.py defines for the glue library."""
    from kiln.compiler.build import blas
    from kiln.compiler.render import fast_math
    assert f"!(x <= {fast_math.FIN_MAX})" in csrc.text("fast_exp.h")
    assert csrc.text("blas_program.h").count(blas.DEFINITIONS_MARK) == 1
    assert "KILN_PARALLEL_MIN_MACS" in csrc.text("blas_glue.c")


def test_includes_are_expanded_into_the_source():
    src = csrc.source("kiln_random.c")
    assert '#include "' not in src
    assert csrc.text("xla_math.h") in src and csrc.text("threefry.h") in src
    # The same text as the file with each include line replaced: a change to a header
    # changes the source, and so the library's cache key.
    raw = csrc.text("kiln_random.c")
    # (xla_complex.h includes its float/double template twice)
    complex_h = csrc.text("xla_complex.h").replace('#include "xla_complex_t.h"\n',
                                                    csrc.text("xla_complex_t.h"))
    assert src == raw.replace('#include "threefry.h"\n', csrc.text("threefry.h")) \
        .replace('#include "xla_math.h"\n', csrc.text("xla_math.h")) \
        .replace('#include "xla_asin_acos32.h"\n', csrc.text("xla_asin_acos32.h")) \
        .replace('#include "xla_complex.h"\n', complex_h)
    if build.find_compiler() is None:
        return
    flags = ["-O2"]
    assert build._key(src, flags, (), ()) != build._key(src.replace("0x1BD11BDAu", "0u"),
                                                         flags, (), ())


def test_found_from_an_installed_copy(tmp_path):
    """A kiln copied elsewhere (as pip installs it) reads the C beside its own modules."""
    site = tmp_path / "site"
    shutil.copytree(_PKG, site / "kiln", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import kiln.compiler.csrc as c, importlib.resources as r\n"
            "print(r.files('kiln.compiler.csrc'))\n"
            "print(len(c.source('kiln_random.c')), len(c.text('prelude.h')))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    where, sizes = proc.stdout.splitlines()
    assert pathlib.Path(where).resolve() == (site / "kiln" / "compiler" / "csrc").resolve()
    assert sizes == f"{len(csrc.source('kiln_random.c'))} {len(csrc.text('prelude.h'))}"


_C_WORDS = re.compile(r"#include\s*[<\"]|#define\s|static\s+inline\s|^\s*void\s+\w+\(",
                      re.MULTILINE)


def test_no_c_text_left_in_python_strings():
    """Fixed C lives in csrc: a Python string of several lines that reads as C (includes,
    defines, function definitions) is a regression. Docstrings, and generated C
    (f-strings), are not looked at."""
    found = []
    for path in _PKG.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                  ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if id(node) not in docs and isinstance(node, ast.Constant) \
                    and isinstance(node.value, str) \
                    and node.value.count("\n") >= 4 and _C_WORDS.search(node.value):
                found.append(f"{path.relative_to(_PKG.parent)}:{node.lineno}")
    assert found == []


_CHILD = r"""
import pathlib, sys
from kiln.compiler.build import build
from kiln.random import _native
from kiln.parallel import native
assert _native.lib() is not None, "kiln_random did not build"
print(build.cache_dir())
print(native.available())
"""


@pytest.mark.skipif(build.find_compiler() is None, reason="no C compiler")
def test_native_libraries_land_in_the_shared_cache(tmp_path):
    """kiln_random and kiln_spmd are built by kiln.compiler.build.build into the cache it uses
    for every program: ``$XDG_CACHE_HOME/kiln/so`` when ``$KILN_CACHE_DIR`` is unset,
    each library beside its hash record; nothing under ``$HOME``."""
    xdg, home = tmp_path / "xdg", tmp_path / "home"
    xdg.mkdir(mode=0o700)
    home.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items()
           if k not in ("KILN_CACHE_DIR", "KILN_DISABLE_NATIVE", "KILN_CFLAGS")}
    env.update(XDG_CACHE_HOME=str(xdg), HOME=str(home),
               PYTHONPATH=str(_PKG.parent) + os.pathsep + env.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _CHILD], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    root, spmd = proc.stdout.split()
    assert pathlib.Path(root) == xdg / "kiln"
    names = sorted(p.name for p in (xdg / "kiln" / "so").iterdir())
    assert any(re.fullmatch(r"kiln_random-[0-9a-f]{32}\.so", n) for n in names), names
    assert any(re.fullmatch(r"kiln_random-[0-9a-f]{32}\.json", n) for n in names), names
    if platform.machine() in ("x86_64", "AMD64") and platform.system() == "Linux":
        assert spmd == "True"
        assert any(re.fullmatch(r"kiln_spmd-[0-9a-f]{32}\.so", n) for n in names), names
    assert list(home.iterdir()) == []


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs the system C compiler")
def test_program_prelude_does_not_pull_in_the_intrinsics_headers():
    """Every program's build parses ``xla_math.h``; ``<immintrin.h>`` alone is ~47,000
    lines (0.13 s of each build), so the per-program prelude reaches the rsqrt estimate
    instructions through gcc's builtins instead."""
    src = csrc.text("prelude.h") + "\n#include <float.h>\n" + csrc.text("xla_math.h")
    cmd = ["cc", "-E", "-march=native", "-fopenmp", "-x", "c", "-"]
    out = subprocess.run(cmd, input=src, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cc -E failed: {out.stderr[:200]}")
    assert "immintrin" not in out.stdout and "xmmintrin" not in out.stdout
    assert len(out.stdout.splitlines()) < 8000


def test_rsqrt_steps_follow_the_processor_vendor():
    """XLA refines float32 rsqrt once on AMD processors and twice elsewhere; the define
    that selects kiln's count is put before every compiled xla_math.h."""
    from kiln.compiler import csrc
    from kiln.compiler.lower import random as lower_random
    with open("/proc/cpuinfo") as f:
        vendors = {ln.split(":", 1)[1].strip() for ln in f if ln.startswith("vendor_id")}
    assert vendors == {csrc.cpu_vendor()}
    want = 1 if vendors == {"AuthenticAMD"} else 2
    assert csrc.cpu_defines() == f"#define KILN_RSQRT_STEPS32 {want}\n"
    pre = "".join(lower_random.preludes("y = xrsqrt32(x);"))
    assert pre.index("#define KILN_RSQRT_STEPS32") < pre.index("xrsqrt32(float x)")
    assert "#ifndef KILN_RSQRT_STEPS32" in csrc.text("xla_math.h")
