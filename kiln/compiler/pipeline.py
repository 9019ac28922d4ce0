"""The compiler's whole path, in order: a closed jaxpr becomes a loaded native program.

::

    ClosedJaxpr ──passes/──▶ optimised jaxpr ──lower/──▶ Program (fused kernels, buffers)
                ──render/──▶ C source ──build/──▶ shared library ──▶ Executable

Each stage lives in its own folder and imports only the stages before it (and the data
types of ``lower/program.py``). The backend (``kiln.backends.cpu``) decides *when* to
compile (sync or tiered, caching, faults); this module is *what* compiling is.
"""
from __future__ import annotations

import logging
import time

from kiln.compiler.build import loaded
from kiln.compiler.build.build import load_library
from kiln.compiler.build.executable import Executable
from kiln.compiler.lower import blas_support
from kiln.compiler.lower.lower import lower
from kiln.compiler.lower.plan_buffers import plan
from kiln.compiler.passes.passes import optimize
from kiln.compiler.render import cmath_support
from kiln.compiler.render.render_c import CRenderer
from kiln.config import config
from kiln.profiler import _recorder as _profiler

logger = logging.getLogger("kiln")

# Generated code relies on two's-complement wrap-around of signed integers (XLA's).
_PROGRAM_FLAGS = ["-fwrapv"]


def compile_program(closed, name: str = "jit") -> Executable | None:
    """Compile ``closed`` (a ``ClosedJaxpr``) to a loaded native program.

    Args:
      closed: the program, with its constants.
      name: the program's name, for logs, the profiler and the library's file name.

    Returns:
      An :class:`~kiln.compiler.build.executable.Executable`, or ``None`` when nothing in
      the program runs natively (the caller runs it on the reference backend). The
      executable's ``fallback`` is left for the caller to set when ``exe.prog.guards``.
    """
    if config.jax_log_compiles:
        logger.warning("Compiling jit(%s) with global shapes and types %s.", name,
                       tuple(closed.in_avals))
    t0 = time.perf_counter()
    from kiln.core.physical import physical_closed
    closed = physical_closed(closed)    # extended dtypes compile as their storage dtypes
    # 1. passes: inlining, simplification, folding, CSE, DCE over the jaxpr.
    opt = optimize(closed)
    # 2. lower: fused kernels and the steps around them; then buffer planning.
    with _profiler.span("lower", "compile"):
        prog = lower(opt)
    if prog.native_steps == 0:
        if config.jax_log_compiles:
            logger.warning("Finished jaxpr to C conversion jit(%s) in %s sec: nothing to "
                           "compile natively, it runs on the reference backend", name,
                           time.perf_counter() - t0)
        return None
    plan(prog)
    # 3. render: C source for the program's native steps.
    src_math, fns = cmath_support.math()
    renderer = CRenderer(src_math, fns, blas_support.declarations())
    with _profiler.span("render_c", "compile"):
        source, segments = renderer.render(prog)
    # 4. build: compile and load the shared library (disk-cached), wrap it.
    t1 = time.perf_counter()
    with _profiler.span("build", "compile", program=name):
        lib = load_library(source, extra_flags=_PROGRAM_FLAGS, name="kiln")
        while not loaded.hold(lib):     # closed meanwhile: open it again
            lib = load_library(source, extra_flags=_PROGRAM_FLAGS, name="kiln")
    t2 = time.perf_counter()
    try:
        blas_support.init(lib)
        exe = Executable(prog, lib, segments, source, build_seconds=t2 - t1)
    except BaseException:
        loaded.release(lib)
        raise
    loaded.release_when_dead(exe, lib)
    exe.name, exe.where = name, _profiler.source_of(closed, name)
    if config.jax_log_compiles:
        logger.warning("Finished jaxpr to C conversion jit(%s) in %s sec (%d native steps)",
                       name, t1 - t0, prog.native_steps)
        logger.warning("Finished C compilation of jit(%s) in %s sec", name, t2 - t1)
    return exe
