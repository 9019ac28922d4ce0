"""``kiln.nn``: activations, softmax, attention and initializers, as ``jax.nn``."""
from kiln.nn import initializers  # noqa: F401
from kiln.nn.functions import (  # noqa: F401
    celu,
    dot_product_attention,
    elu,
    gelu,
    get_scaled_dot_general_config,
    glu,
    hard_sigmoid,
    hard_silu,
    hard_swish,
    hard_tanh,
    identity,
    leaky_relu,
    log1mexp,
    log_sigmoid,
    log_softmax,
    logmeanexp,
    mish,
    one_hot,
    relu,
    relu6,
    scaled_dot_general,
    scaled_matmul,
    selu,
    sigmoid,
    silu,
    soft_sign,
    softmax,
    softplus,
    sparse_plus,
    sparse_sigmoid,
    squareplus,
    standardize,
    swish,
    tanh,
)


def __getattr__(name):
    # ``logsumexp`` comes from ``kiln.scipy.special``, imported on first access so that
    # ``import kiln`` does not import ``kiln.scipy``.
    if name == "logsumexp":
        from kiln.nn.functions import logsumexp
        globals()["logsumexp"] = logsumexp
        return logsumexp
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), "logsumexp"})
