"""Stage 2 of the compiler: lowering a jaxpr to a :class:`~.program.Program` of fused
kernels, the program's node types (``program``, ``expr``, ``index``), and the passes over
programs (kernel merging, buffer planning).
"""
# The primitives lowered by modules of their own register their rules in ``lower.lower``
# (which does not import them: they build on it).
from kiln.compiler.lower import control, conv, random, window  # noqa: F401,E402
