"""``kiln.example_libraries.optimizers``: example first-order optimizers.

The same library as ``jax.example_libraries.optimizers`` (examples; for a full-featured
optimizer library JAX points to Optax). An optimizer is a triple
``(init_fun, update_fun, get_params)``:

* ``init_fun(params) -> opt_state`` builds the optimizer state from a pytree of parameters;
* ``update_fun(step, grads, opt_state) -> opt_state`` takes one step, given the step index
  and a pytree of gradients with the structure of the parameters;
* ``get_params(opt_state) -> params`` reads the parameters back, so that
  ``get_params(init_fun(params))`` equals ``params``.

Each optimizer is written for a single array and lifted to pytrees by the ``optimizer``
decorator; the state is an ``OptimizerState`` (a registered pytree), so it passes through
``kiln.jit`` and the other transformations. The update formulas are JAX's, operation for
operation. Typical use::

  opt_init, opt_update, get_params = optimizers.adam(1e-3)
  opt_state = opt_init(params)

  @kiln.jit
  def step(i, opt_state, batch):
      loss, grads = kiln.value_and_grad(loss_fn)(get_params(opt_state), batch)
      return loss, opt_update(i, grads, opt_state)
"""
from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable
from typing import Any, NamedTuple

import kiln.numpy as jnp
from kiln import tree as _tree
from kiln import tree_util as _tree_util

__all__ = [
    "Array", "InitFn", "JoinPoint", "Optimizer", "OptimizerState", "Params", "ParamsFn",
    "Schedule", "State", "Step", "UpdateFn", "Updates", "adagrad", "adam", "adamax",
    "clip_grads", "constant", "exponential_decay", "inverse_time_decay", "l2_norm",
    "make_schedule", "momentum", "nesterov", "optimizer", "pack_optimizer_state",
    "piecewise_constant", "polynomial_decay", "rmsprop", "rmsprop_momentum", "sgd", "sm3",
    "unpack_optimizer_state",
]


# The optimizer state is kept as two levels of flattening: the parameter pytree (the
# "outer" tree, ``tree_def``) and, for each parameter leaf, the pytree the single-array
# optimizer built for it (an "inner" tree, one of ``subtree_defs``). ``packed_state``
# holds, per parameter leaf, the leaves of its inner tree.
OptimizerState = namedtuple("OptimizerState", ["packed_state", "tree_def", "subtree_defs"])
OptimizerState.__doc__ = """The state of a pytree optimizer.

Fields: ``packed_state`` (per parameter leaf, the flattened leaves of its inner state),
``tree_def`` (the parameters' tree structure) and ``subtree_defs`` (each inner state's
tree structure). A pytree whose only child is ``packed_state``.
"""


def _optimizer_state_flatten(state):
    return (state.packed_state,), (state.tree_def, state.subtree_defs)


def _optimizer_state_unflatten(aux, children):
    tree_def, subtree_defs = aux
    return OptimizerState(children[0], tree_def, subtree_defs)


_tree_util.register_pytree_node(OptimizerState, _optimizer_state_flatten,
                                _optimizer_state_unflatten)


Array = Any
Params = Any  # parameters: any pytree of arrays
State = Any  # the single-array optimizer's own state
Updates = Params  # gradients: a pytree shaped like the parameters

InitFn = Callable[[Params], OptimizerState]
Step = int
UpdateFn = Callable[[Step, Updates, OptimizerState], OptimizerState]
ParamsFn = Callable[[OptimizerState], Params]
Schedule = Callable[[Step], float]


class Optimizer(NamedTuple):
    """An ``(init_fn, update_fn, params_fn)`` triple."""

    init_fn: InitFn
    update_fn: UpdateFn
    params_fn: ParamsFn


def _map_strict(f, *seqs):
    seqs = [list(s) for s in seqs]
    n = len(seqs[0])
    if any(len(s) != n for s in seqs[1:]):
        raise ValueError(f"length mismatch: {[len(s) for s in seqs]}")
    return [f(*args) for args in zip(*seqs)]


def _unzip2(pairs):
    firsts, seconds = [], []
    for a, b in pairs:
        firsts.append(a)
        seconds.append(b)
    return tuple(firsts), tuple(seconds)


