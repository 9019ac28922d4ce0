"""Stage 3 of the compiler: printing a :class:`~kiln.compiler.lower.program.Program` as C
(kernels, row groups, reductions, control flow).
"""
