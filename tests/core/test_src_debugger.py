"""``jax._src.debugger`` on kiln (``kiln/_src/debugger/``): JAX's tests drive the ``jdb``
CLI through ``debugger.breakpoint(stdin=..., stdout=..., backend="cli")``."""
import io

import kiln
import kiln.numpy as jnp
from kiln._src import debugger
from kiln._src.debugger import cli_debugger, core


def _io(*commands):
    return io.StringIO("".join(c + "\n" for c in commands)), io.StringIO()


def test_breakpoint_prints_values_under_jit():
    stdin, stdout = _io("p x, y", "c")

    @kiln.jit
    def f(x):
        y = x + 1.0
        debugger.breakpoint(stdin=stdin, stdout=stdout, backend="cli")
        return y

    f(jnp.float32(2.0))
    kiln.effects_barrier()
    assert stdout.getvalue() == ("Entering jdb:\n(jdb) (Array(2., dtype=float32), "
                                 "Array(3., dtype=float32))\n(jdb) ")


def test_module_names():
    assert debugger.breakpoint is kiln.debug.breakpoint is core.breakpoint
    assert core.get_debugger("cli") is cli_debugger.run_debugger
    assert callable(core.register_debugger) and core.DebuggerFrame is not None