def optimizer(opt_maker: Callable[..., tuple[Callable[[Params], State],
                                             Callable[[Step, Updates, Params], Params],
                                             Callable[[State], Params]]]
              ) -> Callable[..., Optimizer]:
    """Decorator lifting an optimizer written for single arrays to pytrees of arrays.

    Args:
      opt_maker: a function returning an ``(init, update, get_params)`` triple that works
        on one array: ``init(x0) -> state`` (any pytree), ``update(i, g, state) -> state``
        (same structure) and ``get_params(state) -> x``.

    Returns:
      A function with ``opt_maker``'s signature returning an ``Optimizer`` triple that
      works on any pytree of parameters. Its state is an ``OptimizerState``;
      ``update_fun`` raises ``TypeError`` if the gradient tree's structure differs from
      the parameters' or if ``update`` changes the structure of a state.
    """
    @functools.wraps(opt_maker)
    def tree_opt_maker(*args, **kwargs):
        init, update, get_params = opt_maker(*args, **kwargs)

        @functools.wraps(init)
        def tree_init(x0_tree):
            x0_flat, tree_def = _tree.flatten(x0_tree)
            states = [init(x0) for x0 in x0_flat]
            packed, subtree_defs = _unzip2(_map_strict(_tree.flatten, states))
            return OptimizerState(packed, tree_def, subtree_defs)

        @functools.wraps(update)
        def tree_update(i, grad_tree, opt_state):
            packed, tree_def, subtree_defs = opt_state
            grads_flat, grad_def = _tree.flatten(grad_tree)
            if grad_def != tree_def:
                raise TypeError(
                    "optimizer update function was passed a gradient tree that did not "
                    f"match the parameter tree structure with which it was initialized: "
                    f"parameter tree {tree_def} and grad tree {grad_def}.")
            states = _map_strict(_tree.unflatten, subtree_defs, packed)
            new_states = _map_strict(functools.partial(update, i), grads_flat, states)
            new_packed, new_defs = _unzip2(_map_strict(_tree.flatten, new_states))
            for old, new in zip(subtree_defs, new_defs):
                if new != old:
                    raise TypeError(
                        "optimizer update function produced an output structure that did "
                        f"not match its input structure: input {old} and output {new}.")
            return OptimizerState(new_packed, tree_def, subtree_defs)

        @functools.wraps(get_params)
        def tree_get_params(opt_state):
            packed, tree_def, subtree_defs = opt_state
            states = _map_strict(_tree.unflatten, subtree_defs, packed)
            return _tree.unflatten(tree_def, _map_strict(get_params, states))

        return Optimizer(tree_init, tree_update, tree_get_params)

    return tree_opt_maker


# ---------------------------------------------------------------------------- optimizers

def _first(state):
    return state[0]


@optimizer
def sgd(step_size: float | Schedule):
    """Optimizer triple for (stochastic) gradient descent: ``x <- x - step_size(i) * g``.

    Args:
      step_size: a positive scalar, or a schedule mapping the step index to one.

    Returns:
      An ``(init_fun, update_fun, get_params)`` triple.
    """
    lr = make_schedule(step_size)

    def init(x0):
        return x0

    def update(i, g, x):
        return x - lr(i) * g

    def get_params(x):
        return x

    return Optimizer(init, update, get_params)


@optimizer
def momentum(step_size: float | Schedule, mass: float):
    """Optimizer triple for gradient descent with (heavy-ball) momentum.

    ``v <- mass * v + g``, ``x <- x - step_size(i) * v``.

    Args:
      step_size: a positive scalar, or a schedule mapping the step index to one.
      mass: the momentum coefficient.

    Returns:
      An ``(init_fun, update_fun, get_params)`` triple.
    """
    lr = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, v = state
        v = mass * v + g
        return x - lr(i) * v, v

    return init, update, _first


@optimizer
def nesterov(step_size: float | Schedule, mass: float):
    """Optimizer triple for gradient descent with Nesterov momentum.

    ``v <- mass * v + g``, ``x <- x - step_size(i) * (mass * v + g)``.

    Args:
      step_size: a positive scalar, or a schedule mapping the step index to one.
      mass: the momentum coefficient.

    Returns:
      An ``(init_fun, update_fun, get_params)`` triple.
    """
    lr = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, v = state
        v = mass * v + g
        return x - lr(i) * (mass * v + g), v

    return init, update, _first


@optimizer
def adagrad(step_size: float | Schedule, momentum: float = 0.9):
    """Optimizer triple for Adagrad (Duchi et al., 2011), with momentum.

    Args:
      step_size: a positive scalar, or a schedule mapping the step index to one.
      momentum: the momentum coefficient applied to the normalized gradient.

    Returns:
      An ``(init_fun, update_fun, get_params)`` triple.
    """
    lr = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, g_sq, m = state
        g_sq = g_sq + jnp.square(g)
        inv_root = jnp.where(g_sq > 0, 1. / jnp.sqrt(g_sq), 0.0)
        m = (1. - momentum) * (g * inv_root) + momentum * m
        return x - lr(i) * m, g_sq, m

    return init, update, _first


