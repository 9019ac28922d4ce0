"""Stage 2 of the compiler: lowering a jaxpr to a :class:`~.program.Program` of fused
kernels, the program's node types (``program``, ``expr``, ``index``), and the passes over
programs (kernel merging, buffer planning).
"""
