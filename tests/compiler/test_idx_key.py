"""Index expressions are interned by their text *and* their symbols' ranges
(``Idx.key``): kernels whose loops share names (``i0``, ``i1``) but not extents get
nodes of their own, so the passes that reason by range (a load's clamp, splitting a loop
by its reads' divisions) see each kernel's own ranges. Interned by text alone, a pad's
read of ``x`` carried an earlier slice's range and was not clamped: it read past ``x``'s
end (a segmentation fault when a page that cannot be read follows ``x``)."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from _bits import compiled_matches_reference  # tests/compiler/_bits.py

import kiln.numpy as jnp
from kiln.compiler.lower.expr import ExprTable
from kiln.compiler.lower.index import Cond, Idx, Sym
from kiln.compiler.lower.program import Buffer, Kernel
from kiln.compiler.lower.walk import idx_of, walk

R = np.random.default_rng(11)


def _foreign_syms(exe):
    """(kernel name, symbol) for each index symbol of a kernel's nodes named like one of
    its loops but with another range (a node made for another kernel)."""
    out = []
    for k in [s for s in exe.prog.steps if isinstance(s, Kernel)]:
        mine = {s.name: s for s in k.syms}
        for e in walk(exe.prog, [e for _, e in k.outs]):
            for i in idx_of(e):
                out += [(k.name, d) for d in i.deps if d.name in mine and d != mine[d.name]]
    return out


def _loads_of(exe, buf_id):
    """The C text of every read of buffer ``buf_id``, in order of kernels."""
    body = exe.source[exe.source.index("/* k"):]
    return re.findall(rf"\bb{buf_id}\[[^;]*\]\)", body)


def test_keys_hold_ranges():
    small, large = Sym("i0", 0, 99), Sym("i0", 0, 1002)
    a, b = Idx.sym(small), Idx.sym(large)
    assert a.c() == b.c() and a.key() != b.key()
    assert Idx.sym(Sym("i0", 0, 99)).key() == a.key()          # same name and range
    j6, j14 = Sym("i1", 0, 5), Sym("i1", 0, 13)
    oa, ob = Idx.sym(j6).mod(2) * 2, Idx.sym(j14).mod(2) * 2
    assert oa.c() == ob.c() and (oa.lo, oa.hi) == (ob.lo, ob.hi) and oa.key() != ob.key()
    assert Cond.in_range(oa, 0, 2).key() != Cond.in_range(ob, 0, 2).key()


def test_table_shares_only_same_ranges():
    t = ExprTable()
    buf = Buffer(0, (1000,), np.dtype(np.float32), "in")
    small, large = Sym("i0", 0, 99), Sym("i0", 0, 1002)
    a = t.load(buf, Idx.sym(small))
    assert t.load(buf, Idx.sym(Sym("i0", 0, 99))) is a
    b = t.load(buf, Idx.sym(large))
    assert b is not a
    assert b.params[2].v.hi == 1002 and a.params[2].v.hi == 99


def test_padded_read_after_a_slice_is_clamped():
    """``x[:100]`` reads ``x`` at ``i0`` over 100; the padding of ``x`` reads it at ``i0``
    over 1003 (under ``i0 < 1000``, but the read is made for every ``i0``). Interned as
    one node, the pad's read carried the slice's range, was not clamped, and read three
    elements past ``x``'s end."""
    x = R.standard_normal(1000).astype(np.float32)

    def f(x):
        return x[:100] * 2.0, jnp.pad(x, (0, 3)) * 3.0

    exe, _ = compiled_matches_reference(f, x)
    assert _foreign_syms(exe) == []
    reads = _loads_of(exe, 0)
    assert reads == ["b0[i0])", "b0[kiln_clampi(i0, 0, 999)])"], reads


def test_plain_read_after_a_padding_is_not_clamped():
    """The other order: the plain ``x * 2`` kernel's read carried the padding's range and
    was clamped for nothing (a clamp per element in a loop that never leaves ``x``)."""
    x = R.standard_normal(1000).astype(np.float32)

    def f(x):
        return jnp.pad(x, (0, 3)) * 3.0, x * 2.0

    exe, _ = compiled_matches_reference(f, x)
    assert _foreign_syms(exe) == []
    reads = _loads_of(exe, 0)
    assert reads == ["b0[kiln_clampi(i0, 0, 999)])", "b0[i0])"], reads


# x's last element is the last byte before a page that cannot be read.
_GUARD_CHILD = r"""
import ctypes, mmap, numpy as np, kiln, kiln.numpy as jnp
from kiln.backends import cpu
page = mmap.PAGESIZE
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
base = libc.mmap(None, 2 * page, 3, 0x22, -1, 0)        # PROT_READ|WRITE, PRIVATE|ANON
assert libc.mprotect(base + page, page, 0) == 0         # PROT_NONE
x = np.ctypeslib.as_array((ctypes.c_float * 1000).from_address(base + page - 4000))
x[:] = np.arange(1000, dtype=np.float32)

def f(x):
    return x[:100] * 2.0, jnp.pad(x, (0, 64)) * 3.0

got = cpu.executable_for(kiln.make_jaxpr(f)(x))([x])
assert np.array_equal(np.asarray(got[1])[:1000], x * 3) and not np.asarray(got[1])[1000:].any()
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mmap/mprotect via libc")
def test_padded_read_stays_inside_its_array():
    """The same program on an array followed by an unreadable page: the unclamped read
    of the padding went past the array's end (a segmentation fault)."""
    p = subprocess.run([sys.executable, "-c", _GUARD_CHILD], env=dict(os.environ),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stderr[-2000:])
