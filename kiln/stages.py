"""``jax.stages``: the stages of ``jit``: a wrapped function is traced, lowered and
compiled (``jit(f).trace(x).lower().compile()``), giving ``Traced``, ``Lowered``,
``Compiled`` and the ``ArgInfo`` of each argument.
"""
from __future__ import annotations

from kiln import _traceback_util
from kiln._physical_tree import (
    tree_flatten,
    tree_unflatten,
)
from kiln.core.jaxpr import ClosedJaxpr, pp_jaxpr
from kiln.core.trace import get_aval
from kiln.interpreters.pjit import jit_p
from kiln.shape_eval import ShapeDtypeStruct

__all__ = ["ArgInfo", "Compiled", "Lowered", "Traced", "Wrapped"]  # noqa: F822 (Wrapped: __getattr__)


class Lowered:
    """The result of ``jit(f).lower(*args)``: the staged program, ready to compile."""

    #: Whether calls must not pass keyword arguments (JAX's ``_no_kwargs``): kiln's
    #: lowered and compiled functions take them.
    _no_kwargs = False

    def __init__(self, jaxpr: ClosedJaxpr, in_tree, out_tree, name, donated=()):
        self.jaxpr = jaxpr
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.name = name
        self.donated = list(donated)

    def as_text(self, dialect=None, **_kw) -> str:
        return pp_jaxpr(self.jaxpr.jaxpr)

    @property
    def out_info(self):
        """The outputs' shapes and dtypes: a pytree of ``ShapeDtypeStruct``
        (``jax.stages.Lowered.out_info``)."""
        return tree_unflatten(self.out_tree, [ShapeDtypeStruct(a.shape, a.dtype)
                                              for a in self.jaxpr.out_avals])

    @property
    def args_info(self):
        """The arguments' types and donation: a pytree ``(args, kwargs)`` of ``ArgInfo``
        (``jax.stages.Lowered.args_info``)."""
        donated = set(self.donated)
        n = len(self.jaxpr.in_avals) - self.in_tree.num_leaves
        infos = [ArgInfo(a, k in donated)
                 for k, a in enumerate(self.jaxpr.in_avals[n:])]
        return tree_unflatten(self.in_tree, infos)

    @property
    def in_avals(self):
        """The arguments' abstract values: a pytree ``(args, kwargs)`` of ``ShapedArray``
        (``jax.stages.Lowered.in_avals``)."""
        n = len(self.jaxpr.in_avals) - self.in_tree.num_leaves
        return tree_unflatten(self.in_tree, list(self.jaxpr.in_avals[n:]))

    @property
    def donate_argnums(self) -> tuple:
        """The positional arguments with a donated leaf (``jit``'s ``donate_argnums``)."""
        donated = set(self.donated)
        args, _ = tree_unflatten(self.in_tree, list(range(self.in_tree.num_leaves)))
        return tuple(i for i, a in enumerate(args)
                     if any(k in donated for k in tree_flatten(a)[0]))

    def compile(self, compiler_options=None) -> Compiled:
        """The executable (``jax.stages.Lowered.compile``). ``compiler_options`` are XLA's
        (``xla_*`` names): kiln runs no XLA, so they are checked for being XLA option
        names and otherwise ignored; any other name raises ``JaxRuntimeError`` as JAX's
        "No such compile option"."""
        _check_compiler_options(compiler_options)
        return Compiled(self)

    def compiler_ir(self, dialect: str | None = None):
        """The program in a compiler IR (``jax.stages.Lowered.compiler_ir``).

        kiln's compiler takes jaxprs: ``dialect=None`` (or ``"kiln"``/``"jaxpr"``) gives the
        staged jaxpr after the compiler's optimisation passes (inlining, simplification,
        constant folding, CSE, DCE), the program the C backend lowers. ``"hlo"`` gives that
        program printed in XLA's HLO syntax (an object with ``as_hlo_text()``, as JAX's
        ``XlaComputation``) and ``"stablehlo"`` in StableHLO MLIR syntax (an object whose
        ``str()`` and ``operation.get_asm()`` give the text, as JAX's ``ir.Module``); see
        ``kiln.compiler.hlo.text``. They are renderings of kiln's program, not XLA's
        output (XLA's passes never run).
        """
        from kiln.compiler.passes.passes import optimize
        if dialect in (None, "kiln", "jaxpr"):
            return optimize(self.jaxpr)
        if dialect == "hlo":
            from kiln.compiler.hlo.text import lower_to_hlo
            return lower_to_hlo(optimize(self.jaxpr, contract=False), self.name)
        if dialect == "stablehlo":
            from kiln.compiler.hlo.stablehlo_text import lower_to_stablehlo
            return lower_to_stablehlo(optimize(self.jaxpr, contract=False), self.name,
                                      self.out_tree)
        raise ValueError(
            f"Lowered.compiler_ir: unknown dialect {dialect!r}; kiln renders None (its "
            "optimised jaxpr), 'hlo' and 'stablehlo'")

    def cost_analysis(self) -> dict:
        """XLA-style cost estimate of the program: ``flops``, ``transcendentals``,
        ``bytes accessed`` and XLA's per-operand entries (those that are not zero), counted
        with XLA's rules on the jaxpr (``kiln._cost_analysis`` documents them)."""
        from kiln._cost_analysis import cost_analysis
        return cost_analysis(self.jaxpr)


