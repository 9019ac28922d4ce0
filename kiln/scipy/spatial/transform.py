"""``kiln.scipy.spatial.transform`` (``jax.scipy.spatial.transform``): ``Rotation``, ``Slerp``.

``Rotation`` is a NamedTuple holding unit quaternions ``quat`` (``x, y, z, w``, scalar
last): shape ``(4,)`` for a single rotation, ``(N, 4)`` (or more leading axes) for
several. Being a NamedTuple it is a pytree, so rotations pass through ``jit``, ``vmap``
and ``grad``; every method is built from ``kiln.numpy`` operations. Conventions and
results are SciPy's (``scipy.spatial.transform.Rotation``) as JAX reproduces them,
including JAX's choices: Euler angles wrap into ``[-pi, pi)``, gimbal lock gives a zero
third angle without a warning, and ``Slerp`` does not check that times increase or that
query times lie within them (out-of-range times use the nearest key interval).

Beyond JAX, ``Rotation.identity(num)`` makes ``num`` identities and ``Rotation.random``
draws uniformly distributed rotations from a ``kiln.random`` key (JAX raises for both),
and ``concatenate`` treats a single rotation as a batch of one, as SciPy does.
"""
from __future__ import annotations

import re
import typing

from kiln import numpy as jnp
from kiln.numpy._util import promote_dtypes_inexact
from kiln.scipy.spatial import _quaternion as _q

Array = typing.Any

_AXIS_INDEX = {"x": 0, "y": 1, "z": 2}


def _parse_seq(seq: str, max_axes: int, exact: bool):
    """Validate an Euler axis sequence; return ``(axes, intrinsic)``."""
    n = len(seq)
    if exact and n != 3:
        raise ValueError(f"Expected 3 axes, got {seq}.")
    if not 1 <= n <= max_axes:
        raise ValueError("Expected axis specification to be a non-empty string of upto "
                         f"{max_axes} characters, got {seq}")
    intrinsic = re.fullmatch(r"[XYZ]+", seq) is not None
    if not (intrinsic or re.fullmatch(r"[xyz]+", seq)):
        raise ValueError("Expected axes from `seq` to be from ['x', 'y', 'z'] or "
                         f"['X', 'Y', 'Z'], got {seq}")
    if any(a == b for a, b in zip(seq, seq[1:])):
        raise ValueError(f"Expected consecutive axes to be different, got {seq}")
    return tuple(_AXIS_INDEX[c] for c in seq.lower()), intrinsic


def _inexact(x):
    (x,) = promote_dtypes_inexact(jnp.asarray(x))
    return x


