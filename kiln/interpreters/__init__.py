"""Transformations as interpreters over primitives: staging (jit, partial eval),
ad (jvp, linearize, transpose), batching (vmap, named axes)."""
