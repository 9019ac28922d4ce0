"""Stand-ins for ``jax._src.tpu.linalg``: ``qdwh`` (:mod:`kiln.scipy._qdwh`) and ``svd``
(:mod:`kiln.scipy._qdwh_svd`)."""
