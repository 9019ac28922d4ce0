"""kiln.scipy.spatial.transform (Rotation, Slerp) against SciPy and JAX 0.10.2."""
import numpy as np
import pytest
from scipy.spatial.transform import Rotation as SR
from scipy.spatial.transform import Slerp as SSlerp

import kiln
import kiln.numpy as jnp
from kiln.scipy.spatial.transform import Rotation, Slerp

SEQS = ["xyz", "xzy", "yxz", "yzx", "zxy", "zyx", "xyx", "xzx", "yxy", "yzy", "zxz", "zyz"]


def _quats(n=16, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)


def _angle_close(a, b, atol):
    d = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    np.testing.assert_array_less(np.minimum(d, 2 * np.pi - d), atol)


@pytest.mark.parametrize("seq", SEQS + [s.upper() for s in SEQS])
def test_as_euler_matches_scipy_and_round_trips(seq):
    q = _quats()
    r = Rotation.from_quat(q)
    got = r.as_euler(seq)
    assert got.shape == (16, 3) and got.dtype == np.float32
    _angle_close(got, SR.from_quat(q).as_euler(seq), 1e-4)
    back = Rotation.from_euler(seq, got)
    np.testing.assert_allclose(np.abs(np.sum(np.asarray(back.quat) * np.asarray(r.quat), -1)),
                               1, atol=1e-5)
    np.testing.assert_allclose(r[3].as_euler(seq), got[3], atol=1e-6)


def test_as_euler_degrees_and_gimbal_lock():
    q = _quats()
    np.testing.assert_allclose(Rotation.from_quat(q).as_euler("ZXZ", degrees=True),
                               np.rad2deg(Rotation.from_quat(q).as_euler("ZXZ")), rtol=1e-5)
    # Middle angle 0: all of the rotation goes to the first angle, the third is 0.
    locked = Rotation.from_euler("zxz", np.array([0.3, 0.0, 0.4], np.float32))
    np.testing.assert_allclose(locked.as_euler("zxz"), [0.7, 0, 0], atol=1e-6)


def test_representations_match_scipy():
    q = _quats()
    r, s = Rotation.from_quat(q), SR.from_quat(q)
    for name in ["as_matrix", "as_mrp", "as_rotvec", "magnitude"]:
        got = getattr(r, name)()
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, getattr(s, name)(), atol=2e-6, err_msg=name)
    np.testing.assert_allclose(r.as_rotvec(degrees=True), s.as_rotvec(degrees=True), atol=1e-4)
    np.testing.assert_allclose(r.as_quat(canonical=True), s.as_quat(canonical=True), atol=1e-6)
    np.testing.assert_allclose(r.as_quat(scalar_first=True), s.as_quat(scalar_first=True),
                               atol=1e-6)
    v = np.random.default_rng(1).normal(size=(16, 3))
    np.testing.assert_allclose(r.apply(v), s.apply(v), atol=1e-5)
    np.testing.assert_allclose(r.apply(v, inverse=True), s.apply(v, inverse=True), atol=1e-5)
    np.testing.assert_allclose(r[2].apply(v), s[2].apply(v), atol=1e-5)
    np.testing.assert_allclose((r * r[::-1]).as_rotvec(), (s * s[::-1]).as_rotvec(), atol=1e-5)
    np.testing.assert_allclose((r[0] * r).as_rotvec(), (s[0] * s).as_rotvec(), atol=1e-5)
    np.testing.assert_allclose(r.inv().as_rotvec(), s.inv().as_rotvec(), atol=1e-5)
    w = np.abs(np.random.default_rng(2).normal(size=16))
    np.testing.assert_allclose(r.mean(w).as_rotvec(), s.mean(w).as_rotvec(), atol=1e-5)