class Rotation(typing.NamedTuple):
    """Rotations in three dimensions, as ``scipy.spatial.transform.Rotation``.

    Build one with a ``from_*`` classmethod (``Rotation.from_euler('z', 90,
    degrees=True)``), compose with ``*`` (``(p * q).apply(v)`` applies ``q`` first), and
    read it back with the ``as_*`` methods.
    """
    quat: Array

    # -- construction ---------------------------------------------------------------

    @classmethod
    def concatenate(cls, rotations: typing.Sequence):
        """One ``Rotation`` holding all rotations of a sequence of them, in order."""
        return cls(jnp.concatenate([jnp.atleast_2d(r.quat) for r in rotations]))

    @classmethod
    def from_euler(cls, seq: str, angles: Array, degrees: bool = False):
        """From Euler angles about 1 to 3 axes: ``seq`` lower case (``'xyz'``) for
        extrinsic rotations, upper case (``'XYZ'``) for intrinsic ones; ``angles[..., n]``
        is the angle about ``seq[n]``."""
        axes, intrinsic = _parse_seq(seq, 3, exact=False)
        angles = _inexact(jnp.atleast_1d(angles))
        if angles.shape[-1] != len(axes):
            raise ValueError(f"Expected `angles` to have a last axis of size {len(axes)} "
                             f"for seq {seq!r}, got shape {angles.shape}.")
        angles = _q.select(degrees, jnp.deg2rad(angles), angles)
        return cls(_q.from_euler(angles, axes, intrinsic))

    @classmethod
    def from_matrix(cls, matrix: Array):
        """From ``(..., 3, 3)`` rotation matrices."""
        return cls(_q.from_matrix(_inexact(matrix)))

    @classmethod
    def from_mrp(cls, mrp: Array):
        """From ``(..., 3)`` modified Rodrigues parameters."""
        return cls(_q.from_mrp(_inexact(mrp)))

    @classmethod
    def from_quat(cls, quat: Array):
        """From ``(..., 4)`` quaternions (scalar last), normalized to unit length."""
        return cls(_q.normalize(_inexact(quat)))

    @classmethod
    def from_rotvec(cls, rotvec: Array, degrees: bool = False):
        """From ``(..., 3)`` rotation vectors (axis times angle)."""
        return cls(_q.from_rotvec(_inexact(rotvec), degrees))

    @classmethod
    def identity(cls, num: int | None = None, dtype=float):
        """The identity rotation (``num`` of them when ``num`` is given)."""
        quat = jnp.array([0., 0., 0., 1.], dtype=dtype)
        if num is not None:
            quat = jnp.tile(quat, (num, 1))
        return cls(quat)

    @classmethod
    def random(cls, random_key: Array, num: int | None = None):
        """Rotations drawn uniformly (Haar measure on SO(3)) from a ``kiln.random`` key:
        normalized 4-D standard normal samples."""
        from kiln import random as krandom
        shape = (4,) if num is None else (num, 4)
        return cls(_q.normalize(krandom.normal(random_key, shape)))

    # -- container behaviour -------------------------------------------------------------

    def __getitem__(self, indexer):
        """The rotation(s) at ``indexer`` of a batch."""
        if self.single:
            raise TypeError("Single rotation is not subscriptable.")
        return Rotation(self.quat[indexer])

    def __len__(self):
        """The number of rotations of a batch."""
        if self.single:
            raise TypeError("Single rotation has no len().")
        return self.quat.shape[0]

    @property
    def single(self) -> bool:
        """Whether this is one rotation (``quat`` of shape ``(4,)``)."""
        return self.quat.ndim == 1

    # -- operations ---------------------------------------------------------------------

    def __mul__(self, other) -> Rotation:
        """The composition: ``other`` first, then ``self`` (batches broadcast)."""
        return Rotation.from_quat(_q.multiply(self.quat, other.quat))

    def apply(self, vectors: Array, inverse: bool = False) -> Array:
        """Rotate ``(..., 3)`` vectors (by the inverse rotation if ``inverse``)."""
        matrix = self.as_matrix()
        matrix = _q.select(inverse, jnp.swapaxes(matrix, -1, -2), matrix)
        matrix, vectors = _q.broadcast_batch(matrix, jnp.asarray(vectors), 2, 1)
        return jnp.matmul(matrix, vectors[..., None])[..., 0]

    def inv(self):
        """The inverse rotation(s)."""
        return Rotation(_q.conjugate(self.quat))

    def magnitude(self) -> Array:
        """The rotation angle(s), in ``[0, pi]``."""
        return _q.magnitude(self.quat)

    def mean(self, weights: Array | None = None):
        """The (weighted) mean rotation: the eigenvector of the largest eigenvalue of
        ``sum_i w_i q_i q_i^T`` (SciPy's quaternion average)."""
        dtype = self.quat.dtype
        w = (jnp.ones(self.quat.shape[0], dtype=dtype) if weights is None
             else jnp.asarray(weights, dtype=dtype))
        if w.ndim != 1:
            raise ValueError(f"Expected `weights` to be 1 dimensional, got shape {w.shape}.")
        if w.shape[0] != len(self):
            raise ValueError("Expected `weights` to have number of values equal to number "
                             f"of rotations, got {w.shape[0]} values and {len(self)} "
                             "rotations.")
        k = jnp.matmul(self.quat.T * w[None, :], self.quat)
        _, vectors = jnp.linalg.eigh(k)
        return Rotation(vectors[:, -1])

    # -- representations ----------------------------------------------------------------

    def as_euler(self, seq: str, degrees: bool = False):
        """Euler angles about three axes (``seq`` as for :meth:`from_euler`); the first
        and third in ``[-pi, pi)``, the middle in ``[0, pi]`` (``[-pi/2, pi/2]`` for
        three distinct axes)."""
        axes, intrinsic = _parse_seq(seq, 3, exact=True)
        angles = _q.to_euler(self.quat, axes, extrinsic=not intrinsic)
        return _q.select(degrees, jnp.rad2deg(angles), angles)

    def as_matrix(self) -> Array:
        """``(..., 3, 3)`` rotation matrices."""
        return _q.to_matrix(self.quat)

    def as_mrp(self) -> Array:
        """``(..., 3)`` modified Rodrigues parameters (norm at most 1)."""
        return _q.to_mrp(self.quat)

    def as_rotvec(self, degrees: bool = False) -> Array:
        """``(..., 3)`` rotation vectors, angles in ``[0, pi]``."""
        return _q.to_rotvec(self.quat, degrees)

    def as_quat(self, canonical: bool = False, scalar_first: bool = False) -> Array:
        """The quaternions; ``canonical`` picks the sign with ``w > 0`` (ties broken by
        the first non-zero of ``x, y, z``), ``scalar_first`` orders them ``w, x, y, z``."""
        quat = _q.canonical(self.quat) if canonical else self.quat
        if scalar_first:
            quat = jnp.roll(quat, 1, axis=-1)
        return quat


