"""``kiln.example_libraries``: the small example libraries of ``jax.example_libraries``.

``stax`` (a minimal neural-network layer library) and ``optimizers`` (first-order
optimizers as ``(init, update, get_params)`` triples), built only from ``kiln`` and
giving the same parameters and results as JAX's for the same PRNG keys and inputs.
Import the submodules directly: ``from kiln.example_libraries import stax, optimizers``.
"""