@optimizer
def rmsprop(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8):
    """Optimizer triple for RMSProp.

    Args:
      step_size: a positive scalar, or a schedule mapping the step index to one.
      gamma: the decay of the running mean of squared gradients.
      eps: added to the mean square under the square root.

    Returns:
      An ``(init_fun, update_fun, get_params)`` triple.
    """
    lr = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq = state
        avg_sq = avg_sq * gamma + jnp.square(g) * (1. - gamma)
        return x - lr(i) * g / jnp.sqrt(avg_sq + eps), avg_sq

    return init, update, _first


@optimizer
def rmsprop_momentum(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8,
                     momentum: float = 0.9):
    """Optimizer triple for RMSProp with momentum.

    Args:
      step_size: a positive scalar, or a schedule mapping the step index to one.
      gamma: the decay of the running mean of squared gradients.
      eps: added to the mean square under the square root.
      momentum: the momentum coefficient.

    Returns:
      An ``(init_fun, update_fun, get_params)`` triple.
    """
    lr = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq, mom = state
        avg_sq = avg_sq * gamma + jnp.square(g) * (1. - gamma)
        mom = momentum * mom + lr(i) * g / jnp.sqrt(avg_sq + eps)
        return x - mom, avg_sq, mom

    return init, update, _first


@optimizer
def adam(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8):
    """Optimizer triple for Adam (Kingma & Ba, 2015).

    Args:
      step_size: a positive scalar, or a schedule mapping the step index to one.
      b1: the decay rate of the first-moment estimate (default 0.9).
      b2: the decay rate of the second-moment estimate (default 0.999).
      eps: added to the root of the second moment for numerical stability.

    Returns:
      An ``(init_fun, update_fun, get_params)`` triple.
    """
    lr = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, m, v = state
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * jnp.square(g) + b2 * v
        m_hat = m / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))
        v_hat = v / (1 - jnp.asarray(b2, m.dtype) ** (i + 1))
        return x - lr(i) * m_hat / (jnp.sqrt(v_hat) + eps), m, v

    return init, update, _first


@optimizer
def adamax(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999,
           eps: float = 1e-8):
    """Optimizer triple for AdaMax, Adam's infinity-norm variant.

    Args:
      step_size: a positive scalar, or a schedule mapping the step index to one.
      b1: the decay rate of the first-moment estimate (default 0.9).
      b2: the decay rate of the infinity-norm estimate (default 0.999).
      eps: added to the norm estimate for numerical stability.

    Returns:
      An ``(init_fun, update_fun, get_params)`` triple.
    """
    lr = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, m, u = state
        m = (1 - b1) * g + b1 * m
        u = jnp.maximum(b2 * u, jnp.abs(g))
        corrected_lr = lr(i) / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))
        return x - corrected_lr * m / (u + eps), m, u

    return init, update, _first


def _replace_at(seq, i, items):
    out = list(seq)
    out[i:i + 1] = items
    return out


@optimizer
def sm3(step_size: float | Schedule, momentum: float = 0.9):
    """Optimizer triple for SM3 (Anil et al., 2019), with momentum.

    Keeps one accumulator vector per axis of each parameter instead of a full
    second-moment array.

    Args:
      step_size: a positive scalar, or a schedule mapping the step index to one.
      momentum: the momentum coefficient.

    Returns:
      An ``(init_fun, update_fun, get_params)`` triple.
    """
    lr = make_schedule(step_size)

    def init(x0):
        shape = x0.shape
        x0 = jnp.atleast_1d(x0)
        accumulators = [jnp.zeros(n, dtype=x0.dtype) for n in x0.shape]
        return x0, jnp.zeros_like(x0), accumulators, shape

    def update(i, g, state):
        x, m, accumulators, shape = state
        spread = [v[tuple(_replace_at([None] * g.ndim, axis, [slice(None)]))]
                  for axis, v in enumerate(accumulators)]
        accum = functools.reduce(jnp.minimum, spread) + jnp.square(g)
        inv_root = jnp.where(accum > 0, 1. / jnp.sqrt(accum), 0)
        m = (1. - momentum) * (g * inv_root) + momentum * m
        x = x - lr(i) * m
        accumulators = [accum.max(tuple(_replace_at(range(x.ndim), j, [])))
                        for j in range(x.ndim)]
        return x, m, accumulators, shape

    def get_params(state):
        x, _, _, shape = state
        return x.reshape(shape)

    return init, update, get_params


# ---------------------------------------------------------------------------- schedules

def constant(step_size) -> Schedule:
    """Schedule returning ``step_size`` at every step."""
    def schedule(i):
        return step_size
    return schedule