class ArgInfo:
    """An argument's abstract value and whether it is donated (``jax.stages.ArgInfo``)."""

    __slots__ = ("_aval", "donated")

    def __init__(self, aval, donated: bool):
        self._aval = aval
        self.donated = donated

    shape = property(lambda self: self._aval.shape)
    dtype = property(lambda self: self._aval.dtype)

    def __eq__(self, other):
        return (type(other) is ArgInfo and self._aval == other._aval
                and self.donated == other.donated)

    def __hash__(self):
        return hash((self._aval, self.donated))

    def __repr__(self):
        return f"ArgInfo(_aval={self._aval!r}, donated={self.donated})"

def _check_compiler_options(options) -> None:
    if not options:
        return
    from kiln.errors import JaxRuntimeError
    for name in options:
        if not (isinstance(name, str) and name.startswith("xla_")):
            raise JaxRuntimeError(f"INVALID_ARGUMENT: No such compile option: '{name}'")


class Compiled:
    """An executable for fixed argument types (from ``Lowered.compile()``)."""

    def __init__(self, lowered: Lowered):
        self.lowered = lowered

    out_info = property(lambda self: self.lowered.out_info)
    args_info = property(lambda self: self.lowered.args_info)
    in_avals = property(lambda self: self.lowered.in_avals)
    in_tree = property(lambda self: self.lowered.in_tree)
    _no_kwargs = property(lambda self: self.lowered._no_kwargs)
    donate_argnums = property(lambda self: self.lowered.donate_argnums)

    def as_text(self) -> str:
        """The generated C source (the jaxpr's text when nothing in it compiles natively)."""
        from kiln.backends import cpu
        exe = cpu.executable_for(self.lowered.jaxpr, self.lowered.name)
        return exe.source if exe is not None else self.lowered.as_text()

    def as_c(self) -> str:
        """The generated C source, as :meth:`as_text`."""
        return self.as_text()

    @_traceback_util.api_boundary
    def __call__(self, *args, **kwargs):
        a_flat, a_tree = tree_flatten((args, kwargs))
        if a_tree != self.lowered.in_tree:
            raise TypeError(f"function compiled for {self.lowered.in_tree}, called with {a_tree}")
        exp = self.lowered.jaxpr.in_avals
        for x, a in zip(a_flat, exp):
            xa = get_aval(x)
            if xa.shape != a.shape or xa.dtype != a.dtype:
                raise TypeError(f"Argument types differ from the types for which this computation "
                                f"was compiled: got {xa.str_short()}, expected {a.str_short()}")
        outs = jit_p.bind(*a_flat, jaxpr=self.lowered.jaxpr, name=self.lowered.name)
        return tree_unflatten(self.lowered.out_tree, outs)

    def cost_analysis(self) -> dict:
        """The cost estimate of :meth:`Lowered.cost_analysis` (kiln does not re-count after
        its own fusion, where XLA's numbers change)."""
        return self.lowered.cost_analysis()

    def memory_analysis(self):
        """Argument, output, aliased (donated), temporary and peak bytes, as JAX's
        ``CompiledMemoryStats`` (see ``kiln.donation``)."""
        from kiln import donation
        return donation.memory_stats(self.lowered.jaxpr, self.lowered.donated,
                                     self.lowered.name)


class Traced:
    def __init__(self, jaxpr, lowered):
        self.jaxpr = jaxpr
        self._lowered = lowered

    def lower(self, *, lowering_platforms: tuple[str, ...] | None = None,
              _private_parameters=None):
        """The ``Lowered`` program (``jax.stages.Traced.lower``).

        Args:
          lowering_platforms: optional platform names to lower for. kiln compiles for
            its CPU only: the tuple must include ``'cpu'`` (lowering for several
            platforms, as JAX's multi-platform export, is the CPU lowering here); a tuple
            without it raises ``NotImplementedError``.
        """
        del _private_parameters
        if lowering_platforms is not None:
            if isinstance(lowering_platforms, str) or not all(
                    isinstance(p, str) for p in lowering_platforms):
                raise TypeError("lowering_platforms must be a tuple of platform names, got "
                                f"{lowering_platforms!r}")
            plats = tuple(p.lower() for p in lowering_platforms)
            if not plats:
                raise ValueError("lowering_platforms must name at least one platform")
            if "cpu" not in plats and "host" not in plats:
                raise NotImplementedError(
                    f"lowering for {plats}: kiln compiles only for its CPU; include 'cpu' "
                    "in lowering_platforms")
        return self._lowered



def __getattr__(name):
    """``Wrapped``: the type of ``kiln.jit(f)`` (resolved lazily: ``kiln.jitting`` imports
    this module)."""
    if name == "Wrapped":
        from kiln.jitting import JitWrapped
        return JitWrapped
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