def test_constructors_match_scipy():
    v = np.random.default_rng(3).normal(size=(8, 3)).astype(np.float32)
    m = SR.from_quat(_quats(8)).as_matrix().astype(np.float32)
    for name, arg in [("from_rotvec", v), ("from_rotvec", v * 1e-5), ("from_mrp", v),
                      ("from_matrix", m), ("from_matrix", m[0])]:
        got = getattr(Rotation, name)(arg)
        assert got.quat.dtype == np.float32
        np.testing.assert_allclose(got.as_rotvec(), getattr(SR, name)(arg).as_rotvec(),
                                   atol=2e-5, err_msg=name)
    np.testing.assert_allclose(Rotation.from_rotvec(v, degrees=True).as_matrix(),
                               SR.from_rotvec(v, degrees=True).as_matrix(), atol=1e-6)
    np.testing.assert_allclose(Rotation.from_euler("xy", np.array([[10, 20]]),
                                                   degrees=True).as_matrix(),
                               SR.from_euler("xy", [[10, 20]], degrees=True).as_matrix(),
                               atol=1e-6)
    assert Rotation.from_euler("z", 1.0).quat.shape == (4,)
    assert Rotation.from_quat(np.array([0, 0, 0, 2], np.int32)).quat.dtype == np.float32
    np.testing.assert_array_equal(Rotation.identity().quat, [0, 0, 0, 1])
    assert Rotation.identity(dtype=jnp.float16).quat.dtype == jnp.float16
    assert Rotation.identity(3).quat.shape == (3, 4)


def test_container_behaviour_and_concatenate():
    r = Rotation.from_quat(_quats(5))
    assert len(r) == 5 and not r.single and r[1].single and len(r[1:3]) == 2
    with pytest.raises(TypeError):
        len(r[0])
    with pytest.raises(TypeError):
        r[0][0]
    both = Rotation.concatenate([r, r[0]])
    assert both.quat.shape == (6, 4)
    np.testing.assert_array_equal(both.quat[5], r.quat[0])


def test_random_is_uniform_unit_quaternions():
    r = Rotation.random(kiln.random.key(0), 4000)
    assert r.quat.shape == (4000, 4)
    np.testing.assert_allclose(np.linalg.norm(r.quat, axis=-1), 1, atol=1e-6)
    # Haar measure: E[trace(R)] = 0; angles have density (1 - cos t) / pi, mean pi/2 + 2/pi.
    assert abs(float(jnp.mean(jnp.trace(r.as_matrix(), axis1=-2, axis2=-1)))) < 0.06
    assert abs(float(jnp.mean(r.magnitude())) - (np.pi / 2 + 2 / np.pi)) < 0.03
    assert Rotation.random(kiln.random.key(1)).single


def test_slerp_matches_scipy():
    q = _quats(4)
    times = np.array([0.0, 1.0, 2.5, 4.0], np.float32)
    s = Slerp.init(times, Rotation.from_quat(q))
    ref = SSlerp(times, SR.from_quat(q))
    at = np.array([0.0, 0.3, 1.0, 2.0, 2.5, 3.9, 4.0], np.float32)
    np.testing.assert_allclose(s(at).as_rotvec(), ref(at).as_rotvec(), atol=1e-5)
    one = s(1.7)
    assert one.single
    np.testing.assert_allclose(one.as_rotvec(), ref(1.7).as_rotvec(), atol=1e-5)
    # At the key times, the key rotations (up to sign).
    keys = s(times).as_quat()
    np.testing.assert_allclose(np.abs(np.sum(np.asarray(keys) * q / np.linalg.norm(
        q, axis=-1, keepdims=True), -1)), 1, atol=1e-5)


def test_errors():
    r = Rotation.from_quat(_quats(3))
    for seq in ["", "xyzx", "xYz", "abc", "xxy"]:
        with pytest.raises(ValueError):
            Rotation.from_euler(seq, np.zeros(max(len(seq), 1)))
    for seq in ["xy", "xyzx", "xYz", "xxy"]:
        with pytest.raises(ValueError):
            r.as_euler(seq)
    with pytest.raises(ValueError):
        Rotation.from_euler("xy", np.zeros(3))
    with pytest.raises(ValueError):
        r.mean(np.ones(2))
    with pytest.raises(ValueError):
        r.mean(np.ones((3, 1)))
    with pytest.raises(TypeError):
        Rotation.from_quat(np.ones(4)).mean()
    with pytest.raises(TypeError):
        Slerp.init([0, 1], r.quat)
    with pytest.raises(ValueError):
        Slerp.init([0], r[:1])
    with pytest.raises(ValueError):
        Slerp.init([0, 1, 2], r[0])
    with pytest.raises(ValueError):
        Slerp.init([0, 1], r)
    with pytest.raises(ValueError):
        Slerp.init([[0, 1, 2]], r)
    with pytest.raises(ValueError):
        Slerp.init([0, 1, 2], r)(np.zeros((2, 2)))


