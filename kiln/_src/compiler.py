"""``jax._src.compiler``: present so that libraries importing it load (Chex does).

JAX compiles through ``backend_compile_and_load`` here, and ``chex.restrict_backends``
patches that function to forbid compiling for some platforms. kiln compiles in
``kiln.backends.cpu`` and has no such entry point, so ``chex.restrict_backends`` finds
nothing to patch and restricts nothing (kiln has only the CPU backend).
"""