class Slerp(typing.NamedTuple):
    """Spherical linear interpolation between key rotations at increasing key times, as
    ``scipy.spatial.transform.Slerp``. Build it with :meth:`Slerp.init`; call it with
    times (a scalar gives a single rotation)."""
    times: Array
    timedelta: Array
    rotations: Rotation
    rotvecs: Array

    @classmethod
    def init(cls, times: Array, rotations: Rotation):
        """The interpolator through ``rotations[n]`` at ``times[n]``: each interval
        keeps its start rotation and the rotation vector to its end rotation."""
        if not isinstance(rotations, Rotation):
            raise TypeError("`rotations` must be a `Rotation` instance.")
        if rotations.single or len(rotations) == 1:
            raise ValueError("`rotations` must be a sequence of at least 2 rotations.")
        times = jnp.asarray(times, dtype=rotations.quat.dtype)
        if times.ndim != 1:
            raise ValueError("Expected times to be specified in a 1 dimensional array, "
                             f"got {times.ndim} dimensions.")
        if times.shape[0] != len(rotations):
            raise ValueError("Expected number of rotations to be equal to number of "
                             f"timestamps given, got {len(rotations)} rotations and "
                             f"{times.shape[0]} timestamps.")
        quat = rotations.as_quat()
        starts = Rotation(quat[:-1])
        steps = (starts.inv() * Rotation(quat[1:])).as_rotvec()
        return cls(times=times, timedelta=jnp.diff(times), rotations=starts, rotvecs=steps)

    def __call__(self, times: Array):
        """The interpolated rotation(s) at ``times`` (a scalar or a 1-D array)."""
        t = jnp.asarray(times, dtype=self.times.dtype)
        if t.ndim > 1:
            raise ValueError("`times` must be at most 1-dimensional.")
        scalar = t.ndim == 0
        t = jnp.atleast_1d(t)
        idx = jnp.maximum(jnp.searchsorted(self.times, t) - 1, 0)
        frac = (t - self.times[idx]) / self.timedelta[idx]
        out = self.rotations[idx] * Rotation.from_rotvec(self.rotvecs[idx] * frac[:, None])
        return out[0] if scalar else out


__all__ = ["Rotation", "Slerp"]
