"""Smoke tests of the digits examples (examples/mnist_mlp.py, stax_convnet.py, rnn_scan.py,
data_parallel.py).

The training runs are shortened versions of each example's ``main`` on scikit-learn's
bundled 8x8 digits (skipped without scikit-learn, the ``examples`` extra); their accuracy
thresholds are far above chance (10%), which a wrong gradient, a broken ``scan`` or a
missing ``pmean`` does not reach. On generated data (no scikit-learn needed) the models'
outputs and gradients are checked against the same example source run with JAX's
imports, the scan against an unrolled loop, and the data-parallel step against the
one-device step.
"""
from __future__ import annotations

import importlib.util
import pathlib
import re

import numpy as np
import pytest

import kiln

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
DEVICE_LINE = re.compile(r'^jax\.config\.update\("jax_num_cpu_devices", 4\).*$', re.M)


def _load(name, use_jax=False):
    """Loads ``examples/<name>.py`` as a fresh module (JAX's imports if ``use_jax``).

    The device-count line of data_parallel.py is dropped: the test process has its
    devices fixed by conftest (8 of them, of which the example's pmap uses 4).
    """
    path = EXAMPLES / f"{name}.py"
    src = path.read_text()
    if name == "data_parallel":
        assert DEVICE_LINE.search(src), "data_parallel.py must set jax_num_cpu_devices"
        src = DEVICE_LINE.sub("", src)
    if use_jax:
        src = re.sub(r"^(import|from) kiln\b", r"\1 jax", src, flags=re.M)
        assert "kiln" not in "\n".join(l for l in src.splitlines()
                                       if l.startswith(("import", "from")))
    mod_name = f"digits_example_{name}{'_jax' if use_jax else ''}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(src, str(path), "exec"), mod.__dict__)
    return mod


@pytest.fixture(scope="module")
def sklearn():
    return pytest.importorskip("sklearn")


# ------------------------------------------------------------------ short training runs

def test_mnist_mlp_trains(sklearn):
    m = _load("mnist_mlp").main(steps=150, verbose=False)
    assert m["test_accuracy"] >= 0.93, m
    assert m["train_accuracy"] >= 0.93, m
    assert 0 < m["test_loss"] < 0.4, m


def test_stax_convnet_trains(sklearn):
    m = _load("stax_convnet").main(steps=60, step_size=3e-3, verbose=False)
    assert m["test_accuracy"] >= 0.88, m
    assert 0 < m["test_loss"] < 0.5, m


def test_rnn_scan_trains(sklearn):
    m = _load("rnn_scan").main(steps=100, verbose=False)
    assert m["test_accuracy"] >= 0.9, m
    assert 0 < m["test_loss"] < 0.5, m


def test_data_parallel_trains_as_one_device(sklearn):
    assert kiln.device_count() >= 4
    m = _load("data_parallel").main(steps=60, verbose=False)
    assert m["test_accuracy"] >= 0.88, m
    assert m["single_device_test_accuracy"] == m["test_accuracy"], m
    assert m["max_param_diff"] < 1e-4, m
    assert m["matches_single_device"] is True, m


def test_digits_split(sklearn):
    mod = _load("mnist_mlp")
    x_train, y_train, x_test, y_test = mod.load_digits()
    assert x_train.shape == (1438, 64) and x_test.shape == (359, 64)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert set(np.unique(y_test)) == set(range(10))
    # the other examples see the same split, as images
    conv = _load("stax_convnet").load_digits()
    np.testing.assert_array_equal(conv[0].reshape(-1, 64), x_train)
    np.testing.assert_array_equal(conv[3], y_test)


# ------------------------------------------------- generated data: JAX parity, pmap == jit

def _batch(n=16, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, 64)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int32)
    return x, y, np.eye(10, dtype=np.float32)[y]


def _assert_trees_close(kiln_tree, jax_tree, rtol=2e-4, atol=1e-6):
    jax = pytest.importorskip("jax")
    k_leaves, k_def = kiln.tree_util.tree_flatten(kiln_tree)
    j_leaves, j_def = jax.tree_util.tree_flatten(jax_tree)
    assert k_def.num_leaves == j_def.num_leaves
    for a, b in zip(k_leaves, j_leaves):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def _to_numpy(tree):
    return kiln.tree_util.tree_map(np.asarray, tree)


