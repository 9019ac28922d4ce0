"""``gaussian_kde`` (``jax.scipy.stats.gaussian_kde``): Gaussian kernel density estimation.

A frozen dataclass registered as a pytree (children: ``neff``, ``dataset``, ``weights``,
``covariance``, ``inv_cov``; no static data), so an estimator passes through ``jit``,
``vmap`` and ``grad`` like any other pytree. Bandwidth rules, the weighted covariance and
every method follow SciPy's ``scipy.stats.gaussian_kde`` with JAX's restrictions:
``integrate_box`` and ``set_bandwidth`` raise ``NotImplementedError``, ``resample`` takes a
PRNG key.

The density is evaluated in whitened coordinates: with ``L`` the lower Cholesky factor
of the kernel's precision matrix, each point is multiplied by ``L`` and the kernel is
``exp(log|L| - d/2 log(2 pi) - |x_i L - y_j L|^2 / 2)``; ``logpdf`` reduces with
``logsumexp`` so tiny densities keep their precision.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln import dtypes, random
from kiln import numpy as jnp
from kiln.core.trace import get_aval
from kiln.jitting import jit
from kiln.numpy._util import check_arraylike, promote_dtypes_inexact
from kiln.scipy import linalg, special
from kiln.transformations import vmap
from kiln.tree_util import register_pytree_node_class

__all__ = ["gaussian_kde"]

BwMethod = Any  # None | str | scalar | Callable[[gaussian_kde], scalar]


def _is_complex(x) -> bool:
    return dtypes.issubdtype(dtypes.dtype(x), np.complexfloating)


@register_pytree_node_class
@dataclass(frozen=True, init=False, slots=True)
class gaussian_kde:
    """Gaussian kernel density estimator, as :class:`scipy.stats.gaussian_kde`.

    Args:
      dataset: real data, shape ``(n,)`` for one dimension or ``(d, n)``.
      bw_method: ``"scott"`` (the default), ``"silverman"``, a scalar bandwidth factor,
        or a callable taking the estimator and returning the factor.
      weights: optional weights of the ``n`` data points (normalized to sum to one).

    Attributes:
      dataset: the data as a ``(d, n)`` inexact array.
      weights: the normalized weights, shape ``(n,)``.
      neff: the effective number of points, ``1 / sum(weights**2)``.
      covariance: the kernel covariance (data covariance times factor squared).
      inv_cov: its inverse.
      d, n: the number of dimensions and of data points.
    """

    neff: Any
    dataset: Any
    weights: Any
    covariance: Any
    inv_cov: Any

    def __init__(self, dataset, bw_method: BwMethod = None, weights=None):
        check_arraylike("gaussian_kde", dataset)
        dataset = jnp.atleast_2d(dataset)
        if _is_complex(dataset):
            raise NotImplementedError("gaussian_kde does not support complex data")
        if not dataset.size > 1:
            raise ValueError("`dataset` input should have multiple elements.")
        d, n = dataset.shape
        if weights is not None:
            check_arraylike("gaussian_kde", weights)
            dataset, weights = promote_dtypes_inexact(dataset, weights)
            weights = jnp.atleast_1d(weights)
            weights = weights / jnp.sum(weights)
            if weights.ndim != 1:
                raise ValueError("`weights` input should be one-dimensional.")
            if weights.shape[0] != n:
                raise ValueError("`weights` input should be of length n")
        else:
            (dataset,) = promote_dtypes_inexact(dataset)
            weights = jnp.full(n, 1.0 / n, dtype=dataset.dtype)
        self._set("dataset", dataset)
        self._set("weights", weights)
        neff = self._set("neff", 1 / jnp.sum(weights ** 2))

        factor = self._bandwidth_factor("scott" if bw_method is None else bw_method, neff, d)
        data_cov = jnp.atleast_2d(jnp.cov(dataset, rowvar=1, bias=False, aweights=weights))
        data_inv_cov = jnp.linalg.inv(data_cov)
        self._set("covariance", data_cov * factor ** 2)
        self._set("inv_cov", data_inv_cov / factor ** 2)

    def _bandwidth_factor(self, bw_method, neff, d):
        if isinstance(bw_method, str):
            if bw_method == "scott":
                return jnp.power(neff, -1.0 / (d + 4))
            if bw_method == "silverman":
                return jnp.power(neff * (d + 2) / 4.0, -1.0 / (d + 4))
        elif jnp.isscalar(bw_method):
            return bw_method
        elif callable(bw_method):
            return bw_method(self)
        raise ValueError("`bw_method` should be 'scott', 'silverman', a scalar, or a "
                         f"callable; got {bw_method!r}.")

    def _set(self, name, value):
        # The dataclass is frozen: attributes are written once, here and in tree_unflatten.
        object.__setattr__(self, name, value)
        return value

    def tree_flatten(self):
        return (self.neff, self.dataset, self.weights, self.covariance, self.inv_cov), None

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        del aux_data
        obj = cls.__new__(cls)
        for name, value in zip(("neff", "dataset", "weights", "covariance", "inv_cov"),
                               children):
            obj._set(name, value)
        return obj

    @property
    def d(self) -> int:
        """The number of dimensions."""
        return self.dataset.shape[0]

    @property
    def n(self) -> int:
        """The number of data points."""
        return self.dataset.shape[1]

    def evaluate(self, points):
        """The estimated density at ``points`` (shape ``(d, m)``, or ``(m,)`` when d == 1)."""
        check_arraylike("evaluate", points)
        points = self._reshape_points(points)
        return _kernel_sum(False, self.dataset.T, self.weights, points.T, self.inv_cov)

    def __call__(self, points):
        return self.evaluate(points)

    def pdf(self, x):
        """The estimated density at ``x`` (same as :meth:`evaluate`)."""
        return self.evaluate(x)

    def logpdf(self, x):
        """The log of the estimated density at ``x``, computed with ``logsumexp``."""
        check_arraylike("logpdf", x)
        x = self._reshape_points(x)
        return _kernel_sum(True, self.dataset.T, self.weights, x.T, self.inv_cov)

    def integrate_gaussian(self, mean, cov):
        """The integral of the density times the Gaussian ``N(mean, cov)``."""
        mean = jnp.atleast_1d(jnp.squeeze(mean))
        cov = jnp.atleast_2d(cov)
        if mean.shape != (self.d,):
            raise ValueError(f"mean does not have dimension {self.d}")
        if cov.shape != (self.d, self.d):
            raise ValueError(f"covariance does not have dimension {self.d}")
        chol = linalg.cho_factor(self.covariance + cov)
        norm = 1.0 / (jnp.sqrt(2 * np.pi) ** self.d * jnp.prod(jnp.diag(chol[0])))
        return _gaussian_overlap(chol, norm, self.dataset, self.weights, mean)

    @jit
    def integrate_box_1d(self, low, high):
        """The probability mass between the scalars ``low`` and ``high`` (one dimension)."""
        if self.d != 1:
            raise ValueError("integrate_box_1d() only handles 1D pdfs")
        if np.ndim(low) != 0 or np.ndim(high) != 0:
            raise ValueError("the limits of integration in integrate_box_1d must be scalars")
        sigma = jnp.squeeze(jnp.sqrt(self.covariance))
        upper = special.ndtr(jnp.squeeze((high - self.dataset) / sigma))
        lower = special.ndtr(jnp.squeeze((low - self.dataset) / sigma))
        return jnp.sum(self.weights * (upper - lower))

    def integrate_kde(self, other):
        """The integral of the product of this density and ``other``'s."""
        if other.d != self.d:
            raise ValueError("KDEs are not the same dimensionality")
        chol = linalg.cho_factor(self.covariance + other.covariance)
        norm = 1.0 / (jnp.sqrt(2 * np.pi) ** self.d * jnp.prod(jnp.diag(chol[0])))
        small, large = (self, other) if self.n < other.n else (other, self)
        per_point = vmap(lambda m: _gaussian_overlap(chol, norm, large.dataset,
                                                     large.weights, m),
                         in_axes=1)(small.dataset)
        return jnp.sum(per_point * small.weights)

    @jit(static_argnames=("shape",))
    def resample(self, key, shape=()):
        """Draw samples from the estimated density.

        Args:
          key: a PRNG key.
          shape: the batch shape of the samples (a tuple of non-negative ints).

        Returns:
          An array of shape ``(d,) + shape``.
        """
        ind_key, eps_key = random.split(key)
        ind = random.choice(ind_key, self.n, shape=shape, p=self.weights)
        eps = random.multivariate_normal(eps_key, jnp.zeros(self.d, self.covariance.dtype),
                                         self.covariance, shape=shape,
                                         dtype=self.dataset.dtype).T
        return self.dataset[:, ind] + eps

    def integrate_box(self, low_bounds, high_bounds, maxpts=None):
        """Not available in JAX's interface: use :meth:`integrate_box_1d`."""
        del low_bounds, high_bounds, maxpts
        raise NotImplementedError(
            "only 1D box integrations are supported; use `integrate_box_1d`")

    def set_bandwidth(self, bw_method=None):
        """Not available in JAX's interface (the estimator is immutable): construct a new
        ``gaussian_kde`` with the wanted ``bw_method``."""
        del bw_method
        raise NotImplementedError(
            "dynamically changing the bandwidth method is not supported")

    def _reshape_points(self, points):
        if _is_complex(points):
            raise NotImplementedError("gaussian_kde does not support complex coordinates")
        points = jnp.atleast_2d(points)
        d, m = points.shape
        if d != self.d:
            if d == 1 and m == self.d:
                return jnp.reshape(points, (self.d, 1))
            raise ValueError(f"points have dimension {d}, dataset has dimension {self.d}")
        return points


