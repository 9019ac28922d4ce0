"""The former home of XLA's division rewrites, now ``xla_simplify.py`` (kept for imports)."""
from kiln.compiler.passes.xla_simplify import DIVIDE_DTYPES, xla_divisions, xla_simplify

__all__ = ["DIVIDE_DTYPES", "xla_divisions", "xla_simplify"]