def test_jit_vmap_grad():
    q = _quats(6)
    v = np.ones(3, np.float32)
    apply = kiln.jit(lambda q, v: Rotation.from_quat(q).apply(v))
    np.testing.assert_allclose(apply(q, v), Rotation.from_quat(q).apply(v), atol=1e-6)
    euler = kiln.vmap(lambda q: Rotation.from_quat(q).as_euler("XYZ"))
    np.testing.assert_allclose(euler(q), Rotation.from_quat(q).as_euler("XYZ"), atol=1e-6)
    # A pytree through jit, and traced flags (JAX allows them).
    rot = kiln.jit(lambda r: r.inv())(Rotation.from_quat(q))
    assert isinstance(rot, Rotation)
    deg = kiln.jit(lambda q, d: Rotation.from_quat(q).as_rotvec(degrees=d))
    np.testing.assert_allclose(deg(q, True), Rotation.from_quat(q).as_rotvec(True), rtol=1e-5)
    # d|R(rotvec) v|/d rotvec vanishes (rotation preserves length); d angle / d rotvec is
    # the unit axis; both finite at the identity.
    g = kiln.grad(lambda w: jnp.sum(Rotation.from_rotvec(w).apply(v) ** 2))(
        np.array([0.1, -0.2, 0.3], np.float32))
    np.testing.assert_allclose(g, 0, atol=1e-5)
    w = np.array([0.3, 0.4, 1.2], np.float32)
    g = kiln.grad(lambda w: Rotation.from_rotvec(w).magnitude())(w)
    np.testing.assert_allclose(g, w / np.linalg.norm(w), atol=1e-5)
    g0 = kiln.grad(lambda w: jnp.sum(Rotation.from_rotvec(w).as_rotvec()))(np.zeros(3, np.float32))
    np.testing.assert_allclose(g0, 1, atol=1e-5)
    sl = kiln.jit(lambda q, t: Slerp.init(jnp.arange(6.0), Rotation.from_quat(q))(t).quat)
    np.testing.assert_allclose(sl(q, np.float32(2.5)),
                               Slerp.init(np.arange(6.0), Rotation.from_quat(q))(2.5).quat,
                               atol=1e-6)


def test_matches_jax():
    jax = pytest.importorskip("jax")
    from jax.scipy.spatial.transform import Rotation as JR
    from jax.scipy.spatial.transform import Slerp as JSlerp
    q = _quats(12, seed=5)
    r, j = Rotation.from_quat(q), JR.from_quat(jax.numpy.asarray(q))
    checks = [(r.as_matrix(), j.as_matrix()), (r.as_rotvec(), j.as_rotvec()),
              (r.as_mrp(), j.as_mrp()), (r.magnitude(), j.magnitude()),
              (r.as_quat(True, True), j.as_quat(True, True)),
              ((r * r[::-1]).quat, (j * j[::-1]).quat), (r.mean().as_rotvec(), j.mean().as_rotvec()),
              (r.apply(q[:, :3], True), j.apply(q[:, :3], True))]
    checks += [(r.as_euler(s), j.as_euler(s)) for s in SEQS + [s.upper() for s in SEQS]]
    checks += [(Rotation.from_euler(s, q[:, :3]).quat, JR.from_euler(s, q[:, :3]).quat)
               for s in ["xyz", "ZYZ"]]
    t = np.arange(12, dtype=np.float32)
    at = np.array([0, 0.5, 3, 7.25, 11], np.float32)
    checks.append((Slerp.init(t, r)(at).quat, JSlerp.init(t, j)(at).quat))
    for mine, theirs in checks:
        assert mine.shape == theirs.shape and mine.dtype == theirs.dtype
        np.testing.assert_allclose(mine, theirs, atol=2e-6)


def test_batches_broadcast_under_rank_promotion_raise():
    # JAX's Rotation broadcasts batch axes with jnp.vectorize, and jnp.where with
    # broadcast_arrays: neither is subject to jax_numpy_rank_promotion.
    q = _quats(3)
    r = Rotation.from_quat(q)
    with kiln.numpy_rank_promotion("raise"):
        assert jnp.where(jnp.ones(4) > 0, jnp.ones((3, 4)), 0).shape == (3, 4)
        np.testing.assert_allclose((r[0] * r).quat, (Rotation(jnp.tile(r.quat[0], (3, 1))) * r).quat)
        assert r[0].apply(np.ones((5, 1, 3), np.float32)).shape == (5, 1, 3)
        assert r.inv().quat.shape == (3, 4)
        with pytest.raises(ValueError):
            jnp.ones(4) * jnp.ones((3, 4))