def _gaussian_overlap(chol, norm, target, weights, mean):
    """``norm * sum_i w_i exp(-(t_i - mean)^T S^{-1} (t_i - mean) / 2)`` with ``S`` given by
    its Cholesky factorization."""
    diff = target - mean[:, None]
    alpha = linalg.cho_solve(chol, diff)
    return norm * jnp.sum(jnp.exp(-0.5 * jnp.sum(diff * alpha, axis=0)) * weights)


@jit(static_argnums=0)
def _kernel_sum(in_log: bool, data, weights, xi, precision):
    """The weighted Gaussian-kernel sum at each row of ``xi`` (its log with ``in_log``).

    ``data`` is ``(n, d)``, ``weights`` ``(n,)``, ``xi`` ``(m, d)`` and ``precision`` the
    ``(d, d)`` inverse kernel covariance; the result has shape ``(m,)``.
    """
    data, weights, xi, precision = promote_dtypes_inexact(data, weights, xi, precision)
    d = get_aval(data).shape[1]
    if get_aval(xi).shape[1] != d:
        raise ValueError("points and xi must have same trailing dim")
    if get_aval(precision).shape != (d, d):
        raise ValueError("precision matrix must match data dims")
    whitening = linalg.cholesky(precision, lower=True)
    data = jnp.dot(data, whitening)
    xi = jnp.dot(xi, whitening)
    log_norm = jnp.sum(jnp.log(jnp.diag(whitening))) - 0.5 * d * jnp.log(2 * np.pi)
    sq = jnp.sum(jnp.square(data[None, :, :] - xi[:, None, :]), axis=-1)   # (m, n)
    arg = log_norm - 0.5 * sq
    if in_log:
        return special.logsumexp(jnp.log(weights)[None, :] + arg, axis=1)
    return jnp.sum(weights[None, :] * jnp.exp(arg), axis=1)
