"""``kiln.numpy``: a NumPy-compatible API on kiln arrays, behaving like ``jax.numpy``.

Everything here works on concrete ``kiln.Array`` values and on tracers (under ``jit``,
``grad``, ``vmap``...), because every function is built from ``kiln.lax`` operations and
static shape arithmetic. The modules:

* ``_util``: argument checks, dtype promotion, broadcasting, axis handling;
* ``_creation``: ``array``, ``zeros``, ``arange``, ``linspace``, ``eye``, ...;
* ``_ufuncs``: elementwise functions;
* ``_reductions``: ``sum``, ``mean``, ``max``, ``argmax``, ``cumsum``, ...;
* ``_shape``: ``reshape``, ``transpose``, ``concatenate``, ``split``, ``tile``, ...;
* ``_array_ops``: ``choose``, ``compress``, ``view``, ``diff``, ``cross``, ``block``, ...;
* ``_index_tricks``: ``indices``, ``unravel_index``, ``ix_``, ``s_``, ...;
* ``_indexing`` / ``_indexing_at``: ``x[idx]``, ``take``, ``x.at[idx].set(...)``;
* ``_pad``: ``pad``;
* ``_linalg_basic``: ``dot``, ``matmul``, ``einsum``, ``tensordot``, ...;
* ``_dtype_funcs``: ``astype``, ``result_type``, ``finfo``, ...;
* ``_scalar_types``: ``float32``, ``int8``, ``bfloat16``, ... (array constructors);
* ``_statistics``: ``quantile``/``percentile``/``median`` (and ``nan*``), ``cov``,
  ``corrcoef``, ``bincount``, ``histogram*``;
* ``_setops``: ``nonzero``/``where``/``argwhere`` with ``size=``, ``unique*``, ``*1d`` set ops;
* ``_polynomial``: ``poly*``, ``roots``; ``_put``: ``put``, ``put_along_axis``;
* ``_signal``: ``convolve``/``correlate``, window functions; ``_differences``: ``interp``,
  ``gradient``, ``ediff1d``, ``trapezoid``, ``unwrap``, ``vander``; ``_number_parts``:
  ``gcd``/``lcm``, ``frexp``/``modf``, ``packbits``; ``_functional``: ``piecewise``,
  ``apply_along_axis``, ``fromfunction``, ``fill_diagonal``; ``_editing``: ``geomspace``,
  ``insert``/``delete``, ``trim_zeros``;
* ``_vectorize``: ``vectorize``, the ``ufunc`` class and objects (``jnp.add.reduce``);
* ``_index_grids``: ``mgrid``, ``ogrid``, ``r_``, ``c_``; ``_einsum_path``: ``einsum_path``
  and the contraction order of ``einsum``; ``_io``: ``load``, ``frombuffer``, ....;
* ``_array_api``: ``__array_api_version__`` and ``__array_namespace_info__`` (array API).
"""
from __future__ import annotations

import numpy as _np

from kiln.numpy import fft, linalg  # noqa: F401
from kiln.numpy._array_api import __array_api_version__, __array_namespace_info__  # noqa: F401
from kiln.numpy._array_ops import *  # noqa: F401,F403
from kiln.numpy._creation import *  # noqa: F401,F403
from kiln.numpy._dtype_funcs import *  # noqa: F401,F403
from kiln.numpy._index_tricks import *  # noqa: F401,F403
from kiln.numpy._indexing import *  # noqa: F401,F403
from kiln.numpy._indexing import _rewriting_take  # noqa: F401
from kiln.numpy._linalg_basic import *  # noqa: F401,F403
from kiln.numpy._ndarray import ndarray  # noqa: F401
from kiln.numpy._pad import pad  # noqa: F401
from kiln.numpy._reductions import *  # noqa: F401,F403
from kiln.numpy._scalar_types import *  # noqa: F401,F403
from kiln.numpy._shape import *  # noqa: F401,F403
from kiln.numpy._sorting import *  # noqa: F401,F403
from kiln.numpy._ufuncs import *  # noqa: F401,F403

# Later modules replace some names above on purpose: ``nonzero``/``where``/``argwhere``/
# ``flatnonzero`` gain traced ``size=`` support, ``einsum`` gains contraction-path
# optimization, and ``add``, ``multiply``, ... become ``ufunc`` objects (as in JAX).
_late = None  # a statement: import sorting must keep the block below after the one above
from kiln.numpy._differences import *  # noqa: E402,F401,F403
from kiln.numpy._editing import *  # noqa: E402,F401,F403
from kiln.numpy._einsum_path import *  # noqa: E402,F401,F403
from kiln.numpy._functional import *  # noqa: E402,F401,F403
from kiln.numpy._index_grids import *  # noqa: E402,F401,F403
from kiln.numpy._io import *  # noqa: E402,F401,F403
from kiln.numpy._number_parts import *  # noqa: E402,F401,F403
from kiln.numpy._polynomial import *  # noqa: E402,F401,F403
from kiln.numpy._put import *  # noqa: E402,F401,F403
from kiln.numpy._setops import *  # noqa: E402,F401,F403
from kiln.numpy._signal import *  # noqa: E402,F401,F403
from kiln.numpy._statistics import *  # noqa: E402,F401,F403
from kiln.numpy._vectorize import *  # noqa: E402,F401,F403
from kiln.numpy._vectorize import UFUNCS as _UFUNCS  # noqa: E402

globals().update(_UFUNCS)
del _late, _UFUNCS

# Constants, as in jax.numpy (plain Python floats; newaxis is None).
pi = _np.pi
e = _np.e
inf = _np.inf
nan = _np.nan
euler_gamma = _np.euler_gamma
newaxis = None

bool = bool_  # noqa: A001,F405  (NumPy 2 / JAX name of the boolean scalar type)

# NumPy's abstract scalar hierarchy, for issubdtype(x.dtype, jnp.floating) and friends.
generic = _np.generic
number = _np.number
inexact = _np.inexact
floating = _np.floating
complexfloating = _np.complexfloating
integer = _np.integer
signedinteger = _np.signedinteger
unsignedinteger = _np.unsignedinteger
flexible = _np.flexible
character = _np.character
object_ = _np.object_

printoptions = _np.printoptions
set_printoptions = _np.set_printoptions
get_printoptions = _np.get_printoptions

del annotations
