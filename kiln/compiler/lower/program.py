"""The lowered program: buffers and the ordered steps that fill them.

A :class:`Program` is what the lowering (``lower.py``) makes of a jaxpr and what the
renderer and the executable consume. Steps run in order:

* :class:`Kernel`: a loop nest over ``shape`` writing one or more buffers, each
  element computed by a fused scalar expression;
* :class:`Reduce`: a loop nest over an input shape folding a scalar expression into
  an output buffer (``sum``/``max``/``min``/``prod``/``and``/``or``/``xor``, or
  ``argmax``/``argmin``);
* :class:`Scan`: a cumulative sum/product/max/min along one axis;
* :class:`Scatter`: updates combined into a buffer at dynamic positions, in order;
* :class:`Gemm`: a (batched) matrix product through BLAS, operands in buffers;
* :class:`Conv`: a convolution as tiles of patches (im2col) each fed to one GEMM;
* :class:`Loop`: ``while_loop``/``scan`` (and ``fori_loop``): native steps run in a C
  loop, the carry in buffers updated at the end of each iteration;
* :class:`Branch`: ``cond``/``switch``: one of several lists of native steps;
* :class:`Island`: a primitive without a native lowering, run with its NumPy
  ``impl`` between native segments, or called back from inside a native loop.

What it must not hold: decisions (fusion is ``lower.py``'s) or C text.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln.compiler.lower.expr import SExpr
from kiln.compiler.lower.index import Sym


@dataclass(eq=False)
class Buffer:
    """A contiguous row-major array. ``kind``: ``in`` (argument), ``const`` (closed-over
    value), ``out`` (program result), ``tmp`` (intermediate), ``host`` (made by an island)."""

    id: int
    shape: tuple
    dtype: np.dtype
    kind: str

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


@dataclass(eq=False)
class Kernel:
    """A loop nest over ``shape`` storing each element of ``outs`` at its row-major
    offset, plus ``offset`` (an Idx) when set: a scan writes its stacked outputs so.
    With ``strides`` (one per loop, set together with ``offset``) the position is
    ``sum(sym * stride) + offset`` instead: one piece of a concatenation written into
    its region of the whole buffer."""

    shape: tuple
    syms: list[Sym]
    outs: list[tuple[Buffer, SExpr]]
    name: str = "kernel"
    offset: object = None
    strides: tuple | None = None


@dataclass(eq=False)
class Reduce:
    in_shape: tuple
    syms: list[Sym]
    axes: tuple
    op: str                 # sum prod max min and or xor argmax argmin
    out: Buffer
    body: SExpr
    acc_dtype: np.dtype = None
    name: str = "reduce"
    fma: bool = False       # body is a product x * y, folded as acc = fma(x, y, acc)


@dataclass(eq=False)
class Scan:
    """A cumulative reduction along ``axis``: ``out[.., i, ..] = op(out[.., i-1, ..],
    body at i)`` (from the end when ``reverse``), each element folded in sequence as
    NumPy's ``accumulate`` does. The loops run in row-major order; the previous element
    is read back from ``out``, so the dims after ``axis`` stay inner and vectorize."""

    shape: tuple
    syms: list[Sym]
    axis: int
    op: str                 # sum prod max min
    reverse: bool
    out: Buffer
    body: SExpr
    name: str = "scan"


@dataclass(eq=False)
class Scatter:
    """Combine each element of an update expression into ``out`` (already holding the
    operand) at a dynamic flat position ``target``, where ``cond`` holds (windows out of
    bounds are dropped), one element after another in row-major order of ``shape``, as
    NumPy's ``ufunc.at`` does. ``op``: set (later updates win), sum, sub, prod, max, min."""

    shape: tuple
    syms: list[Sym]
    out: Buffer
    target: object          # Idx: flat position in out
    cond: object            # Cond
    op: str
    body: SExpr
    name: str = "scatter"


@dataclass(eq=False)
class Gemm:
    """``out[b] = op(a[b]) @ op(b_[b])``: row-major; ``a`` is [batch, M, K] (or [batch, K, M]
    when ``trans_a``), ``b`` is [batch, K, N] (or [batch, N, K] when ``trans_b``).

    ``a_view``/``b_view``, when set, read the operand in place from a buffer of another
    layout: ``(ld, ((size, stride), ...))``, the matrix's leading dimension and the batch
    index split row-major over those sizes, each with its element stride in the buffer
    (attention's heads of a ``[b, t, h, d]`` array: ld ``h*d``, batch ``((b, t*h*d),
    (h, d))``). None: the contiguous layout above.

    ``out_view``, when set, stores the result in another layout the same way, from a
    flat ``offset``: ``(ld, ((size, stride), ...), offset)`` (``gemm_store.py``: a
    product whose result was only copied there)."""

    a: Buffer
    trans_a: bool
    b: Buffer
    trans_b: bool
    out: Buffer
    batch: int
    m: int
    n: int
    k: int
    name: str = "gemm"
    a_view: tuple | None = None
    b_view: tuple | None = None
    out_view: tuple | None = None


