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

    def as_text(self, dialect: str | None = None, *, debug_info: bool = False) -> str:
        """The program as text (``jax.stages.Lowered.as_text``): by default, as JAX, in
        StableHLO MLIR syntax (``compiler_ir("stablehlo")``'s text: kiln's program, with
        ``lax.composite`` operations kept as ``stablehlo.composite``); ``dialect="hlo"``
        in HLO syntax; ``"jaxpr"`` (or ``"kiln"``) the staged jaxpr as ``make_jaxpr``
        prints it. ``debug_info`` is accepted and adds nothing (kiln keeps no MLIR
        locations)."""
        if dialect in ("jaxpr", "kiln"):
            return pp_jaxpr(self.jaxpr.jaxpr)
        if dialect == "hlo":
            return self.compiler_ir("hlo").as_hlo_text()
        if dialect not in (None, "stablehlo"):
            raise ValueError(f"Lowered.as_text: unknown dialect {dialect!r}; kiln renders "
                             "'stablehlo' (the default), 'hlo' and 'jaxpr'")
        return str(self.compiler_ir("stablehlo"))

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
            return lower_to_stablehlo(optimize(self.jaxpr, contract=False,
                                               keep_calls={"composite"}),
                                      self.name, self.out_tree)
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

# The value types of XLA's best-known compile options (its ``DebugOptions`` fields), so
# that a value XLA would refuse is refused here too; other ``xla_*`` names are accepted
# without a check of their value (kiln runs no XLA and ignores them).
_XLA_OPTION_TYPES = {
    **dict.fromkeys((
        "xla_embed_ir_in_executable", "xla_cpu_enable_fast_math", "xla_cpu_fast_math_honor_infs",
        "xla_cpu_fast_math_honor_nans", "xla_cpu_fast_math_honor_division",
        "xla_cpu_fast_math_honor_functions", "xla_llvm_disable_expensive_passes",
        "xla_dump_hlo_as_text", "xla_dump_hlo_as_proto", "xla_dump_hlo_as_html",
        "xla_cpu_use_thunk_runtime", "xla_gpu_enable_latency_hiding_scheduler",
        "xla_detailed_logging", "xla_enable_dumping", "xla_gpu_enable_triton_gemm",
        "xla_cpu_enable_concurrency_optimized_scheduler"), "bool"),
    **dict.fromkeys((
        "xla_backend_optimization_level", "xla_gpu_autotune_level",
        "xla_cpu_parallel_codegen_split_count"), "int32"),
    **dict.fromkeys((
        "xla_dump_to", "xla_cpu_max_isa", "xla_dump_hlo_pass_re", "xla_dump_hlo_module_re",
        "xla_gpu_cuda_data_dir"), "string"),
}


def _option_value_ok(kind: str, value) -> bool:
    if kind == "bool":
        return isinstance(value, bool) or value in ("True", "False")
    if kind == "int32":
        if isinstance(value, str):
            try:
                int(value)
            except ValueError:
                return False
            return True
        return type(value) is int
    return isinstance(value, str)


def _check_compiler_options(options) -> None:
    if not options:
        return
    from kiln.errors import JaxRuntimeError
    for name, value in options.items():
        if not (isinstance(name, str) and name.startswith("xla_")):
            raise JaxRuntimeError(f"INVALID_ARGUMENT: No such compile option: '{name}'")
        kind = _XLA_OPTION_TYPES.get(name)
        if kind is not None and not _option_value_ok(kind, value):
            shown = (int(value) if isinstance(value, bool)
                     or (isinstance(value, float) and value.is_integer()) else value)
            raise JaxRuntimeError(f"INVALID_ARGUMENT: While setting option {name}, "
                                  f"'{shown}' is not a valid {kind} value.")


class _Leaf:
    """A leaf standing for any argument (described as "pytree leaf")."""


def check_in_tree(compiled_tree, called_tree) -> None:
    """The ``TypeError`` of JAX's ``Compiled.__call__`` when the arguments' pytree
    structure is not the one the executable was compiled for."""
    if called_tree == compiled_tree:
        return
    from kiln.tree_util import equality_errors, keystr
    n_c, n_a = compiled_tree.num_leaves, called_tree.num_leaves
    leaf = _Leaf()
    errs = list(equality_errors(tree_unflatten(called_tree, [leaf] * n_a),
                                tree_unflatten(compiled_tree, [leaf] * n_c)))
    lines = ["Function compiled with input pytree does not match the input pytree it was "
             f"called with. There are {len(errs)} mismatches, including:"]
    named = lambda t: "pytree leaf" if t == str(_Leaf) else t  # noqa: E731
    for path, thing1, thing2, why in errs:
        thing1, thing2 = named(thing1), named(thing2)
        base = ("args", "kwargs")[path[0].idx] if path else "args"
        lines.append(f"    * at {base}{keystr(tuple(path[1:]))}, seen {thing2} but now "
                     f"given {thing1}, so {why}")
    raise TypeError("\n".join(lines))


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

    def runtime_executable(self):
        """The object that runs (``jax.stages.Compiled.runtime_executable``, for
        debugging): kiln's native executable of the program, or its jaxpr where nothing
        in it compiles natively (the reference backend interprets it)."""
        from kiln.backends import cpu
        exe = cpu.executable_for(self.lowered.jaxpr, self.lowered.name)
        return exe if exe is not None else self.lowered.jaxpr

    @_traceback_util.api_boundary
    def __call__(self, *args, **kwargs):
        a_flat, a_tree = tree_flatten((args, kwargs))
        check_in_tree(self.lowered.in_tree, a_tree)
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
