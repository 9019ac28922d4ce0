"""Quaternion arithmetic behind ``kiln.scipy.spatial.transform``.

Every function works on arrays whose last axis holds one quaternion (``x, y, z, w``,
scalar last), a rotation vector, an MRP vector or (last two axes) a 3x3 matrix; leading
axes are batch axes and broadcast against each other, as ``jnp.vectorize`` would. Only
``kiln.numpy`` operations are used, so everything traces under ``jit``/``grad``/``vmap``.
The formulas follow SciPy's ``Rotation`` (the same ones JAX ports); small-angle branches
use the Taylor series SciPy uses below ``1e-3`` rad, and their other branch is evaluated
at a safe angle so that gradients stay finite at the identity.
"""
from __future__ import annotations

import numpy as np

from kiln import numpy as jnp

#: Below this rotation angle (rad), rotation-vector scales use their Taylor series.
SMALL_ANGLE = 1e-3
#: Tolerance of the gimbal-lock test in :func:`to_euler` (SciPy's).
GIMBAL_EPS = 1e-7


def select(flag, if_true, if_false):
    """``if_true`` where ``flag``: a Python branch for a concrete flag, else ``jnp.where``
    (JAX lets flags such as ``degrees`` or ``inverse`` be traced values)."""
    if isinstance(flag, (bool, np.bool_)):
        return if_true if flag else if_false
    return jnp.where(flag, if_true, if_false)


def broadcast_batch(a, b, core_a=1, core_b=1):
    """``a`` and ``b`` with their batch axes (all but the last ``core_a``/``core_b``)
    broadcast to a common shape, without a rank-promotion check (as ``jnp.vectorize``)."""
    batch = jnp.broadcast_shapes(a.shape[:a.ndim - core_a], b.shape[:b.ndim - core_b])
    return (jnp.broadcast_to(a, batch + a.shape[a.ndim - core_a:]),
            jnp.broadcast_to(b, batch + b.shape[b.ndim - core_b:]))


def components(q):
    """The four components of quaternions ``q`` (``x, y, z, w``)."""
    return q[..., 0], q[..., 1], q[..., 2], q[..., 3]


def norm3(v):
    """Euclidean norm over a last axis of length 3; at the zero vector its derivative is
    taken as 0 (not ``sqrt``'s infinite one), so that rotation vectors and angles of the
    identity rotation have finite gradients."""
    s = v[..., 0] * v[..., 0] + v[..., 1] * v[..., 1] + v[..., 2] * v[..., 2]
    nonzero = s > 0
    return jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, s, 1)), 0)


def norm(v):
    """Euclidean norm over the last axis (any length)."""
    total = v[..., 0] * v[..., 0]
    for n in range(1, v.shape[-1]):
        total = total + v[..., n] * v[..., n]
    return jnp.sqrt(total)


def normalize(q):
    """Quaternions scaled to unit norm."""
    return q / norm(q)[..., None]


def multiply(p, q):
    """Hamilton product ``p q`` (the rotation ``q`` followed by ``p``); batch axes
    broadcast (regardless of ``jax_numpy_rank_promotion``, as ``jnp.vectorize``)."""
    p, q = broadcast_batch(p, q)
    px, py, pz, pw = components(p)
    qx, qy, qz, qw = components(q)
    return jnp.stack([
        pw * qx + qw * px + (py * qz - pz * qy),
        pw * qy + qw * py + (pz * qx - px * qz),
        pw * qz + qw * pz + (px * qy - py * qx),
        pw * qw - px * qx - py * qy - pz * qz,
    ], axis=-1)


def conjugate(q):
    """The inverse rotation of unit quaternions: the vector part negated."""
    return jnp.concatenate([-q[..., :3], q[..., 3:]], axis=-1)


def to_matrix(q):
    """``(..., 3, 3)`` rotation matrices of (unit) quaternions."""
    x, y, z, w = components(q)
    xx, yy, zz, ww = x * x, y * y, z * z, w * w
    xy, xz, xw = x * y, x * z, x * w
    yz, yw, zw = y * z, y * w, z * w
    rows = [
        [xx - yy - zz + ww, 2 * (xy - zw), 2 * (xz + yw)],
        [2 * (xy + zw), -xx + yy - zz + ww, 2 * (yz - xw)],
        [2 * (xz - yw), 2 * (yz + xw), -xx - yy + zz + ww],
    ]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def from_matrix(m):
    """Unit quaternions of ``(..., 3, 3)`` rotation matrices.

    Of the four algebraically equal expressions, the one built on the largest of
    ``m00, m11, m22, trace`` is taken (the first on ties), for accuracy."""
    d = [m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]]
    trace = d[0] + d[1] + d[2]
    pick = jnp.argmax(jnp.stack(d + [trace], axis=-1), axis=-1)
    candidates = []
    for i in range(3):
        j, k = (i + 1) % 3, (i + 2) % 3
        parts = [None] * 4
        parts[i] = 1 - trace + 2 * m[..., i, i]
        parts[j] = m[..., j, i] + m[..., i, j]
        parts[k] = m[..., k, i] + m[..., i, k]
        parts[3] = m[..., k, j] - m[..., j, k]
        candidates.append(jnp.stack(parts, axis=-1))
    candidates.append(jnp.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                                 m[..., 1, 0] - m[..., 0, 1], 1 + trace], axis=-1))
    q = candidates[3]
    for i in range(3):
        q = jnp.where((pick == i)[..., None], candidates[i], q)
    return normalize(q)


