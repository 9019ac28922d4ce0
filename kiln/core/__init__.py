"""The kiln core: abstract values, primitives, traces and the jaxpr IR.

Nothing in here knows about specific primitives (those live in ``kiln.lax``) or
about specific transformations (those live in ``kiln.interpreters``).
"""