@dataclass(eq=False)
class Conv:
    """A convolution, ``out[n, o_sp..., g*og + j] = sum_k cols[n, g, o_sp..., k] * w[g, k, j]``
    with ``k`` running over ``(k_sp..., c)``.

    ``col`` is the patch value (the input, zero in the padding) at the loop symbols
    ``syms = [n, g, o_sp..., k_sp..., c]``; it is computed tile by tile (a block of
    rows of the first output spatial dim of one image) into a scratch buffer, then one
    GEMM per tile and group writes the outputs: the patches of the whole input never
    exist at once. ``w`` is the kernel packed as [groups, prod(k_sp) * cg, og]; ``out``
    is laid out [n, o_sp..., groups * og]."""

    n: int
    groups: int
    out_sp: tuple
    k_sp: tuple
    cg: int
    og: int
    syms: list
    col: SExpr
    w: Buffer
    out: Buffer
    name: str = "conv"


@dataclass(eq=False)
class Loop:
    """A native loop around native steps.

    ``kind == "while"``: each iteration runs ``cond_steps``, stops unless the scalar
    expression ``pred`` holds, then runs ``body``. ``kind == "scan"``: ``length``
    iterations of ``body`` with the loop symbol ``counter`` running from 0 up (down when
    ``reverse``). ``body`` ends with the copies that make the new carry current."""

    kind: str
    body: list
    cond_steps: list = field(default_factory=list)
    pred: SExpr | None = None
    length: int = 0
    counter: Sym | None = None
    reverse: bool = False
    name: str = "loop"


@dataclass(eq=False)
class Branch:
    """``cond``/``switch``: runs ``branches[clamp(index, 0, len - 1)]`` (``index``: a scalar
    integer expression); every branch ends writing the same output buffers."""

    index: SExpr
    branches: list
    name: str = "branch"


def nested_steps(step) -> list:
    """The step lists inside a Loop or Branch (none for other steps)."""
    if isinstance(step, Loop):
        return [step.cond_steps, step.body]
    if isinstance(step, Branch):
        return list(step.branches)
    return []


def walk_steps(steps):
    """Every step of ``steps``, those inside loops and branches included."""
    for s in steps:
        yield s
        for inner in nested_steps(s):
            yield from walk_steps(inner)


@dataclass(eq=False)
class Island:
    """A primitive run by its ``impl`` on the host. At the top level, between native
    segments (its results become ``host`` buffers). Inside a loop or branch body
    (``host_id`` set: its index in ``Program.host_calls``), the native code calls back
    into Python for it (``kiln.compiler.build.host_entry``), which writes its results
    into ``tmp`` buffers the following steps read."""
    eqn: object
    ins: list                # Buffer, or ("lit", numpy value)
    outs: list[Buffer]
    host_id: int | None = None


@dataclass(eq=False)
class Program:
    buffers: list[Buffer] = field(default_factory=list)
    steps: list = field(default_factory=list)
    inputs: list = field(default_factory=list)      # Buffer per jaxpr invar
    consts: list = field(default_factory=list)      # (Buffer, numpy value) per used constvar
    outputs: list = field(default_factory=list)     # ("buf", Buffer) | ("lit", value) | ("in", i)
    sym_defs: dict = field(default_factory=dict)    # Sym.name -> (Sym, SExpr, lo, hi)
    # Config flags whose values were baked into the code (name -> value); when one has
    # changed since, the executable runs the reference backend instead.
    guards: dict = field(default_factory=dict)
    # Temporaries sharing memory (plan_buffers): buffer id -> slot number.
    slots: dict = field(default_factory=dict)
    # For profiles (kiln.profiler): the user's source positions behind the steps:
    # id(step) -> source_info of the equation lowered when the step was made, and
    # expression uid -> source_info of the equation that made the node.
    step_source: dict = field(default_factory=dict)
    expr_source: dict = field(default_factory=dict)
    # The ExprTable the lowering interned the expressions in (passes after the lowering
    # that build new expressions, e.g. merge_kernels, intern them there too).
    table: object = field(default=None, repr=False, compare=False)
    # Islands inside loop and branch bodies, by ``host_id`` (the native code calls back
    # for them).
    host_calls: list = field(default_factory=list)

    def new_buffer(self, shape, dtype, kind) -> Buffer:
        b = Buffer(len(self.buffers), tuple(int(s) for s in shape), np.dtype(dtype), kind)
        self.buffers.append(b)
        return b

    @property
    def native_steps(self) -> int:
        return sum(1 for s in self.steps if not isinstance(s, Island))
