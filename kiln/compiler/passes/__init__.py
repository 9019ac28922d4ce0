"""Stage 1 of the compiler: optimisation passes over jaxprs (inlining, simplification,
constant folding, CSE, DCE), run before lowering.
"""
