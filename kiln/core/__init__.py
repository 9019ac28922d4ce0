"""The kiln core: abstract values, primitives, traces and the jaxpr IR.

Nothing in here knows about specific primitives (those live in ``kiln.lax``) or
about specific transformations (those live in ``kiln.interpreters``).
"""

# ``jax.core``'s public names of the core's modules -> their module, resolved on first use
# (the submodules import each other, so nothing is imported here eagerly).
# ``kiln.extend.core`` documents the deprecated ones.
_PUBLIC = {
    "AbstractValue": "avals",
    "ShapedArray": "avals",
    "Trace": "trace",
    "Tracer": "trace",
    "eval_jaxpr": "jaxpr",
}


def _core_module(name: str):
    # Import statements (not importlib by name), so that the import graph shows them.
    if name == "avals":
        from kiln.core import avals
        return avals
    if name == "trace":
        from kiln.core import trace
        return trace
    from kiln.core import jaxpr
    return jaxpr


# ``jax.core``'s names defined above the core, and the module that installs each when it
# is imported (:func:`install_public`; ``import kiln`` imports both): the core names none
# of them.
_ABOVE = {
    "ensure_compile_time_eval": "kiln.scopes",
    "eval_context": "kiln.extend.core",
    "Atom": "kiln.extend.core",
    "Value": "kiln.extend.core",
    "ParamDict": "kiln.extend.core",
    "max_dim": "kiln.extend.core",
    "min_dim": "kiln.extend.core",
}
_installed: dict = {}


def install_public(**values) -> None:
    """Install ``jax.core`` names defined above the core (by ``kiln.scopes`` and
    ``kiln.extend.core``). ``_deprecated_attr`` is the resolver of the deprecated names."""
    _installed.update(values)


# Names JAX 0.10.2 still has in ``jax.core`` with a DeprecationWarning, or has removed (an
# AttributeError that says where the name went): ``kiln.extend.core`` answers for them.
_DEPRECATED = frozenset({
    "CallPrimitive", "DebugInfo", "DropVar", "Effect", "Effects", "InconclusiveDimensionOperation",
    "JaxprTypeError", "check_jaxpr", "concrete_or_error", "find_top_trace", "gensym",
    "get_opaque_trace_state", "jaxprs_in_params", "new_jaxpr_eqn", "no_effects",
    "primal_dtype_to_tangent_dtype", "unsafe_am_i_under_a_jit_DO_NOT_USE",
    "unsafe_am_i_under_a_vmap_DO_NOT_USE", "unsafe_get_axis_names_DO_NOT_USE",
    "nonempty_axis_env_DO_NOT_USE", "valid_jaxtype", "abstract_token", "is_concrete",
    "get_aval", "mapped_aval", "unmapped_aval", "set_current_trace", "take_current_trace",
    "traverse_jaxpr_params", "TraceTag", "call_impl", "subjaxprs", "AbstractToken",
    "pytype_aval_mappings",
})


def __getattr__(name):
    target = _PUBLIC.get(name)
    if target is not None:
        return getattr(_core_module(target), name)
    if name in _ABOVE or name in _DEPRECATED:
        key = name if name in _ABOVE else "_deprecated_attr"
        if key not in _installed:
            raise AttributeError(f"kiln.core.{name} is not installed yet: import kiln "
                                 f"({_ABOVE.get(name, 'kiln.extend.core')} installs it)")
        if name in _ABOVE:
            return _installed[name]
        return _installed[key](name)
    raise AttributeError(f"module 'kiln.core' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC) | set(_ABOVE))
