"""Lowering: a jaxpr becomes a :class:`~.program.Program` of fused kernels.

Fusion by index propagation. Each jaxpr variable gets a *node*:

* :class:`BufNode`: the value lives in a buffer (argument, constant, or the output
  of a kernel, reduction, matrix product or island);
* :class:`ConstNode`: a scalar literal, broadcast to any shape for free;
* :class:`LazyNode`: the value is not stored; a consumer asks it for the scalar
  expression at an index (``read``). Elementwise ops and movement ops
  (``broadcast_in_dim``, ``reshape``, ``squeeze``, ``transpose``, ``slice``, ``pad``,
  ``rev``, ``concatenate``, ``iota``, ``dynamic_slice``) make lazy nodes, so their
  work happens inside whichever kernel reads them, with index arithmetic instead
  of data movement.

A lazy node is *materialized* (a :class:`~.program.Kernel` writes it to a buffer)
when it is a program output, when a non-fusible consumer needs it (matrix
product, island), or by the cost rule (:func:`_should_materialize`): a value whose
recomputation costs more than ``CHEAP`` and that would be recomputed (more than one
consumer, or a broadcast that reads each element many times).

Reductions consume lazy operands (elementwise producers fuse into them) and write
a buffer. ``dot_general`` goes to BLAS (:class:`~.program.Gemm`) when large and
floating, otherwise becomes a reduction over the contracting dimensions.

What it must not hold: C text (``render_c.py``), execution (``executable.py``).
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from kiln.compiler.lower.expr import ExprTable, SExpr
from kiln.compiler.lower.index import Cond, Idx, Sym, flat_index, row_major_strides
from kiln.compiler.lower.program import Buffer, Gemm, Island, Kernel, Program, Reduce, Scan, Scatter
from kiln.core.jaxpr import ClosedJaxpr, Literal

# Recomputing a value cheaper than this (in ExprTable cost units) beats storing it.
CHEAP = 4
# Integer/boolean operations that cost nothing when every operand is an index value
# (iota), a constant, or made of those (a mask like ``tril``'s ``iota <= iota``): such a
# value is recomputed wherever it is read, and a value selected by it (``where(mask, s,
# -inf)``) is stored only if the rest of it is expensive.
INDEX_CHEAP = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not", "xor",
                         "select_n", "convert_element_type", "add", "sub", "max", "min"})
# dot_general with fewer multiply-adds than this is a fused reduction, not a BLAS call.
GEMM_MIN_FLOPS = 4096

NATIVE_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float32, np.float64))
FLOAT_DTYPES = frozenset((np.dtype(np.float32), np.dtype(np.float64)))

# Elementwise primitives the renderer knows (see render_c.py), and the params they keep.
ELEMENTWISE = {
    "add": (), "sub": (), "mul": (), "div": (), "neg": (), "max": (), "min": (), "abs": (),
    "sign": (), "floor": (), "ceil": (), "round": ("rounding_method",), "exp": (),
    "exp2": (), "log": (), "log1p": (), "expm1": (), "tanh": (), "logistic": (), "sin": (),
    "cos": (), "tan": (), "asin": (), "acos": (), "atan": (), "sinh": (), "cosh": (),
    "asinh": (), "acosh": (), "atanh": (), "atan2": (), "sqrt": (), "rsqrt": (), "cbrt": (),
    "pow": (), "integer_pow": ("y",), "square": (), "rem": (), "eq": (), "ne": (),
    "lt": (), "le": (), "gt": (), "ge": (), "and": (), "or": (), "xor": (), "not": (),
    "shift_left": (), "shift_right_logical": (), "shift_right_arithmetic": (),
    "select_n": (), "convert_element_type": (), "clamp": (), "is_finite": (), "erf": (),
    "erfc": (), "nextafter": (), "population_count": (), "clz": (), "bitcast_convert_type": (),
    "add_any": (), "erf_inv": (), "lgamma": (), "digamma": (), "bessel_i0e": (),
    "bessel_i1e": (), "fma": (), "zeta": (),
    "polygamma": (), "igamma": (), "igammac": (), "igamma_grad_a": (),
    "random_gamma_grad": (),
}
# Primitives rendered as another one's scalar op (add_any is the gradient's add).
OP_ALIASES = {"add_any": "add", "erf_inv": "xla_erf_inv"}
IDENTITY = frozenset(("stop_gradient", "copy", "copy_p", "optimization_barrier_1", "rounded",
                      "sharding_constraint", "name"))
REDUCTIONS = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min",
              "reduce_prod": "prod", "reduce_and": "and", "reduce_or": "or",
              "reduce_xor": "xor", "argmax": "argmax", "argmin": "argmin",
              "reduce_sum_fma": "sum"}


class Node:
    shape: tuple
    dtype: np.dtype
    cost: int

    def read(self, idxs) -> SExpr:
        raise NotImplementedError

    def read_flat(self, flat: Idx):
        """The element at row-major offset ``flat``, or None if that is not cheap to express."""
        return None


class BufNode(Node):
    """A value stored in ``buf`` (viewed with ``shape``: a reshape of a buffer is free)."""

    def __init__(self, ctx, buf: Buffer, shape=None):
        self.ctx = ctx
        self.buf = buf
        self.shape = tuple(buf.shape if shape is None else shape)
        self.dtype = buf.dtype
        self.cost = 1

    def read(self, idxs):
        return self.read_flat(flat_index(idxs, self.shape))

    def read_flat(self, flat):
        return self.ctx.table.load(self.buf, flat)


class ConstNode(Node):
    def __init__(self, ctx, value, dtype, shape=()):
        self.ctx = ctx
        self.value = np.asarray(value, dtype)[()]
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.cost = 0

    def read(self, idxs):
        return self.ctx.table.const(self.value, self.dtype)

    def read_flat(self, flat):
        return self.read(())


class LazyNode(Node):
    def __init__(self, shape, dtype, read, read_flat=None, cost=1):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self._read = read
        self._read_flat = read_flat
        self.cost = cost

    def read(self, idxs):
        return self._read(list(idxs))

    def read_flat(self, flat):
        return None if self._read_flat is None else self._read_flat(flat)


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


class Lowering:
    """State of lowering one closed jaxpr."""

    def __init__(self):
        self.prog = Program()
        self.table = ExprTable()
        self.prog.expr_source = self.table.source
        self.prog.table = self.table
        self._nsym = 0
        self._nkernel = 0
        # materialize_shared: (id(node), id(step list)) -> (node, steps, BufNode)
        self._shared_bufs: dict = {}

    # -- helpers -------------------------------------------------------------------------------
    def syms(self, shape, prefix="i"):
        return [Sym(f"{prefix}{d}", 0, max(int(n) - 1, 0)) for d, n in enumerate(shape)]

    def new_sym(self, lo, hi, definition: SExpr) -> Sym:
        self._nsym += 1
        s = Sym(f"s{self._nsym}", lo, hi)
        self.prog.sym_defs[s.name] = (s, definition, lo, hi)
        return s

    def kernel_name(self, kind):
        self._nkernel += 1
        return f"{kind}{self._nkernel}"

    def materialize(self, node: Node, kind="tmp") -> BufNode:
        """Write a lazy node to a fresh buffer with a Kernel; return the buffer node."""
        buf = self.prog.new_buffer(node.shape, node.dtype, kind)
        n = _size(node.shape)
        flat_sym = Sym("i0", 0, max(n - 1, 0))
        e = node.read_flat(Idx.sym(flat_sym)) if n > 0 else None
        if e is not None:
            k = Kernel((n,), [flat_sym], [(buf, e)], self.kernel_name("k"))
        elif n > 0 and getattr(node, "pieces", None) is not None:
            self._write_pieces(node, buf)
            return BufNode(self, buf)
        else:
            syms = self.syms(node.shape)
            e = node.read([Idx.sym(s) for s in syms])
            k = Kernel(tuple(node.shape), syms, [(buf, e)], self.kernel_name("k"))
        self.prog.steps.append(k)
        return BufNode(self, buf)

    def _write_pieces(self, node: Node, buf: Buffer):
        """One kernel per piece of a concatenation-like node (``pieces``), each over its
        own region of ``buf``: every element then computes only its own piece's value,
        with the region's index arithmetic, instead of selecting among all the pieces
        (the gradient of ``jnp.split``, a sum of zero-padded pieces, read each piece
        through clamped floor divisions at every element). Each element's expression is
        the one the whole node gives there, so the bits are the same."""
        dim, parts = node.pieces
        strides = tuple(row_major_strides(node.shape))
        for start, size, sub in parts:
            if size == 0:
                continue
            syms = self.syms(sub.shape)
            e = sub.read([Idx.sym(s) for s in syms])
            self.prog.steps.append(Kernel(tuple(sub.shape), syms, [(buf, e)],
                                          self.kernel_name("k"),
                                          Idx.lit(start * strides[dim]), strides))

    def materialize_shared(self, node: Node) -> BufNode:
        """``materialize``, once per node and step list, for consumers that only read the
        buffer (GEMM operands): a value feeding two matrix products (an MLP's output
        cotangent feeds the weight and the input gradients) is written once."""
        key = (id(node), id(self.prog.steps))
        hit = self._shared_bufs.get(key)
        if hit is not None:
            return hit[2]
        out = self.materialize(node)
        self._shared_bufs[key] = (node, self.prog.steps, out)
        return out

    def materialize_shared_as(self, node: Node, perm) -> BufNode:
        """``node`` transposed by ``perm``, written once per (node, perm) and step list (an
        operand packed for two GEMMs, as attention's output cotangent, is stored once)."""
        key = (id(node), tuple(perm), id(self.prog.steps))
        hit = self._shared_bufs.get(key)
        if hit is not None:
            return hit[2]
        out = self.materialize(_transpose_node(node, tuple(perm)))
        self._shared_bufs[key] = (node, self.prog.steps, out)
        return out

    def write_into(self, node: Node, buf: Buffer, offset: Idx | None = None) -> Kernel:
        """A Kernel storing ``node`` into the existing ``buf`` (at ``offset``, an Idx
        added to each row-major position, when given)."""
        n = _size(node.shape)
        flat_sym = Sym("i0", 0, max(n - 1, 0))
        e = node.read_flat(Idx.sym(flat_sym)) if n > 0 else None
        if e is not None:
            k = Kernel((n,), [flat_sym], [(buf, e)], self.kernel_name("k"), offset)
        else:
            syms = self.syms(node.shape)
            e = node.read([Idx.sym(s) for s in syms])
            k = Kernel(tuple(node.shape), syms, [(buf, e)], self.kernel_name("k"), offset)
        self.prog.steps.append(k)
        return k

    @contextlib.contextmanager
    def capture(self):
        """Steps lowered inside the ``with`` go to the yielded list, not the program's."""
        saved = self.prog.steps
        self.prog.steps = []
        try:
            yield self.prog.steps
        finally:
            self.prog.steps = saved

    def new_loop_sym(self, length: int) -> Sym:
        """A loop counter symbol (a C loop variable of a Loop) over ``[0, length)``."""
        self._nsym += 1
        return Sym(f"L{self._nsym}", 0, max(int(length) - 1, 0))

    def as_buffer(self, node: Node, kind="tmp") -> BufNode:
        if isinstance(node, BufNode):
            return node
        return self.materialize(node, kind)


# ------------------------------------------------------------------------------------------
# Elementwise and movement rules: (ctx, eqn, in_nodes) -> Node

def _ew_rule(ctx: Lowering, eqn, ins):
    name = eqn.primitive.name
    out = eqn.outvars[0].aval
    params = {k: eqn.params[k] for k in ELEMENTWISE[name] if k in eqn.params}
    name = OP_ALIASES.get(name, name)
    if "rounding_method" in params:
        params["rounding_method"] = int(params["rounding_method"])
    shape = out.shape
    dtype = out.dtype
    table = ctx.table
    if name == "atan" and dtype in FLOAT_DTYPES:
        # JAX's atan depends on the array's length (xla_math.h, kiln_eager_atan_*): one
        # element is atan2(x, 1), 2 to 49 elements XLA's own approximation, longer arrays
        # the C library's atan (but for XLA's loop remainder, not reproduced here).
        n = int(np.prod(shape))
        params["form"] = "one" if n == 1 else ("short" if n < 50 else "long")
    elif name in ("asinh", "acosh") and dtype == np.float32 and \
            int(np.prod(shape)) <= (15 if name == "asinh" else 18):
        params["form"] = "scalar"   # XLA's scalar code: another contraction (xasinhs32)

    def read(idxs):
        args = [x.read(idxs if x.shape else []) for x in ins]
        return table.op(name, dtype, *args, **params)

    flat_ok = all(isinstance(x, (BufNode, ConstNode)) or x.shape == () or
                  x._read_flat is not None for x in ins)

    def read_flat(flat):
        args = []
        for x in ins:
            a = x.read([]) if x.shape == () else x.read_flat(flat)
            if a is None:
                return None
            args.append(a)
        return table.op(name, dtype, *args, **params)

    from kiln.compiler.lower.expr import EXPENSIVE
    cost = EXPENSIVE.get(name, 1) + sum(x.cost for x in ins if isinstance(x, LazyNode))
    if (name in INDEX_CHEAP and np.dtype(dtype).kind in "biu"
            and all(isinstance(x, ConstNode) or (isinstance(x, LazyNode) and x.cost == 0)
                    for x in ins)):
        # Integer or boolean arithmetic on index values and constants only (a causal
        # mask: iota <= iota): a few vector instructions wherever it is read, no memory.
        cost = 0
    node = LazyNode(shape, dtype, read, read_flat if flat_ok else None, cost)
    if name == "add" and not flat_ok:

        def make(sub_shape, ops):
            return LazyNode(sub_shape, dtype, lambda idxs: table.op(
                name, dtype, *[x.read(idxs if x.shape else []) for x in ops], **params),
                None, cost)
        _ew_pieces(node, ins, make)
    return node


def _broadcast_in_dim(ctx, eqn, ins):
    (x,) = ins[:1]
    shape = tuple(eqn.params["shape"])
    bdims = eqn.params["broadcast_dimensions"]
    if x.shape == ():
        if isinstance(x, ConstNode):
            return ConstNode(ctx, x.value, x.dtype, shape)
        return LazyNode(shape, x.dtype, lambda idxs: x.read([]), lambda f: x.read([]), x.cost)

    def read(idxs):
        return x.read([idxs[d] if x.shape[i] != 1 else Idx.lit(0)
                       for i, d in enumerate(bdims)])

    read_flat = None
    if _size(x.shape) == _size(shape):          # only inserts unit dims
        read_flat = x.read_flat if (isinstance(x, BufNode) or x.read_flat is not None
                                    and getattr(x, "_read_flat", True) is not None) else None
    return LazyNode(shape, x.dtype, read, read_flat, x.cost)


def _flat_capable(x: Node) -> bool:
    if isinstance(x, (BufNode, ConstNode)):
        return True
    return getattr(x, "_read_flat", None) is not None


def _reshape_node(ctx, x: Node, shape):
    shape = tuple(int(s) for s in shape)
    if isinstance(x, BufNode):
        return BufNode(ctx, x.buf, shape)
    if isinstance(x, ConstNode):
        return ConstNode(ctx, x.value, x.dtype, shape)
    if _size(shape) == 0:
        # nothing is read from an empty result (and the index arithmetic below would
        # divide by a zero extent)
        return ConstNode(ctx, 0, x.dtype, shape)
    if _flat_capable(x):
        return LazyNode(shape, x.dtype, lambda idxs: x.read_flat(flat_index(idxs, shape)),
                        x.read_flat, x.cost)
    groups = _reshape_groups(x.shape, shape)

    def read(idxs):
        in_idx = []
        for in_dims, out_dims in groups:
            f = flat_index([idxs[d] for d in out_dims], [shape[d] for d in out_dims])
            in_shape = [x.shape[d] for d in in_dims]
            strides = row_major_strides(in_shape)
            for j, s in enumerate(strides):
                e = f.floordiv(s)
                if j > 0:
                    e = e.mod(in_shape[j])
                in_idx.append(e)
        return x.read(in_idx)

    return LazyNode(shape, x.dtype, read, None, x.cost)


def _reshape_groups(in_shape, out_shape):
    """Pair up runs of input and output dims with equal products (row-major reshape)."""
    groups = []
    i = j = 0
    while i < len(in_shape) or j < len(out_shape):
        gi, gj = [], []
        pi = pj = 1
        while True:
            if i < len(in_shape) and (pi <= pj or j >= len(out_shape)):
                gi.append(i)
                pi *= in_shape[i]
                i += 1
            elif j < len(out_shape):
                gj.append(j)
                pj *= out_shape[j]
                j += 1
            else:
                break
            if pi == pj and gi and gj:
                # absorb trailing unit dims on either side into this group
                while i < len(in_shape) and in_shape[i] == 1 and (
                        j >= len(out_shape) or out_shape[j] != 1):
                    gi.append(i)
                    i += 1
                while j < len(out_shape) and out_shape[j] == 1 and (
                        i >= len(in_shape) or in_shape[i] != 1):
                    gj.append(j)
                    j += 1
                break
        groups.append((gi, gj))
    return groups


def _reshape(ctx, eqn, ins):
    (x,) = ins
    if eqn.params.get("dimensions") is not None:
        x = _transpose_node(x, tuple(eqn.params["dimensions"]))
    return _reshape_node(ctx, x, eqn.outvars[0].aval.shape)


def _squeeze(ctx, eqn, ins):
    return _reshape_node(ctx, ins[0], eqn.outvars[0].aval.shape)


def _transpose_node(x: Node, perm):
    shape = tuple(x.shape[p] for p in perm)
    inv = [0] * len(perm)
    for j, p in enumerate(perm):
        inv[p] = j
    if list(perm) == sorted(perm):
        return x

    def read(idxs):
        return x.read([idxs[inv[d]] for d in range(len(perm))])

    node = LazyNode(shape, x.dtype, read, None, x.cost)
    # A permuted view of a stored buffer: GEMM operands use the buffer directly (a
    # computed one is stored in its own layout first, see _gemm_operand).
    if getattr(x, "view_of", None) is not None:
        base, p0 = x.view_of
        node.view_of = (base, tuple(p0[p] for p in perm))
    else:
        node.view_of = (x, tuple(perm))
    return node


def _transpose(ctx, eqn, ins):
    return _transpose_node(ins[0], tuple(eqn.params["permutation"]))


def _slice(ctx, eqn, ins):
    (x,) = ins
    start = eqn.params["start_indices"]
    strides = eqn.params.get("strides") or (1,) * len(start)
    shape = eqn.outvars[0].aval.shape

    def read(idxs):
        return x.read([e * st + s for e, s, st in zip(idxs, start, strides)])

    return LazyNode(shape, x.dtype, read, None, x.cost)


def _rev(ctx, eqn, ins):
    (x,) = ins
    dims = set(eqn.params["dimensions"])

    def read(idxs):
        return x.read([(-e + (x.shape[d] - 1)) if d in dims else e for d, e in enumerate(idxs)])

    return LazyNode(x.shape, x.dtype, read, None, x.cost)


def _pad(ctx, eqn, ins):
    x, pv = ins
    config = eqn.params["padding_config"]
    shape = eqn.outvars[0].aval.shape
    table = ctx.table

    def read(idxs):
        cond = Cond()
        in_idx = []
        for e, (lo, _hi, interior), n in zip(idxs, config, x.shape):
            t = e - lo
            step = interior + 1
            cond = cond & Cond.in_range(t, 0, (n - 1) * step + 1) & Cond.divisible(t, step)
            in_idx.append(t.floordiv(step) if step > 1 else t)
        if any(n == 0 for n in x.shape):
            return pv.read([])
        return table.where(cond, x.read(in_idx), pv.read([]))

    node = LazyNode(shape, x.dtype, read, None, x.cost + 1)
    padded = [d for d, c in enumerate(config) if tuple(c) != (0, 0, 0)]
    if len(padded) == 1 and config[padded[0]][2] == 0 and min(config[padded[0]][:2]) >= 0:
        # Padding along one dim: the padding value, x, the padding value (see _pieces).
        d = padded[0]
        lo, hi, _ = config[d]

        def fill(size):
            sub = tuple(size if j == d else n for j, n in enumerate(shape))
            return LazyNode(sub, x.dtype, lambda idxs: pv.read([]), None, 0)
        _set_pieces(node, d, [(0, lo, fill(lo)), (lo, x.shape[d], x),
                              (lo + x.shape[d], hi, fill(hi))])
    return node


# A node materialized as pieces has at most this many, and pieces along its last dim
# are at least PIECE_MIN_INNER long (short inner loops would cost more than the selects).
MAX_PIECES = 8
PIECE_MIN_INNER = 16


def _set_pieces(node, dim, parts):
    """Mark ``node`` as the concatenation along ``dim`` of ``parts`` (``(start, size,
    node)``, in order, covering the dim): ``Lowering.materialize`` then writes each part
    into its region with a kernel of its own (``_write_pieces``)."""
    parts = [p for p in parts if p[1] > 0]
    if len(parts) < 2 or len(parts) > MAX_PIECES:
        return
    if dim == len(node.shape) - 1 and min(p[1] for p in parts) < PIECE_MIN_INNER:
        return
    node.pieces = (dim, parts)


def _slice_along(x: Node, dim, start, size):
    """``x[..., start:start + size, ...]`` along ``dim`` (lazily)."""
    if start == 0 and size == x.shape[dim]:
        return x
    shape = tuple(size if j == dim else n for j, n in enumerate(x.shape))
    if isinstance(x, ConstNode):
        return ConstNode(x.ctx, x.value, x.dtype, shape)

    def read(idxs):
        return x.read([e + start if j == dim else e for j, e in enumerate(idxs)])
    return LazyNode(shape, x.dtype, read, None, x.cost)


def _ew_pieces(node, ins, make):
    """Pieces of an elementwise ``node`` whose operands include concatenation-like ones
    along one dim (an add of zero-padded pieces: the gradient of ``split``): the op of
    the operands' parts over each interval where every operand is a single part.
    ``make(shape, operands)`` gives the elementwise node of sliced operands."""
    dims = {x.pieces[0] for x in ins if getattr(x, "pieces", None) is not None}
    if len(dims) != 1 or any(x.shape not in ((), node.shape) for x in ins):
        return
    (dim,) = dims
    cuts = {0, node.shape[dim]}
    for x in ins:
        if getattr(x, "pieces", None) is not None:
            cuts |= {p[0] for p in x.pieces[1]}
    cuts = sorted(cuts)
    parts = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        ops = []
        for x in ins:
            if x.shape == ():
                ops.append(x)
            elif getattr(x, "pieces", None) is not None:
                start, size, sub = next(p for p in x.pieces[1] if p[0] <= a < p[0] + p[1])
                ops.append(_slice_along(sub, dim, a - start, b - a))
            else:
                ops.append(_slice_along(x, dim, a, b - a))
        shape = tuple(b - a if j == dim else n for j, n in enumerate(node.shape))
        parts.append((a, b - a, make(shape, ops)))
    _set_pieces(node, dim, parts)


def _concatenate(ctx, eqn, ins):
    dim = eqn.params["dimension"]
    shape = eqn.outvars[0].aval.shape
    table = ctx.table
    offsets = []
    off = 0
    for x in ins:
        offsets.append(off)
        off += x.shape[dim]

    def read(idxs):
        parts = [(x, o) for x, o in zip(ins, offsets) if x.shape[dim] > 0]
        x, o = parts[-1]
        expr = x.read([e - o if d == dim else e for d, e in enumerate(idxs)])
        for x, o in reversed(parts[:-1]):
            cond = Cond.in_range(idxs[dim], o, o + x.shape[dim])
            sub = [e - o if d == dim else e for d, e in enumerate(idxs)]
            expr = table.where(cond, x.read(sub), expr)
        return expr

    # Reading a concatenation of several parts selects among them at every element: one
    # consumer fuses it, several read one stored copy (the cost rule: above CHEAP). The
    # gradient of ``split`` (a transformer's q, k, v) feeds a bias-gradient sum and two
    # matrix products: fused into the sum, its transposed parts were read column by
    # column (8.5 ms against 0.3 for storing it once).
    parts = sum(1 for x in ins if x.shape[dim] > 0)
    cost = max(x.cost for x in ins) + len(ins) + (CHEAP if parts > 1 else 0)
    node = LazyNode(shape, eqn.outvars[0].aval.dtype, read, None, cost)
    _set_pieces(node, dim, [(o, x.shape[dim], x) for x, o in zip(ins, offsets)])
    return node


def _iota(ctx, eqn, ins):
    p = eqn.params
    shape = tuple(p["shape"])
    dim = p["dimension"]
    dtype = np.dtype(p["dtype"])
    read_flat = (lambda f: ctx.table.index(f, dtype)) if len(shape) == 1 else None
    # Cost 0: an index value reads no memory (the cost rule stores nothing made of
    # index values and constants alone: ``INDEX_CHEAP``).
    return LazyNode(shape, dtype, lambda idxs: ctx.table.index(idxs[dim], dtype), read_flat, 0)


def _dynamic_slice(ctx, eqn, ins):
    x, starts = ins[0], ins[1:]
    sizes = eqn.params["slice_sizes"]
    syms = []
    for d, (s, k) in enumerate(zip(starts, sizes)):
        hi = x.shape[d] - k
        if isinstance(s, ConstNode):
            syms.append(Idx.lit(min(max(int(s.value), 0), hi)))
        else:
            syms.append(Idx.sym(ctx.new_sym(0, hi, s.read([]))))

    def read(idxs):
        return x.read([e + s for e, s in zip(idxs, syms)])

    return LazyNode(tuple(sizes), x.dtype, read, None, x.cost + 1)


def _window_coords(ctx, shape, ind, bidx, widx, sizes, window_axes, collapsed, start_map,
                   op_bdims, idx_bdims, check_bounds):
    """Operand coordinates (Idx per axis of ``shape``) of one gather/scatter window
    element: the start read from ``ind`` at batch position ``bidx`` (a per-element
    dynamic symbol, clamped so the window fits) plus the window offset ``widx``, and,
    with ``check_bounds``, the condition that every unclamped start keeps the window
    in bounds. As ``_window_coords`` in ``kiln.lax.gather_scatter``."""
    info = np.iinfo(ind.dtype)
    win_dims = [d for d in range(len(shape)) if d not in collapsed and d not in op_bdims]
    cond = Cond()
    coords = []
    for d, n in enumerate(shape):
        c = Idx.lit(0)
        if d in start_map:
            start = ind.read(bidx + [Idx.lit(start_map.index(d))])
            c = Idx.sym(ctx.new_sym(0, max(n - sizes[d], 0), start))
            if check_bounds:
                raw = ctx.new_sym(int(info.min), int(info.max), start)
                cond = cond & Cond.in_range(Idx.sym(raw), 0, n - sizes[d] + 1)
        elif d in op_bdims:
            c = bidx[idx_bdims[op_bdims.index(d)]]
        if d in win_dims:
            c = c + widx[window_axes[win_dims.index(d)]]
        coords.append(c)
    return coords, cond


def _gather(ctx, eqn, ins):
    """``lax.gather`` as index arithmetic: each output element reads the operand at
    (clamped start from ``indices``) + (window offset), as ``_window_coords`` in
    ``kiln.lax.gather_scatter`` defines it. The starts are per-element dynamic indices
    (read from the index array inside the loop); FILL_OR_DROP selects the fill value
    where a window is not entirely in bounds."""
    from kiln.lax.gather_scatter import GatherScatterMode, _default_fill_value
    x, ind = ins
    p = eqn.params
    dn = p["dimension_numbers"]
    sizes = tuple(p["slice_sizes"])
    out = eqn.outvars[0].aval
    out_rank = len(out.shape)
    window_axes = tuple(dn.offset_dims)
    batch_axes = [a for a in range(out_rank) if a not in set(window_axes)]
    fill = p["mode"] == GatherScatterMode.FILL_OR_DROP
    fv = p.get("fill_value")
    fill_const = np.asarray(_default_fill_value(x.dtype) if fv is None else fv)
    with np.errstate(invalid="ignore", over="ignore"):
        fill_const = fill_const.astype(x.dtype)
    table = ctx.table

    def read(idxs):
        coords, cond = _window_coords(
            ctx, x.shape, ind, [idxs[a] for a in batch_axes], idxs, sizes, window_axes,
            tuple(dn.collapsed_slice_dims), tuple(dn.start_index_map),
            tuple(dn.operand_batching_dims), tuple(dn.start_indices_batching_dims), fill)
        val = x.read(coords)
        if fill and cond.clauses:
            val = table.where(cond, val, table.const(fill_const[()], x.dtype))
        return val

    return LazyNode(out.shape, x.dtype, read, None, x.cost + 2)


def _identity(ctx, eqn, ins):
    return ins[0]


MOVEMENT = {
    "broadcast_in_dim": _broadcast_in_dim, "reshape": _reshape, "squeeze": _squeeze,
    "transpose": _transpose, "slice": _slice, "rev": _rev, "pad": _pad,
    "concatenate": _concatenate, "iota": _iota, "dynamic_slice": _dynamic_slice,
    "gather": _gather,
}


# ------------------------------------------------------------------------------------------
# Reductions and dot_general: they write buffers.

def _reduce(ctx: Lowering, eqn, ins, kind):
    # reduce_sum_fma (passes/xla_fma.py): the sum of x * y, each product fused into the
    # accumulator (``acc = fma(x, y, acc)``), XLA's short reductions.
    fma = eqn.primitive.name == "reduce_sum_fma"
    if fma:
        x, y = ins
    else:
        (x,) = ins
    op = REDUCTIONS[eqn.primitive.name]
    axes = tuple(sorted(eqn.params["axes"]))
    out_aval = eqn.outvars[0].aval
    if not axes and not fma:
        return LazyNode(x.shape, out_aval.dtype,
                        lambda idxs: ctx.table.op("convert_element_type", out_aval.dtype,
                                                  x.read(idxs)), None, x.cost)
    in_shape = tuple(x.shape)
    if _flat_capable(x) and (not fma or _flat_capable(y)) and op not in ("argmax", "argmin"):
        # Merge runs of adjacent dims that are all reduced or all kept: the loops get
        # longer (vectorizable, parallel) and the row-major offsets are unchanged.
        groups: list = []
        for d, n in enumerate(in_shape):
            red = d in axes
            if groups and groups[-1][0] == red:
                groups[-1][1] *= n
            else:
                groups.append([red, n])
        in_shape = tuple(n for _, n in groups)
        axes = tuple(j for j, (red, _) in enumerate(groups) if red)
        syms = ctx.syms(in_shape)
        flat = flat_index([Idx.sym(s) for s in syms], in_shape)
        body = x.read_flat(flat)
        if fma:
            body = ctx.table.op("mul", out_aval.dtype, body, y.read_flat(flat))
    else:
        syms = ctx.syms(in_shape)
        body = x.read([Idx.sym(s) for s in syms])
        if fma:
            body = ctx.table.op("mul", out_aval.dtype, body,
                                y.read([Idx.sym(s) for s in syms]))
    buf = ctx.prog.new_buffer(out_aval.shape, out_aval.dtype, kind)
    ctx.prog.steps.append(Reduce(in_shape, syms, axes, op, buf, body,
                                 name=ctx.kernel_name("r"), fma=fma))
    return BufNode(ctx, buf)


SCANS = {"cumsum": "sum", "cumprod": "prod", "cummax": "max", "cummin": "min"}


def _scan(ctx: Lowering, eqn, ins, kind):
    """cumsum/cumprod/cummax/cummin: a :class:`Scan` over the (fused) input."""
    (x,) = ins
    out = eqn.outvars[0].aval
    shape = tuple(x.shape)
    syms = ctx.syms(shape)
    body = x.read([Idx.sym(s) for s in syms])
    buf = ctx.prog.new_buffer(out.shape, out.dtype, kind)
    ctx.prog.steps.append(Scan(shape, syms, int(eqn.params["axis"]), SCANS[eqn.primitive.name],
                               bool(eqn.params["reverse"]), buf, body,
                               name=ctx.kernel_name("c")))
    return BufNode(ctx, buf)


SCATTERS = {"scatter": "set", "scatter-add": "sum", "scatter-sub": "sub",
            "scatter-mul": "prod", "scatter-min": "min", "scatter-max": "max"}


def _scatter(ctx: Lowering, eqn, ins, kind):
    """A scatter: the operand written to the output buffer (a fused kernel), then a
    :class:`Scatter` step combining the updates in, as ``_scatter_impl_for`` in
    ``kiln.lax.gather_scatter`` defines it (CLIP clamps the starts; the other modes drop
    windows not entirely in bounds)."""
    from kiln.lax.gather_scatter import GatherScatterMode, _scatter_slice_sizes
    x, ind, upd = ins
    p = eqn.params
    dn = p["dimension_numbers"]
    out = eqn.outvars[0].aval
    buf = _operand_copy(ctx, x, out, kind)
    if _size(upd.shape) == 0 or _size(out.shape) == 0:
        return BufNode(ctx, buf)
    window_axes = tuple(dn.update_window_dims)
    batch_axes = [a for a in range(len(upd.shape)) if a not in set(window_axes)]
    usyms = ctx.syms(upd.shape, prefix="u")
    uidx = [Idx.sym(s) for s in usyms]
    coords, cond = _window_coords(
        ctx, out.shape, ind, [uidx[a] for a in batch_axes], uidx,
        _scatter_slice_sizes(out.shape, upd.shape, dn), window_axes,
        tuple(dn.inserted_window_dims), tuple(dn.scatter_dims_to_operand_dims),
        tuple(dn.operand_batching_dims), tuple(dn.scatter_indices_batching_dims),
        p["mode"] != GatherScatterMode.CLIP)
    target = Idx.lit(0)
    for c, st in zip(coords, row_major_strides(out.shape)):
        target = target + c * st
    body = upd.read(uidx)
    if body.dtype != np.dtype(out.dtype):
        body = ctx.table.op("convert_element_type", out.dtype, body)
    ctx.prog.steps.append(Scatter(tuple(upd.shape), usyms, buf, target, cond,
                                  SCATTERS[eqn.primitive.name], body,
                                  name=ctx.kernel_name("s")))
    return BufNode(ctx, buf)


def _operand_copy(ctx: Lowering, x: Node, out, kind) -> Buffer:
    """A new buffer for an update's result, holding the operand ``x`` (a kernel); the
    updates are then stored into it (``plan_buffers`` may drop this copy)."""
    buf = ctx.prog.new_buffer(out.shape, out.dtype, kind)
    syms = ctx.syms(out.shape)
    ctx.prog.steps.append(Kernel(tuple(out.shape), syms,
                                 [(buf, x.read([Idx.sym(s) for s in syms]))],
                                 ctx.kernel_name("k")))
    return buf


def _dynamic_update_slice(ctx: Lowering, eqn, ins, kind):
    """``dynamic_update_slice``: the operand written to the output buffer, then the update
    stored over the window at the clamped starts (a ``set`` Scatter; in a loop whose
    carry it updates, ``lower_control`` turns this into an update in place)."""
    x, upd, starts = ins[0], ins[1], ins[2:]
    out = eqn.outvars[0].aval
    buf = _operand_copy(ctx, x, out, kind)
    if _size(upd.shape) == 0 or _size(out.shape) == 0:
        return BufNode(ctx, buf)
    usyms = ctx.syms(upd.shape, prefix="u")
    coords = []
    for d, (s, k) in enumerate(zip(starts, upd.shape)):
        hi = out.shape[d] - k
        if isinstance(s, ConstNode):
            st = Idx.lit(min(max(int(s.value), 0), hi))
        else:
            st = Idx.sym(ctx.new_sym(0, hi, s.read([])))
        coords.append(st + Idx.sym(usyms[d]))
    body = upd.read([Idx.sym(u) for u in usyms])
    if body.dtype != np.dtype(out.dtype):
        body = ctx.table.op("convert_element_type", out.dtype, body)
    ctx.prog.steps.append(Scatter(tuple(upd.shape), usyms, buf,
                                  flat_index(coords, out.shape), Cond(), "set", body,
                                  name=ctx.kernel_name("s")))
    return BufNode(ctx, buf)


def _dot_general(ctx: Lowering, eqn, ins, kind):
    lhs, rhs = ins
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lc, rc, lb, rb = map(tuple, (lc, rc, lb, rb))
    out = eqn.outvars[0].aval
    lf = tuple(d for d in range(len(lhs.shape)) if d not in lc and d not in lb)
    rf = tuple(d for d in range(len(rhs.shape)) if d not in rc and d not in rb)
    B = _size([lhs.shape[d] for d in lb])
    M = _size([lhs.shape[d] for d in lf])
    N = _size([rhs.shape[d] for d in rf])
    K = _size([lhs.shape[d] for d in lc])
    from kiln.compiler.lower import blas_support
    use_blas = (out.dtype in FLOAT_DTYPES and lhs.dtype == out.dtype and
                rhs.dtype == out.dtype and M * N * K >= GEMM_MIN_FLOPS and K > 1 and
                blas_support.available())
    if not use_blas:
        return _dot_as_reduce(ctx, lhs, rhs, lc, rc, lb, rb, lf, rf, out, kind)
    a, ta, av = _gemm_operand(ctx, lhs, lb, lf, lc)
    b, tb, bv = _gemm_operand(ctx, rhs, rb, rc, rf)
    buf = ctx.prog.new_buffer(out.shape, out.dtype, kind)
    ctx.prog.steps.append(Gemm(a, ta, b, tb, buf, B, M, N, K, name=ctx.kernel_name("g"),
                               a_view=av, b_view=bv))
    return BufNode(ctx, buf)


def _strided_operand(x, batch, first, second):
    """``(trans, (ld, batch dims))`` addressing a stored ``x`` as the GEMM operand
    [batch, first, second] in place, when ``first`` and ``second`` are one dim each and
    one of them is x's last (unit stride): the rows are then ``ld`` apart and each batch
    element's matrix starts at its batch dims' offsets. None otherwise."""
    if len(first) != 1 or len(second) != 1:
        return None
    strides = row_major_strides(x.shape)
    nd = len(x.shape)
    (f,), (s,) = first, second
    if s == nd - 1:
        trans, ld = False, strides[f]
    elif f == nd - 1:
        trans, ld = True, strides[s]
    else:
        return None
    return trans, (int(ld), tuple((int(x.shape[d]), int(strides[d])) for d in batch))


def _gemm_operand(ctx, x: Node, batch, first, second):
    """``(buffer, trans, view)``: a buffer holding ``x`` as [batch, first, second]
    (trans=False) or [batch, second, first] (trans=True), packing it with a kernel if
    needed; ``view`` (see ``Gemm.a_view``) when a stored buffer is read in place."""
    nd = len(x.shape)
    view = getattr(x, "view_of", None)
    natural = tuple(range(nd))
    if view is None and not isinstance(x, BufNode) and natural in (
            tuple(batch) + tuple(first) + tuple(second),
            tuple(batch) + tuple(second) + tuple(first)):
        # A computed operand is stored in its own layout; the transpose flag does the rest
        # (packing it transposed would read its inputs with a stride).
        x = ctx.materialize_shared(x)
    if view is not None:            # x[..] = base[perm-view]: map the dims to base's
        base, perm = view
        batch, first, second = ([perm[d] for d in ds] for ds in (batch, first, second))
        x = base
        if not isinstance(x, BufNode) and natural in (
                tuple(batch) + tuple(first) + tuple(second),
                tuple(batch) + tuple(second) + tuple(first)):
            # A transposed view of a computed value (``h.T @ w`` beside ``h @ v``): store
            # the value in its own layout, once, and pass the transpose flag.
            x = ctx.materialize_shared(x)
    if isinstance(x, BufNode):
        if tuple(batch) + tuple(first) + tuple(second) == tuple(range(nd)):
            return x.buf, False, None
        if tuple(batch) + tuple(second) + tuple(first) == tuple(range(nd)):
            return x.buf, True, None
        # A permuted view of a stored buffer (attention's heads of a [b, t, h, d] array,
        # batched over (b, h)): read in place with a leading dimension and batch strides.
        strided = _strided_operand(x, batch, first, second)
        if strided is not None:
            return x.buf, strided[0], strided[1]
    # Packed as [batch, first, second], or as [batch, second, first] with the transpose
    # flag when x's own last dim is among ``first``: the packing kernel's inner loop then
    # runs along that dim, reading its source contiguously (attention's keys, [b, t, h, d]
    # viewed as [b, h, t, d] and contracted over d, read with a stride of t otherwise).
    trans = nd - 1 in first and nd - 1 not in second
    perm = tuple(batch) + (tuple(second) + tuple(first) if trans else
                           tuple(first) + tuple(second))
    packed = ctx.materialize_shared_as(x, perm)
    return packed.buf, trans, None


def _dot_as_reduce(ctx, lhs, rhs, lc, rc, lb, rb, lf, rf, out, kind):
    """Small or integer dots: a reduction over the contracting dims of a fused product.

    Contracting dims of size 1 are read at index 0 and not looped over; with none left
    (an outer product, as per-example gradients under ``vmap`` have) the dot is an
    elementwise kernel of the products: XLA's algebraic simplifier makes such a dot a
    multiply, so a product of -0.0 stays -0.0 (a sum from 0.0 would make it +0.0), and
    the kernel's inner loop runs along the output's last dim (vectorized, stored as a
    stream when large) where a reduction's ran over a one-element loop."""
    dt = out.dtype
    one = [(dl, dr) for dl, dr in zip(lc, rc) if lhs.shape[dl] == 1]
    lidx = [None] * len(lhs.shape)
    ridx = [None] * len(rhs.shape)
    for dl, dr in one:
        lidx[dl] = ridx[dr] = Idx.lit(0)
    kept = [(dl, dr) for dl, dr in zip(lc, rc) if lhs.shape[dl] != 1]
    lc, rc = tuple(dl for dl, _ in kept), tuple(dr for _, dr in kept)
    in_shape = ([lhs.shape[d] for d in lb] + [lhs.shape[d] for d in lf] +
                [rhs.shape[d] for d in rf] + [lhs.shape[d] for d in lc])
    syms = ctx.syms(in_shape)
    nb, nf, nr = len(lb), len(lf), len(rf)
    table = ctx.table

    for p, (dl, dr) in enumerate(zip(lb, rb)):
        lidx[dl] = ridx[dr] = Idx.sym(syms[p])
    for q, d in enumerate(lf):
        lidx[d] = Idx.sym(syms[nb + q])
    for q, d in enumerate(rf):
        ridx[d] = Idx.sym(syms[nb + nf + q])
    for r, (dl, dr) in enumerate(zip(lc, rc)):
        lidx[dl] = ridx[dr] = Idx.sym(syms[nb + nf + nr + r])
    a = lhs.read(lidx)
    b = rhs.read(ridx)
    if a.dtype != dt:
        a = table.op("convert_element_type", dt, a)
    if b.dtype != dt:
        b = table.op("convert_element_type", dt, b)
    body = table.op("and" if dt == np.bool_ else "mul", dt, a, b)
    axes = tuple(range(nb + nf + nr, len(in_shape)))
    buf = ctx.prog.new_buffer(out.shape, dt, kind)
    op = "or" if dt == np.bool_ else "sum"
    if not axes:
        k = Kernel(tuple(in_shape), syms, [(buf, body)], ctx.kernel_name("k"))
        ctx.prog.steps.append(k)
    else:
        ctx.prog.steps.append(Reduce(tuple(in_shape), syms, axes, op, buf, body,
                                     name=ctx.kernel_name("r")))
    return BufNode(ctx, buf)


# ------------------------------------------------------------------------------------------

# Primitives lowered by modules of their own (``control``: while/scan/cond, ``conv``,
# ``window``, ``random``): those build on this module's nodes and lower their bodies
# through it, so they register their rules here when imported (the package's
# ``__init__`` imports them).
_RULES: dict = {}


def register_rule(names, is_native, lower) -> None:
    """Lower the primitives ``names`` with ``lower(ctx, eqn, ins, out_kind) -> [nodes]``
    when ``is_native(eqn)``, else as a host island."""
    for name in names:
        _RULES[name] = (is_native, lower)


def _split_native(eqn) -> bool:
    return np.dtype(eqn.invars[0].aval.dtype) in NATIVE_DTYPES


def _split(ctx, eqn, ins, out_kind):
    """``split``: one lazy slice along the axis per result (no data moves)."""
    (x,), axis = ins, eqn.params["axis"]
    outs, start = [], 0
    for size in eqn.params["sizes"]:
        outs.append(_slice_along(x, axis, start, int(size)))
        start += int(size)
    return outs


register_rule(("split",), _split_native, _split)


def _is_native(eqn) -> bool:
    name = eqn.primitive.name
    rule = _RULES.get(name)
    if rule is not None:
        return rule[0](eqn)
    if name == "bitcast_convert_type" and (
            np.dtype(eqn.invars[0].aval.dtype).itemsize !=
            np.dtype(eqn.outvars[0].aval.dtype).itemsize):
        return False            # width changes add or drop a dimension: host island
    if name not in ELEMENTWISE and name not in MOVEMENT and name not in REDUCTIONS \
            and name != "dot_general" and name not in IDENTITY and name not in SCANS \
            and name not in SCATTERS and name != "dynamic_update_slice":
        return False
    for v in list(eqn.invars) + list(eqn.outvars):
        if np.dtype(v.aval.dtype) not in NATIVE_DTYPES:
            return False
    if name == "dot_general" and eqn.outvars[0].aval.dtype == np.bool_:
        return False
    if name == "dot_general":
        from kiln.lax.dot import algorithm_changes_types
        if algorithm_changes_types(eqn.params["precision"], eqn.invars[0].aval.dtype,
                                   eqn.invars[1].aval.dtype, eqn.outvars[0].aval.dtype):
            return False        # a dot algorithm's casts (or its CPU error): host island
    if name in SCATTERS:
        idt = np.dtype(eqn.invars[1].aval.dtype)
        return idt.kind in "iu" and idt != np.uint64
    if name == "gather":
        from kiln.lax.gather_scatter import GatherScatterMode
        idt = np.dtype(eqn.invars[1].aval.dtype)
        # uint64 starts beyond int64 would wrap in C; the host island clamps them.
        return idt.kind in "iu" and idt != np.uint64 and eqn.params["mode"] in (
            GatherScatterMode.CLIP, GatherScatterMode.FILL_OR_DROP,
            GatherScatterMode.PROMISE_IN_BOUNDS)
    if name == "argmax" or name == "argmin":
        return eqn.invars[0].aval.dtype != np.bool_
    if name == "dynamic_update_slice":
        return all(np.dtype(v.aval.dtype) != np.uint64 for v in eqn.invars[2:])
    return True


def _should_materialize(var, node: Node, consumers) -> bool:
    """The fusion cost rule (see the module docstring)."""
    if not isinstance(node, LazyNode) or node.cost <= CHEAP:
        return False
    if len(consumers) > 1:
        return True
    if consumers:
        c = consumers[0]
        if c.primitive.name == "broadcast_in_dim":
            return _size(c.outvars[0].aval.shape) > _size(var.aval.shape)
        if c.primitive.name in ("pad", "concatenate", "dynamic_slice", "slice"):
            return False
    return False


def _uniform(val: np.ndarray) -> bool:
    """Whether every element of ``val`` has the same bits (so -0.0 and 0.0, or two NaN
    payloads, differ)."""
    flat = np.ascontiguousarray(val).reshape(val.size, 1).view(np.uint8)
    return bool((flat == flat[0]).all())


def _bind_consts(ctx: Lowering, jaxpr, consts, env: dict, out_set) -> None:
    for v, c in zip(jaxpr.constvars, consts):
        val = np.asarray(getattr(c, "_value", c))
        if val.shape == () and val.dtype in NATIVE_DTYPES and v not in out_set:
            env[v] = ConstNode(ctx, val, val.dtype)
            continue
        if val.size > 1 and val.dtype in NATIVE_DTYPES and v not in out_set and _uniform(val):
            # One value repeated (the zeros a gradient closes over, a mask of ones): a
            # constant in the kernels instead of a buffer read at every element.
            env[v] = ConstNode(ctx, val.reshape(-1)[0], val.dtype, val.shape)
            continue
        buf = ctx.prog.new_buffer(val.shape, val.dtype, "const")
        ctx.prog.consts.append((buf, np.ascontiguousarray(val)))
        env[v] = BufNode(ctx, buf)


def _node_of(ctx: Lowering, env: dict, v) -> Node:
    if type(v) is Literal:
        val = np.asarray(getattr(v.val, "_value", v.val))
        return ConstNode(ctx, val, v.aval.dtype, np.shape(val))
    return env[v]


def lower_eqns(ctx: Lowering, jaxpr, env: dict, top: bool) -> None:
    """Lower ``jaxpr``'s equations, binding their outputs in ``env``. At the top level
    (``top``) lazy results that are program outputs are written to ``out`` buffers;
    in a loop or branch body they are left to the caller."""
    consumers: dict = {}
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if type(v) is not Literal:
                consumers.setdefault(v, []).append(eqn)
    out_set = {v for v in jaxpr.outvars if type(v) is not Literal}
    steps = ctx.prog.steps
    step_source = ctx.prog.step_source
    outer_source = ctx.table.current
    for eqn in jaxpr.eqns:
        si = eqn.source_info
        ctx.table.current = si
        n_steps = len(steps)
        ins = [_node_of(ctx, env, v) for v in eqn.invars]
        name = eqn.primitive.name
        out_kind = "out" if top and any(v in out_set for v in eqn.outvars) else "tmp"
        if not _is_native(eqn):
            from kiln.compiler.lower import linalg as lower_linalg
            if not top and lower_linalg.expandable(eqn):
                # In a loop/branch body: native rows instead of an island (lower_linalg).
                outs = lower_nested(ctx, lower_linalg.expansion(eqn), ins)
            else:
                outs = _island(ctx, eqn, ins, nested=not top)
        elif name in _RULES:
            outs = _RULES[name][1](ctx, eqn, ins, out_kind)
        elif name in IDENTITY:
            outs = [ins[0]]
        elif name in ELEMENTWISE:
            outs = [_ew_rule(ctx, eqn, ins)]
        elif name in MOVEMENT:
            outs = [MOVEMENT[name](ctx, eqn, ins)]
        elif name in REDUCTIONS:
            outs = [_reduce(ctx, eqn, ins, out_kind)]
        elif name in SCANS:
            outs = [_scan(ctx, eqn, ins, out_kind)]
        elif name in SCATTERS:
            outs = [_scatter(ctx, eqn, ins, out_kind)]
        elif name == "dynamic_update_slice":
            outs = [_dynamic_update_slice(ctx, eqn, ins, out_kind)]
        else:
            outs = [_dot_general(ctx, eqn, ins, out_kind)]
        for v, node in zip(eqn.outvars, outs):
            if top and isinstance(node, ConstNode) and node.shape != () and v in out_set:
                node = ctx.materialize(LazyNode(node.shape, node.dtype, node.read,
                                                node.read_flat, 0), "out")
            elif isinstance(node, LazyNode):
                if top and v in out_set:
                    node = ctx.materialize(node, "out")
                elif _should_materialize(v, node, consumers.get(v, [])):
                    node = ctx.materialize(node, "tmp")
            env[v] = node
        if si is not None:
            for step in steps[n_steps:]:
                step_source.setdefault(id(step), si)
    ctx.table.current = outer_source


def lower_nested(ctx: Lowering, closed: ClosedJaxpr, in_nodes: list) -> list:
    """Lower a loop or branch body (already optimised) with ``in_nodes`` bound to its
    invars; its steps go to ``ctx.prog.steps``. Returns its output nodes."""
    jaxpr = closed.jaxpr
    env: dict = {}
    _bind_consts(ctx, jaxpr, closed.consts, env, set())
    for v, n in zip(jaxpr.invars, in_nodes):
        env[v] = n
    lower_eqns(ctx, jaxpr, env, top=False)
    return [_node_of(ctx, env, v) for v in jaxpr.outvars]


def lower(closed: ClosedJaxpr) -> Program:
    """Lower a closed jaxpr (nested calls already inlined) to a :class:`Program`."""
    jaxpr = closed.jaxpr
    ctx = Lowering()
    prog = ctx.prog
    out_set = {v for v in jaxpr.outvars if type(v) is not Literal}
    env: dict = {}
    _bind_consts(ctx, jaxpr, closed.consts, env, out_set)
    for v in jaxpr.invars:
        buf = prog.new_buffer(v.aval.shape, v.aval.dtype, "in")
        prog.inputs.append(buf)
        env[v] = BufNode(ctx, buf)
    lower_eqns(ctx, jaxpr, env, top=True)

    for v in jaxpr.outvars:
        if type(v) is Literal:
            prog.outputs.append(("lit", np.asarray(getattr(v.val, "_value", v.val),
                                                   v.aval.dtype)))
            continue
        if v in jaxpr.invars:
            prog.outputs.append(("in", jaxpr.invars.index(v)))
            continue
        node = env[v]
        if isinstance(node, ConstNode):
            prog.outputs.append(("lit", np.full(v.aval.shape, node.value, v.aval.dtype)))
            continue
        if isinstance(node, BufNode) and node.buf.kind == "tmp":
            node = ctx.materialize(LazyNode(node.shape, node.dtype, node.read,
                                            node.read_flat, 1), "out")
        prog.outputs.append(("buf", node.buf, tuple(v.aval.shape)))
    return prog


def _island(ctx: Lowering, eqn, ins, nested: bool = False):
    """``eqn`` run by its impl: between segments, or (``nested``: in a loop or branch
    body) called back from the native code, its results written into ``tmp`` buffers."""
    prog = ctx.prog
    args = []
    for x, v in zip(ins, eqn.invars):
        if type(v) is Literal:
            args.append(("lit", np.asarray(getattr(v.val, "_value", v.val), v.aval.dtype)))
        elif isinstance(x, ConstNode):
            args.append(("lit", np.full(x.shape, x.value, x.dtype)))
        else:
            b = ctx.as_buffer(x)
            args.append((b.buf, b.shape))
    kind = "tmp" if nested else "host"
    outs = [prog.new_buffer(v.aval.shape, v.aval.dtype, kind) for v in eqn.outvars]
    island = Island(eqn, args, outs)
    if nested:
        island.host_id = len(prog.host_calls)
        prog.host_calls.append(island)
    prog.steps.append(island)
    return [BufNode(ctx, b) for b in outs]


def flops_of(step) -> float:
    from kiln.compiler.lower.program import Loop, nested_steps
    inner = nested_steps(step)
    if inner:
        total = sum(flops_of(s) for steps in inner for s in steps)
        return total * max(1, step.length) if isinstance(step, Loop) else total
    if isinstance(step, Gemm):
        return 2.0 * step.batch * step.m * step.n * step.k
    from kiln.compiler.lower.program import Conv
    if isinstance(step, Conv):
        return 2.0 * step.n * math.prod(step.out_sp) * math.prod(step.k_sp) * step.cg \
            * step.og * step.groups
    if isinstance(step, (Kernel, Scan, Scatter)):
        return float(math.prod(step.shape))
    if isinstance(step, Reduce):
        return float(math.prod(step.in_shape))
    return 0.0
