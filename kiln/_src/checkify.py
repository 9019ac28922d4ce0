"""``jax._src.checkify``: the checkify implementation's names (Flax NNX imports the module
for ``checkify``, ``Error``, ``JaxException``, ``user_checks`` and the ``Out`` type)."""
from kiln.errors import JaxRuntimeError  # noqa: F401,E402
from kiln.experimental.checkify._core import *  # noqa: F401,F403
from kiln.experimental.checkify._core import Out, __all__  # noqa: F401
from kiln.experimental.checkify._errors import (  # noqa: F401,E402
    ErrorEffect,
    FailedCheckError,
    OOBError,
)
