"""``jax.debug.visualize_sharding``/``visualize_array_sharding`` (drawn with ``rich`` as
JAX draws them; the expected tables are JAX 0.10.2's output) and the donation platform
list JAX's test helpers read."""
import contextlib
import io

import numpy as np
import pytest

import kiln
from kiln import debug
from kiln.sharding import Mesh, NamedSharding, PartitionSpec

pytest.importorskip("rich")


class _Dev:
    def __init__(self, i):
        self.platform, self.id = "cpu", i


def _draw(shape, mesh_shape, names, spec, **kw):
    devs = np.array([_Dev(i) for i in range(int(np.prod(mesh_shape)))]).reshape(mesh_shape)
    s = NamedSharding(Mesh(devs, names), PartitionSpec(*spec))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        debug.visualize_sharding(shape, s, **kw)
    return buf.getvalue()


def test_one_block_1d_and_scale():
    assert _draw((5,), (1,), ["x"], ["x"]) == "┌───────┐\n│ CPU 0 │\n└───────┘\n"
    assert _draw((5,), (1,), ["x"], ["x"], scale=8.) == (
        "┌" + "─" * 38 + "┐\n│" + " " * 16 + "CPU 0" + " " * 17 + "│\n└" + "─" * 38 + "┘\n")


def test_grid_and_replicated_blocks_name_every_device():
    blank = "│          │          │\n"
    assert _draw((8, 8), (2, 2), ["x", "y"], ["x", "y"]) == (
        "┌──────────┬──────────┐\n" + blank + "│  CPU 0   │  CPU 1   │\n" + blank * 2
        + "├──────────┼──────────┤\n" + blank + "│  CPU 2   │  CPU 3   │\n" + blank * 2
        + "└──────────┴──────────┘\n")
    out = _draw((8, 8), (4, 2), ["x", "y"], [None, "y"]).splitlines()
    assert out[0] == "┌───────────┬───────────┐"
    assert out[5] == "│CPU 0,2,4,6│CPU 1,3,5,7│" and len(out) == 11   # 9 lines high
    with pytest.raises(ValueError, match="only works for shapes with 1 and 2 dimensions"):
        _draw((2, 2, 2), (1,), ["x"], ["x"])


def test_visualize_array_sharding_of_a_concrete_array():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        debug.visualize_array_sharding(kiln.numpy.zeros(4))
    assert "CPU 0" in buf.getvalue()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):     # traced: drawn when the jit compiles
        kiln.jit(debug.visualize_array_sharding)(kiln.numpy.zeros(4))
    assert "CPU 0" in buf.getvalue()


def test_platforms_with_donation_is_cpu():
    from kiln.interpreters import mlir
    assert mlir._platforms_with_donation == ["cpu"]


def test_debug_log_sends_a_record_to_jax_debugging_logger():
    import logging
    records = []

    class Handler(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("jax._src.debugging")
    handler = Handler()
    logger.addHandler(handler)
    try:
        def f(x):
            x = x * x
            debug.log("x={}", x)
            return x * x
        assert int(kiln.jit(f)(2)) == 16
        debug.log("eager {y}", y=kiln.numpy.float32(1.5))
    finally:
        logger.removeHandler(handler)
    assert [r.msg for r in records] == ["x=4", "eager 1.5"]
    assert records[0].levelno == logging.INFO and records[0].pathname == __file__