def exponential_decay(step_size, decay_steps, decay_rate) -> Schedule:
    """Schedule ``step_size * decay_rate ** (i / decay_steps)``."""
    def schedule(i):
        return step_size * decay_rate ** (i / decay_steps)
    return schedule


def inverse_time_decay(step_size, decay_steps, decay_rate, staircase: bool = False
                       ) -> Schedule:
    """Schedule ``step_size / (1 + decay_rate * i / decay_steps)``.

    With ``staircase=True`` the ratio ``i / decay_steps`` is floored.
    """
    if staircase:
        def schedule(i):
            return step_size / (1 + decay_rate * jnp.floor(i / decay_steps))
    else:
        def schedule(i):
            return step_size / (1 + decay_rate * i / decay_steps)
    return schedule


def polynomial_decay(step_size, decay_steps, final_step_size, power: float = 1.0
                     ) -> Schedule:
    """Schedule decaying polynomially from ``step_size`` to ``final_step_size``.

    At step ``i`` it is ``(1 - t / decay_steps) ** power * (step_size - final_step_size)
    + final_step_size`` with ``t = min(i, decay_steps)``.
    """
    def schedule(step_num):
        t = jnp.minimum(step_num, decay_steps)
        mult = (1 - t / decay_steps) ** power
        return mult * (step_size - final_step_size) + final_step_size
    return schedule


def piecewise_constant(boundaries: Any, values: Any) -> Schedule:
    """Schedule equal to ``values[k]`` where ``k`` counts the boundaries below ``i``.

    Args:
      boundaries: increasing step indices, one fewer than ``values``.
      values: the step size on each interval.

    Raises:
      ValueError: if either is not one-dimensional or the lengths do not fit.
    """
    boundaries = jnp.array(boundaries)
    values = jnp.array(values)
    if not boundaries.ndim == values.ndim == 1:
        raise ValueError("boundaries and values must be sequences")
    if not boundaries.shape[0] == values.shape[0] - 1:
        raise ValueError("boundaries length must be one shorter than values length")

    def schedule(i):
        return values[jnp.sum(i > boundaries)]
    return schedule


def make_schedule(scalar_or_schedule: float | Schedule) -> Schedule:
    """Returns ``scalar_or_schedule`` if it is callable, else a ``constant`` schedule.

    Raises:
      TypeError: if it is neither callable nor a scalar.
    """
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if jnp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(type(scalar_or_schedule))


# ---------------------------------------------------------------------------- utilities

def l2_norm(tree: Any) -> Array:
    """The l2 norm of all the leaves of a pytree of arrays, taken together."""
    leaves = _tree.leaves(tree)
    return jnp.sqrt(sum(jnp.vdot(x, x) for x in leaves))


def clip_grads(grad_tree: Any, max_norm: float) -> Any:
    """Scales a pytree of gradients down so that its ``l2_norm`` is at most ``max_norm``."""
    norm = l2_norm(grad_tree)

    def clip(g):
        return jnp.where(norm < max_norm, g, g * (max_norm / norm))

    return _tree.map(clip, grad_tree)


# ---------------------------------------------------------------------------- serialization

class JoinPoint:
    """Marks where a parameter leaf's inner optimizer state joins the parameter tree.

    A pytree leaf (as in JAX) holding ``subtree``; iterating it yields ``subtree``.
    """

    def __init__(self, subtree):
        self.subtree = subtree

    def __iter__(self):
        yield self.subtree


def unpack_optimizer_state(opt_state: OptimizerState) -> Any:
    """Converts an ``OptimizerState`` to the parameter tree with ``JoinPoint`` leaves.

    Each leaf is a ``JoinPoint`` holding that parameter's inner state pytree; meant for
    serializing optimizer states.

    Args:
      opt_state: an ``OptimizerState``.

    Returns:
      A pytree of the parameters' structure whose leaves are ``JoinPoint``\\ s.
    """
    packed, tree_def, subtree_defs = opt_state
    subtrees = _map_strict(_tree.unflatten, subtree_defs, packed)
    return _tree.unflatten(tree_def, [JoinPoint(s) for s in subtrees])


def pack_optimizer_state(marked_pytree: Any) -> OptimizerState:
    """The inverse of ``unpack_optimizer_state``.

    Args:
      marked_pytree: a pytree whose leaves are ``JoinPoint``\\ s holding inner states.

    Returns:
      The equivalent ``OptimizerState``.
    """
    joins, tree_def = _tree.flatten(marked_pytree)
    assert all(isinstance(j, JoinPoint) for j in joins)
    packed, subtree_defs = _unzip2(_map_strict(_tree.flatten, [j.subtree for j in joins]))
    return OptimizerState(packed, tree_def, subtree_defs)
