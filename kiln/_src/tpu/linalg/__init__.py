"""Stand-ins for ``jax._src.tpu.linalg``: ``qdwh`` (:mod:`kiln.scipy._qdwh`), ``svd``
(:mod:`kiln.scipy._qdwh_svd`), ``eigh`` (:mod:`kiln.scipy._qdwh_eigh`) and ``stack``
(:mod:`kiln.scipy._bounded_stack`)."""