def test_mnist_mlp_matches_jax():
    pytest.importorskip("jax")
    k, j = _load("mnist_mlp"), _load("mnist_mlp", use_jax=True)
    x, y, t = _batch()
    pk = k.init_params(k.random.PRNGKey(0), [64, 32, 10])
    pj = j.init_params(j.random.PRNGKey(0), [64, 32, 10])
    _assert_trees_close(pk, pj, rtol=1e-6)
    _assert_trees_close(k.grad_loss(pk, x, t), j.grad_loss(pj, x, t))
    _assert_trees_close(k.sgd_step(pk, x, t, 0.2), j.sgd_step(pj, x, t, 0.2))
    assert float(k.accuracy(pk, x, y)) == float(j.accuracy(pj, x, y))


def test_stax_convnet_matches_jax():
    # (stax's initializers against JAX's: tests/ecosystem/test_example_libraries.py; here JAX runs
    # the example's network on kiln's parameters)
    pytest.importorskip("jax")
    k, j = _load("stax_convnet"), _load("stax_convnet", use_jax=True)
    x, _, t = _batch(8)
    x = x.reshape(-1, 8, 8, 1)
    shape_k, pk = k.init_random_params(k.random.PRNGKey(0), (-1, 8, 8, 1))
    assert shape_k[-1] == 10
    pj = _to_numpy(pk)
    _assert_trees_close(k.predict(pk, x), j.jax.jit(j.predict)(pj, x))
    _assert_trees_close(kiln.jit(kiln.grad(k.loss))(pk, (x, t)),
                        j.jax.jit(j.jax.grad(j.loss))(pj, (x, t)))


def test_rnn_scan_matches_jax_and_unrolled_loop():
    pytest.importorskip("jax")
    k, j = _load("rnn_scan"), _load("rnn_scan", use_jax=True)
    x, y, _ = _batch(8)
    x = x.reshape(-1, 8, 8)
    pk = k.init_params(k.random.PRNGKey(0))
    pj = _to_numpy(pk)
    gk = kiln.jit(kiln.value_and_grad(k.loss))(pk, x, y)
    _assert_trees_close(gk, j.jax.jit(j.jax.value_and_grad(j.loss))(pj, x, y))

    # the scan against a Python loop over the rows, values and gradients
    def unrolled_final_state(params, seqs):
        h = kiln.numpy.zeros((seqs.shape[0], params["W_hh"].shape[0]))
        for s in range(seqs.shape[1]):
            h = kiln.numpy.tanh(seqs[:, s] @ params["W_xh"] + h @ params["W_hh"]
                                + params["b_h"])
        return h

    def unrolled_loss(params, seqs, labels):
        logits = unrolled_final_state(params, seqs) @ params["W_hy"] + params["b_y"]
        logp = kiln.nn.log_softmax(logits)
        return -kiln.numpy.mean(kiln.numpy.take_along_axis(logp, labels[:, None], axis=-1))

    np.testing.assert_allclose(k.rnn_final_state(pk, x), unrolled_final_state(pk, x),
                               rtol=1e-5, atol=1e-6)
    gu = kiln.value_and_grad(unrolled_loss)(pk, x, y)
    for a, b in zip(kiln.tree_util.tree_leaves(gk), kiln.tree_util.tree_leaves(gu)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # the jaxpr holds one scan, not 8 unrolled steps
    assert "scan[" in str(kiln.make_jaxpr(k.rnn_final_state)(pk, x))


def test_data_parallel_step_equals_single_step():
    assert kiln.device_count() >= 4
    mod = _load("data_parallel")
    x, _, t = _batch(32, seed=1)
    params = mod.init_params(kiln.random.PRNGKey(3), [64, 32, 10])
    value, new = mod.parallel_step(mod.replicate(params, mod.N_DEVICES),
                                   x.reshape(4, 8, 64), t.reshape(4, 8, 10), 0.5)
    assert value.shape == (4,)
    ref_value, ref = mod.single_step(params, x, t, 0.5)
    np.testing.assert_allclose(np.asarray(value), float(ref_value), rtol=1e-5)
    for leaf_p, leaf_r in zip(kiln.tree_util.tree_leaves(new), kiln.tree_util.tree_leaves(ref)):
        assert leaf_p.shape == (4,) + leaf_r.shape
        for d in range(4):          # every device holds the same, averaged update
            np.testing.assert_allclose(leaf_p[d], leaf_r, rtol=1e-5, atol=1e-6)
    # without the pmean the devices would disagree: the check above can fail
    local = kiln.pmap(lambda p, a, b: kiln.grad(mod.loss)(p, a, b), axis_name="batch")(
        mod.replicate(params, 4), x.reshape(4, 8, 64), t.reshape(4, 8, 10))
    w = np.asarray(kiln.tree_util.tree_leaves(local)[0])
    assert not np.allclose(w[0], w[1], atol=1e-6)