def to_rotvec(q, degrees):
    """Rotation vectors (axis times angle in ``[0, pi]``) of unit quaternions."""
    q = jnp.where((q[..., 3] < 0)[..., None], -q, q)
    angle = 2 * jnp.arctan2(norm3(q[..., :3]), q[..., 3])
    a2 = angle * angle
    series = 2 + a2 / 12 + 7 * a2 * a2 / 2880
    small = angle <= SMALL_ANGLE
    safe = jnp.where(small, 1, angle)
    scale = jnp.where(small, series, safe / jnp.sin(safe / 2))
    scale = select(degrees, jnp.rad2deg(scale), scale)
    return scale[..., None] * q[..., :3]


def from_rotvec(v, degrees):
    """Unit quaternions of rotation vectors (radians, or degrees)."""
    v = select(degrees, jnp.deg2rad(v), v)
    angle = norm3(v)
    a2 = angle * angle
    series = 0.5 - a2 / 48 + a2 * a2 / 3840
    small = angle <= SMALL_ANGLE
    safe = jnp.where(small, 1, angle)
    scale = jnp.where(small, series, jnp.sin(safe / 2) / safe)
    return jnp.concatenate([scale[..., None] * v, jnp.cos(angle / 2)[..., None]], axis=-1)


def to_mrp(q):
    """Modified Rodrigues parameters (``|p| <= 1``) of unit quaternions."""
    sign = jnp.where(q[..., 3] < 0, -1.0, 1.0)
    return sign[..., None] * q[..., :3] / (1 + sign * q[..., 3])[..., None]


def from_mrp(p):
    """Unit quaternions of modified Rodrigues parameters."""
    s = p[..., 0] * p[..., 0] + p[..., 1] * p[..., 1] + p[..., 2] * p[..., 2] + 1
    q = jnp.concatenate([2 * p[..., :3], (2 - s)[..., None]], axis=-1)
    return q / s[..., None]


def magnitude(q):
    """Rotation angles in ``[0, pi]`` of unit quaternions."""
    return 2 * jnp.arctan2(norm3(q[..., :3]), jnp.abs(q[..., 3]))


def canonical(q):
    """The one of ``q, -q`` whose first non-zero component of ``w, x, y, z`` is positive."""
    neg, zero = q < 0, q == 0
    flip = neg[..., 3]
    all_zero = zero[..., 3]
    for n in range(3):
        flip = flip | (all_zero & neg[..., n])
        all_zero = all_zero & zero[..., n]
    return jnp.where(flip[..., None], -q, q)


def elementary(axis: int, angle):
    """Quaternions of rotations by ``angle`` about the basis axis ``axis`` (0, 1, 2)."""
    half = angle / 2
    zero = jnp.zeros_like(half)
    parts = [zero, zero, zero, jnp.cos(half)]
    parts[axis] = jnp.sin(half)
    return jnp.stack(parts, axis=-1)


def from_euler(angles, axes, intrinsic: bool):
    """Unit quaternions of Euler angles ``angles[..., n]`` about basis axes ``axes[n]``:
    intrinsic (each turn about the moving frame) or extrinsic (about the fixed frame)."""
    q = elementary(axes[0], angles[..., 0])
    for n in range(1, len(axes)):
        turn = elementary(axes[n], angles[..., n])
        q = multiply(q, turn) if intrinsic else multiply(turn, q)
    return q


def to_euler(q, axes, extrinsic: bool):
    """Euler angles (radians) about basis axes ``axes`` of unit quaternions.

    The quaternion method of Bernardes & Viollet (2022) that SciPy uses: the middle angle
    from ``atan2``, then the half sum and half difference of the outer ones. In gimbal
    lock (middle angle within ``1e-7`` of 0 or pi) the third angle is set to 0. Angles
    are wrapped into ``[-pi, pi)``."""
    if not extrinsic:
        axes = axes[::-1]
    i, j, k = axes
    symmetric = i == k
    if symmetric:
        k = 3 - i - j
    sign = (i - j) * (j - k) * (k - i) // 2
    if symmetric:
        a, b, c, d = q[..., 3], q[..., i], q[..., j], q[..., k] * sign
    else:
        a = q[..., 3] - q[..., j]
        b = q[..., i] + q[..., k] * sign
        c = q[..., j] + q[..., 3]
        d = q[..., k] * sign - q[..., i]
    middle = 2 * jnp.arctan2(jnp.hypot(c, d), jnp.hypot(a, b))
    at_zero = jnp.abs(middle) <= GIMBAL_EPS
    at_pi = jnp.abs(middle - np.pi) <= GIMBAL_EPS
    regular = ~(at_zero | at_pi)
    half_sum = jnp.arctan2(b, a)
    half_diff = jnp.arctan2(d, c)
    # Gimbal lock: all of the outer rotation goes to the first angle, none to the third.
    locked = jnp.where(at_zero, 2 * half_sum, 2 * half_diff * (-1 if extrinsic else 1))
    zero = jnp.zeros_like(middle)
    if extrinsic:
        first = jnp.where(regular, half_sum - half_diff, locked)
        third = jnp.where(regular, half_sum + half_diff, zero)
    else:
        first = jnp.where(regular, half_sum + half_diff, locked)
        third = jnp.where(regular, half_sum - half_diff, zero)
    if not symmetric:
        if extrinsic:
            third = third * sign
        else:
            first = first * sign
        middle = middle - np.pi / 2
    angles = jnp.stack([first, middle, third], axis=-1)
    return (angles + np.pi) % (2 * np.pi) - np.pi
