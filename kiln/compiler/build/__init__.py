"""Stage 4 of the compiler: building C with the system compiler (flags, disk cache, faults),
the native runtime and BLAS glue, and loading and calling the built programs.
"""
