"""``kiln.example_libraries.stax``: a minimal neural-network specification library.

The same library as ``jax.example_libraries.stax`` (an example, not a full-featured
framework). A *layer* is a pair ``(init_fun, apply_fun)``:

* ``init_fun(rng, input_shape) -> (output_shape, params)`` draws the layer's parameters
  from the PRNG key ``rng`` for inputs of shape ``input_shape``;
* ``apply_fun(params, inputs, **kwargs) -> outputs`` runs the layer; layers that need
  randomness (``Dropout``) take the key as the keyword argument ``rng``.

Layer constructors are CamelCase (``Dense``, ``Conv``, ``Relu``); combinators
(``serial``, ``parallel``, ``shape_dependent``) build bigger layers from smaller ones.
Parameters are drawn with ``kiln.random`` and ``kiln.nn.initializers`` in the same order as
JAX's stax, so the same key gives the same parameters.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import kiln.numpy as jnp
from kiln import lax, random
from kiln.nn import (
    elu,
    gelu,
    leaky_relu,
    log_softmax,
    relu,
    selu,
    sigmoid,
    softmax,
    softplus,
    standardize,
)
from kiln.nn.initializers import glorot_normal, normal, ones, zeros

__all__ = [
    "AvgPool", "BatchNorm", "Conv", "Conv1DTranspose", "ConvTranspose", "Dense", "Dropout",
    "Elu", "Exp", "FanInConcat", "FanInSum", "FanOut", "Flatten", "Gelu", "GeneralConv",
    "GeneralConvTranspose", "Identity", "LeakyRelu", "LogSoftmax", "MaxPool", "Relu", "Selu",
    "Sigmoid", "Softmax", "Softplus", "SumPool", "Tanh", "elementwise", "parallel", "serial",
    "shape_dependent",
    # re-exported activations and initializers, as in JAX's module
    "elu", "gelu", "glorot", "glorot_normal", "leaky_relu", "log_softmax", "logsoftmax",
    "normal", "ones", "randn", "relu", "selu", "sigmoid", "softmax", "softplus",
    "standardize", "zeros",
]

# Older names kept by JAX's stax for backwards compatibility.
glorot = glorot_normal
randn = normal
logsoftmax = log_softmax

Shape = Any
Params = Any
InitFun = Callable[[Any, Shape], tuple[Shape, Params]]
ApplyFun = Callable[..., Any]
Layer = tuple[InitFun, ApplyFun]


# ---------------------------------------------------------------------------- dense / conv

def Dense(out_dim: int, W_init: Callable = glorot_normal(),  # noqa: B008
          b_init: Callable = normal()) -> Layer:  # noqa: B008
    """Layer constructor for a dense (fully connected) layer ``inputs @ W + b``.

    Args:
      out_dim: the number of output features.
      W_init: initializer for the ``(in_dim, out_dim)`` weight matrix.
      b_init: initializer for the ``(out_dim,)`` bias.

    Returns:
      An ``(init_fun, apply_fun)`` pair; the parameters are ``(W, b)``.
    """
    def init_fun(rng, input_shape):
        out_shape = tuple(input_shape[:-1]) + (out_dim,)
        w_key, b_key = random.split(rng)
        W = W_init(w_key, (input_shape[-1], out_dim))
        b = b_init(b_key, (out_dim,))
        return out_shape, (W, b)

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return jnp.dot(inputs, W) + b

    return init_fun, apply_fun


def _kernel_and_bias_shapes(dimension_numbers, out_chan, filter_shape, input_shape):
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    spatial = iter(filter_shape)
    kernel_shape = []
    for c in rhs_spec:
        if c == "O":
            kernel_shape.append(out_chan)
        elif c == "I":
            kernel_shape.append(input_shape[lhs_spec.index("C")])
        else:
            kernel_shape.append(next(spatial))
    bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
    return kernel_shape, bias_shape


def GeneralConv(dimension_numbers: tuple[str, str, str], out_chan: int,
                filter_shape: Sequence[int], strides: Sequence[int] | None = None,
                padding: str | Sequence[tuple[int, int]] = "VALID",
                W_init: Callable | None = None,
                b_init: Callable = normal(1e-6)) -> Layer:  # noqa: B008
    """Layer constructor for a general convolution layer.

    Args:
      dimension_numbers: ``(lhs_spec, rhs_spec, out_spec)`` layout strings, e.g.
        ``('NHWC', 'HWIO', 'NHWC')``.
      out_chan: the number of output channels.
      filter_shape: the spatial shape of the kernel.
      strides: the spatial strides (default all ones).
      padding: ``'VALID'``, ``'SAME'``, ``'SAME_LOWER'`` or explicit ``(low, high)`` pairs.
      W_init: kernel initializer (default Glorot normal over the kernel's ``I``/``O`` axes).
      b_init: bias initializer.

    Returns:
      An ``(init_fun, apply_fun)`` pair; the parameters are ``(W, b)``.
    """
    _, rhs_spec, _ = dimension_numbers
    unit = (1,) * len(filter_shape)
    strides = strides or unit
    if W_init is None:
        W_init = glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape):
        kernel_shape, bias_shape = _kernel_and_bias_shapes(
            dimension_numbers, out_chan, filter_shape, input_shape)
        out_shape = lax.conv_general_shape_tuple(
            input_shape, kernel_shape, strides, padding, dimension_numbers)
        w_key, b_key = random.split(rng)
        return out_shape, (W_init(w_key, kernel_shape), b_init(b_key, bias_shape))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        out = lax.conv_general_dilated(inputs, W, strides, padding, unit, unit,
                                       dimension_numbers=dimension_numbers)
        return out + b

    return init_fun, apply_fun


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))
Conv.__doc__ = "Layer constructor for a 2-D convolution in NHWC/HWIO layout (see GeneralConv)."


def GeneralConvTranspose(dimension_numbers: tuple[str, str, str], out_chan: int,
                         filter_shape: Sequence[int], strides: Sequence[int] | None = None,
                         padding: str | Sequence[tuple[int, int]] = "VALID",
                         W_init: Callable | None = None,
                         b_init: Callable = normal(1e-6)) -> Layer:  # noqa: B008
    """Layer constructor for a general transposed-convolution layer.

    Args:
      dimension_numbers: ``(lhs_spec, rhs_spec, out_spec)`` layout strings.
      out_chan: the number of output channels.
      filter_shape: the spatial shape of the kernel.
      strides: the spatial strides (default all ones).
      padding: ``'VALID'``, ``'SAME'`` or explicit ``(low, high)`` pairs, as
        ``lax.conv_transpose``.
      W_init: kernel initializer (default Glorot normal over the kernel's ``I``/``O`` axes).
      b_init: bias initializer.

    Returns:
      An ``(init_fun, apply_fun)`` pair; the parameters are ``(W, b)``.
    """
    _, rhs_spec, _ = dimension_numbers
    strides = strides or (1,) * len(filter_shape)
    if W_init is None:
        W_init = glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape):
        kernel_shape, bias_shape = _kernel_and_bias_shapes(
            dimension_numbers, out_chan, filter_shape, input_shape)
        out_shape = lax.conv_transpose_shape_tuple(
            input_shape, kernel_shape, strides, padding, dimension_numbers)
        w_key, b_key = random.split(rng)
        return out_shape, (W_init(w_key, kernel_shape), b_init(b_key, bias_shape))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        out = lax.conv_transpose(inputs, W, strides, padding,
                                 dimension_numbers=dimension_numbers)
        return out + b

    return init_fun, apply_fun


Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))
Conv1DTranspose.__doc__ = "Layer constructor for a 1-D transposed convolution (NHC/HIO)."
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))
ConvTranspose.__doc__ = "Layer constructor for a 2-D transposed convolution (NHWC/HWIO)."


# ---------------------------------------------------------------------------- normalization

def BatchNorm(axis: int | Sequence[int] = (0, 1, 2), epsilon: float = 1e-5,
              center: bool = True, scale: bool = True,
              beta_init: Callable = zeros, gamma_init: Callable = ones) -> Layer:
    """Layer constructor for batch normalization (statistics of the current batch).

    Args:
      axis: the axis or axes to normalize over (the batch statistics axes).
      epsilon: added to the variance.
      center: whether to add a learned offset ``beta``.
      scale: whether to multiply by a learned scale ``gamma``.
      beta_init: initializer for ``beta``.
      gamma_init: initializer for ``gamma``.

    Returns:
      An ``(init_fun, apply_fun)`` pair; the parameters are ``(beta, gamma)``, each ``()``
      when disabled.
    """
    axes = (axis,) if jnp.isscalar(axis) else axis

    def init_fun(rng, input_shape):
        shape = tuple(d for i, d in enumerate(input_shape) if i not in axes)
        k_beta, k_gamma = random.split(rng)
        beta = beta_init(k_beta, shape) if center else ()
        gamma = gamma_init(k_gamma, shape) if scale else ()
        return input_shape, (beta, gamma)

    def apply_fun(params, x, **kwargs):
        beta, gamma = params
        expand = tuple(None if i in axes else slice(None) for i in range(jnp.ndim(x)))
        z = standardize(x, axes, epsilon=epsilon)
        if center and scale:
            return gamma[expand] * z + beta[expand]
        if center:
            return z + beta[expand]
        if scale:
            return gamma[expand] * z
        return z

    return init_fun, apply_fun


# ---------------------------------------------------------------------------- elementwise

def elementwise(fun: Callable, **fun_kwargs) -> Layer:
    """Layer that applies ``fun(inputs, **fun_kwargs)``; it has no parameters.

    Args:
      fun: an elementwise (shape-preserving) function.
      **fun_kwargs: keyword arguments passed to ``fun``.

    Returns:
      An ``(init_fun, apply_fun)`` pair whose parameters are ``()``.
    """
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        return fun(inputs, **fun_kwargs)

    return init_fun, apply_fun


Tanh = elementwise(jnp.tanh)
Relu = elementwise(relu)
Exp = elementwise(jnp.exp)
LogSoftmax = elementwise(log_softmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


# ---------------------------------------------------------------------------- pooling

def _insert_unit_dims(window_shape, strides, spec):
    n_spatial = len(window_shape)
    if spec is None:
        batch_and_feature = (0, n_spatial + 1)
    else:
        batch_and_feature = (spec.index("N"), spec.index("C"))
    window_shape, strides = tuple(window_shape), tuple(strides)
    for i in sorted(batch_and_feature):
        window_shape = window_shape[:i] + (1,) + window_shape[i:]
        strides = strides[:i] + (1,) + strides[i:]
    return window_shape, strides


def _average_rescaler(spatial_window, spatial_strides, padding):
    # Divides a windowed sum by the number of (unpadded) input elements in each window.
    def rescale(outputs, inputs, spec):
        if spec is None:
            batch_and_feature = (0, inputs.ndim - 1)
        else:
            batch_and_feature = (spec.index("N"), spec.index("C"))
        spatial_shape = tuple(d for i, d in enumerate(inputs.shape)
                              if i not in batch_and_feature)
        counts = lax.reduce_window(jnp.ones(spatial_shape, dtype=inputs.dtype), 0.,
                                   lax.add, spatial_window, spatial_strides, padding)
        for i in sorted(batch_and_feature):
            counts = jnp.expand_dims(counts, i)
        return outputs / counts
    return rescale


def _make_pool(reducer, init_val, rescaler, name, what):
    def Pool(window_shape: Sequence[int], strides: Sequence[int] | None = None,
             padding: str | Sequence[tuple[int, int]] = "VALID",
             spec: str | None = None) -> Layer:
        strides = strides or (1,) * len(window_shape)
        rescale = rescaler(window_shape, strides, padding) if rescaler else None
        full_window, full_strides = _insert_unit_dims(window_shape, strides, spec)

        def init_fun(rng, input_shape):
            pads = lax.padtype_to_pads(input_shape, full_window, full_strides, padding)
            unit = (1,) * len(full_window)
            out_shape = lax.reduce_window_shape_tuple(
                input_shape, full_window, full_strides, pads, unit, unit)
            return out_shape, ()

        def apply_fun(params, inputs, **kwargs):
            out = lax.reduce_window(inputs, init_val, reducer, full_window,
                                    full_strides, padding)
            return rescale(out, inputs, spec) if rescale else out

        return init_fun, apply_fun

    Pool.__name__ = Pool.__qualname__ = name
    Pool.__doc__ = f"""Layer constructor for a {what} pooling layer.

    Args:
      window_shape: the spatial window shape.
      strides: the spatial strides (default all ones).
      padding: ``'VALID'``, ``'SAME'``, ``'SAME_LOWER'`` or explicit ``(low, high)`` pairs
        for the spatial dimensions.
      spec: the input layout, e.g. ``'NHWC'`` (the default puts the batch axis first and
        the feature axis last).

    Returns:
      An ``(init_fun, apply_fun)`` pair with no parameters.
    """
    return Pool


MaxPool = _make_pool(lax.max, -jnp.inf, None, "MaxPool", "max")
SumPool = _make_pool(lax.add, 0., None, "SumPool", "sum")
AvgPool = _make_pool(lax.add, 0., _average_rescaler, "AvgPool", "average")


# ---------------------------------------------------------------------------- shape layers

def _flatten_layer() -> Layer:
    def init_fun(rng, input_shape):
        return (input_shape[0], math.prod(input_shape[1:])), ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.reshape(inputs, (inputs.shape[0], -1))

    return init_fun, apply_fun


Flatten = _flatten_layer()
"""Layer that flattens every dimension but the leading (batch) one."""


def _identity_layer() -> Layer:
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        return inputs

    return init_fun, apply_fun


Identity = _identity_layer()
"""Layer that returns its inputs unchanged."""


def FanOut(num: int) -> Layer:
    """Layer constructor that copies its input into a list of ``num`` inputs.

    Args:
      num: the number of copies.

    Returns:
      An ``(init_fun, apply_fun)`` pair with no parameters.
    """
    def init_fun(rng, input_shape):
        return [input_shape] * num, ()

    def apply_fun(params, inputs, **kwargs):
        return [inputs] * num

    return init_fun, apply_fun


def _fan_in_sum_layer() -> Layer:
    def init_fun(rng, input_shape):
        return input_shape[0], ()

    def apply_fun(params, inputs, **kwargs):
        return sum(inputs)

    return init_fun, apply_fun


FanInSum = _fan_in_sum_layer()
"""Layer that sums a sequence of inputs."""


def FanInConcat(axis: int = -1) -> Layer:
    """Layer constructor that concatenates a sequence of inputs along ``axis``.

    Args:
      axis: the concatenation axis.

    Returns:
      An ``(init_fun, apply_fun)`` pair with no parameters.
    """
    def init_fun(rng, input_shape):
        first = tuple(input_shape[0])
        ax = axis % len(first)
        size = sum(s[ax] for s in input_shape)
        return first[:ax] + (size,) + first[ax + 1:], ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.concatenate(inputs, axis)

    return init_fun, apply_fun


def Dropout(rate: float, mode: str = "train") -> Layer:
    """Layer constructor for dropout.

    As in JAX's stax, ``rate`` is the probability of *keeping* each element: in ``'train'``
    mode an element is kept (and divided by ``rate``) with probability ``rate`` and zeroed
    otherwise; in any other mode the layer is the identity.

    Args:
      rate: the keep probability.
      mode: ``'train'`` to drop elements, anything else to pass inputs through.

    Returns:
      An ``(init_fun, apply_fun)`` pair with no parameters; ``apply_fun`` needs the
      keyword argument ``rng``.
    """
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.get("rng")
        if rng is None:
            raise ValueError(
                "Dropout's apply_fun needs a PRNG key: call it as "
                "apply_fun(params, inputs, rng=key) with a key from kiln.random.key "
                "(or kiln.random.PRNGKey).")
        if mode == "train":
            keep = random.bernoulli(rng, rate, inputs.shape)
            return jnp.where(keep, inputs / rate, 0)
        return inputs

    return init_fun, apply_fun


# ---------------------------------------------------------------------------- combinators

def serial(*layers: Layer) -> Layer:
    """Combinator that composes layers one after another.

    Args:
      *layers: ``(init_fun, apply_fun)`` pairs, applied first to last.

    Returns:
      An ``(init_fun, apply_fun)`` pair; its parameters are a list holding each layer's.
      ``init_fun`` splits the key once per layer; ``apply_fun`` splits ``rng`` (when
      given) into one key per layer.
    """
    n = len(layers)
    init_funs = [layer[0] for layer in layers]
    apply_funs = [layer[1] for layer in layers]

    def init_fun(rng, input_shape):
        params = []
        shape = input_shape
        for init in init_funs:
            rng, sub = random.split(rng)
            shape, p = init(sub, shape)
            params.append(p)
        return shape, params

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        keys = random.split(rng, n) if rng is not None else (None,) * n
        out = inputs
        for fun, p, key in zip(apply_funs, params, keys):
            out = fun(p, out, rng=key, **kwargs)
        return out

    return init_fun, apply_fun


def parallel(*layers: Layer) -> Layer:
    """Combinator that applies layers side by side, one per input of a sequence.

    Usually combined with ``FanOut`` and ``FanInSum``/``FanInConcat``.

    Args:
      *layers: ``(init_fun, apply_fun)`` pairs.

    Returns:
      An ``(init_fun, apply_fun)`` pair: ``init_fun`` takes a sequence of input shapes and
      returns ``(output_shapes, params)`` (tuples, one entry per layer); ``apply_fun``
      takes a sequence of inputs and returns a list of outputs.
    """
    n = len(layers)
    init_funs = [layer[0] for layer in layers]
    apply_funs = [layer[1] for layer in layers]

    def init_fun(rng, input_shape):
        keys = random.split(rng, n)
        results = [init(key, shape)
                   for init, key, shape in zip(init_funs, keys, input_shape)]
        return tuple(zip(*results))

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        keys = random.split(rng, n) if rng is not None else (None,) * n
        return [f(p, x, rng=key, **kwargs)
                for f, p, x, key in zip(apply_funs, params, inputs, keys)]

    return init_fun, apply_fun


def shape_dependent(make_layer: Callable[[Shape], Layer]) -> Layer:
    """Combinator that builds a layer only once the input shape is known.

    Args:
      make_layer: a function from an input shape to an ``(init_fun, apply_fun)`` pair.

    Returns:
      An ``(init_fun, apply_fun)`` pair that calls ``make_layer`` with the input shape
      (``init_fun``) or with ``inputs.shape`` (``apply_fun``).
    """
    def init_fun(rng, input_shape):
        return make_layer(input_shape)[0](rng, input_shape)

    def apply_fun(params, inputs, **kwargs):
        return make_layer(inputs.shape)[1](params, inputs, **kwargs)

    return init_fun, apply_fun
