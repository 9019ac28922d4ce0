"""``kiln.lax``: the primitive operations, as in ``jax.lax``.

Each module defines primitives together with all of their rules; this package
re-exports the public functions.
"""
from kiln.lax import edtype, linalg  # noqa: F401
from kiln.lax.accuracy import AccuracyMode, Tolerance  # noqa: F401
from kiln.lax.arith import *  # noqa: F401,F403
from kiln.lax.autodiff_ops import *  # noqa: F401,F403
from kiln.lax.composite import composite  # noqa: F401
from kiln.lax.control import *  # noqa: F401,F403
from kiln.lax.conv_local import *  # noqa: F401,F403
from kiln.lax.convolution import *  # noqa: F401,F403
from kiln.lax.copying import copy_p  # noqa: F401
from kiln.lax.cumulative import *  # noqa: F401,F403
from kiln.lax.derived import *  # noqa: F401,F403
from kiln.lax.dot import *  # noqa: F401,F403
from kiln.lax.dtype_of import dtype  # noqa: F401
from kiln.lax.elementwise import *  # noqa: F401,F403
from kiln.lax.fourier import FftType, fft, fft_p  # noqa: F401
from kiln.lax.gather_scatter import *  # noqa: F401,F403
from kiln.lax.monoid_reductions import *  # noqa: F401,F403
from kiln.lax.parallel import *  # noqa: F401,F403
from kiln.lax.ragged import RaggedDotDimensionNumbers, ragged_dot, ragged_dot_general  # noqa: F401
from kiln.lax.reduce_general import *  # noqa: F401,F403
from kiln.lax.reductions import *  # noqa: F401,F403
from kiln.lax.rng_bit_generator import *  # noqa: F401,F403
from kiln.lax.sharding_constraint import with_sharding_constraint  # noqa: F401
from kiln.lax.slicing import *  # noqa: F401,F403
from kiln.lax.sorting import *  # noqa: F401,F403
from kiln.lax.structural import *  # noqa: F401,F403
from kiln.lax.windowed import *  # noqa: F401,F403
