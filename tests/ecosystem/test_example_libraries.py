"""kiln.example_libraries (stax, optimizers) against jax.example_libraries.

Same PRNG key and input shape must give the same parameters and outputs; the optimizers
must follow JAX's update formulas step for step.
"""
import numpy as np
import pytest
from _sampling import sample_cases

import kiln
import kiln.numpy as knp
from kiln.example_libraries import optimizers as ko
from kiln.example_libraries import stax as ks

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
js = pytest.importorskip("jax.example_libraries.stax")
jo = pytest.importorskip("jax.example_libraries.optimizers")

RTOL = 1e-6


def assert_trees_close(expected, actual, rtol=RTOL, atol=1e-7, exact=False):
    """Same structure (as lists), same shapes/dtypes, values within rtol (or exact)."""
    le, te = jax.tree.flatten(expected)
    la, ta = kiln.tree.flatten(actual)
    assert len(le) == len(la), (te, ta)
    assert str(te) == str(ta).replace("kiln", "jax"), (te, ta)
    for e, a in zip(le, la):
        e, a = np.asarray(e), np.asarray(a)
        assert e.shape == a.shape, (e.shape, a.shape)
        assert e.dtype == a.dtype, (e.dtype, a.dtype)
        if exact:
            np.testing.assert_array_equal(a, e)
        else:
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


def shape_tuple(s):
    if isinstance(s, (list, tuple)) and s and isinstance(s[0], (list, tuple)):
        return [shape_tuple(x) for x in s]
    return tuple(int(d) for d in s)


def both_keys(seed):
    return jax.random.PRNGKey(seed), kiln.random.PRNGKey(seed)


def data(shape, seed=0):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


# ------------------------------------------------------------------------------ layers

LAYERS = [
    ("Dense", (5,), {}, (4, 3)),
    ("Dense", (2,), {}, (2, 3, 7)),
    ("Conv", (4, (3, 3)), {}, (2, 7, 7, 3)),
    ("Conv", (4, (3, 2)), {"strides": (2, 1), "padding": "SAME"}, (2, 7, 6, 3)),
    ("GeneralConv", (("NCHW", "OIHW", "NCHW"), 4, (3, 3)), {"padding": ((1, 0), (0, 2))},
     (2, 3, 6, 6)),
    ("GeneralConv", (("NHC", "HIO", "NHC"), 3, (3,)), {"strides": (2,)}, (2, 9, 2)),
    ("ConvTranspose", (4, (3, 3)), {}, (2, 5, 5, 3)),
    ("ConvTranspose", (4, (3, 3)), {"strides": (2, 2), "padding": "SAME"}, (2, 4, 4, 3)),
    ("Conv1DTranspose", (3, (4,)), {"strides": (2,)}, (2, 5, 2)),
    ("GeneralConvTranspose", (("NCHW", "OIHW", "NCHW"), 2, (2, 3)), {"strides": (2, 1)},
     (1, 3, 4, 4)),
    ("BatchNorm", (), {}, (4, 3, 3, 5)),
    ("BatchNorm", (), {"axis": 0}, (6, 5)),
    ("BatchNorm", (), {"axis": (0, 1), "center": False}, (4, 3, 5)),
    ("BatchNorm", (), {"axis": (0,), "scale": False}, (4, 3)),
    ("BatchNorm", (), {"axis": (0,), "center": False, "scale": False, "epsilon": 1e-3},
     (4, 3)),
    ("MaxPool", ((2, 2),), {}, (2, 6, 6, 3)),
    ("MaxPool", ((3, 3),), {"strides": (2, 2), "padding": "SAME"}, (2, 7, 7, 3)),
    ("MaxPool", ((2, 2),), {"spec": "NCHW"}, (2, 3, 6, 6)),
    ("AvgPool", ((2, 2),), {}, (2, 6, 6, 3)),
    ("AvgPool", ((3, 3),), {"strides": (2, 2), "padding": "SAME"}, (2, 7, 7, 3)),
    ("AvgPool", ((3, 2),), {"padding": "SAME", "spec": "NCHW"}, (2, 3, 5, 4)),
    ("SumPool", ((2, 2),), {"strides": (2, 2)}, (2, 6, 6, 3)),
    ("SumPool", ((3,),), {"padding": "SAME"}, (2, 7, 3)),
    ("FanInConcat", (), {}, None),
    ("FanInConcat", (0,), {}, None),
    ("FanOut", (3,), {}, (2, 3)),
]

PARAMLESS = ["Tanh", "Relu", "Exp", "LogSoftmax", "Softmax", "Softplus", "Sigmoid", "Elu",
             "LeakyRelu", "Selu", "Gelu", "Flatten", "Identity", "FanInSum"]


def _inputs(name, shape):
    if name in ("FanInConcat", "FanInSum"):
        return [data((2, 3), 1), data((2, 3), 2), data((2, 3), 3)]
    return data(shape)


def _check_layer(jlayer, klayer, in_shape, x, seed=3, apply_kwargs=None, jit_oracle=False,
                 atol=1e-7):
    apply_kwargs = apply_kwargs or {}
    jkey, kkey = both_keys(seed)
    jshape, jparams = jlayer[0](jkey, in_shape)
    kshape, kparams = klayer[0](kkey, in_shape)
    assert shape_tuple(kshape) == shape_tuple(jshape)
    assert_trees_close(jparams, kparams, exact=True)
    jx = jax.tree.map(jnp.asarray, x)
    kx = kiln.tree.map(knp.asarray, x)
    japply = jax.jit(jlayer[1]) if jit_oracle else jlayer[1]  # jit: one XLA compile
    jout = japply(jparams, jx, **apply_kwargs.get("jax", {}))
    kout = klayer[1](kparams, kx, **apply_kwargs.get("kiln", {}))
    assert_trees_close(jout, kout, atol=atol)
    # The declared output shape is the real one.
    assert shape_tuple([o.shape for o in kout] if isinstance(kout, list) else kout.shape) \
        == shape_tuple(kshape)
    return kparams, kx


# One case per layer kind in the default tier, all of them with KILN_NUM_GENERATED_CASES=all
# (tests/_sampling.py): each case runs JAX's layer op by op, ~1-10 s.
@pytest.mark.parametrize("name,args,kwargs,shape", sample_cases(
    [pytest.param(*c, id=f"{c[0]}-{i}") for i, c in enumerate(LAYERS)],
    lambda p: p.values[0], salt="stax.layers"))
def test_layer_matches_jax(name, args, kwargs, shape):
    x = _inputs(name, shape)
    in_shape = [a.shape for a in x] if isinstance(x, list) else x.shape
    # A convolution's outputs cancel (sums of +-1-sized products): the summation order
    # of the machine's BLAS kernels moves them by a few 1e-7 (seen on Zen 3).
    _check_layer(getattr(js, name)(*args, **kwargs), getattr(ks, name)(*args, **kwargs),
                 in_shape, x, atol=1e-6 if "Conv" in name else 1e-7)


@pytest.mark.parametrize("name", PARAMLESS)
def test_parameterless_layer_matches_jax(name):
    x = _inputs(name, (3, 2, 5))
    in_shape = [a.shape for a in x] if isinstance(x, list) else x.shape
    _, kparams = getattr(ks, name)[0](kiln.random.PRNGKey(0), in_shape)
    assert kparams == ()
    _check_layer(getattr(js, name), getattr(ks, name), in_shape, x)


def test_custom_initializers_and_elementwise():
    jl = js.Dense(4, W_init=js.randn(0.5), b_init=js.ones)
    kl = ks.Dense(4, W_init=ks.randn(0.5), b_init=ks.ones)
    _check_layer(jl, kl, (3, 6), data((3, 6)))
    jl = js.Dense(2, W_init=jax.nn.initializers.he_uniform())
    kl = ks.Dense(2, W_init=kiln.nn.initializers.he_uniform())
    _check_layer(jl, kl, (3, 6), data((3, 6)))
    _check_layer(js.elementwise(jax.nn.leaky_relu, negative_slope=0.3),
                 ks.elementwise(kiln.nn.leaky_relu, negative_slope=0.3), (4, 5), data((4, 5)))


def test_dropout_matches_jax():
    x = data((4, 6))
    jkey, kkey = both_keys(7)
    _check_layer(js.Dropout(0.7), ks.Dropout(0.7), x.shape, x,
                 apply_kwargs={"jax": {"rng": jkey}, "kiln": {"rng": kkey}})
    # typed keys too
    _check_layer(js.Dropout(0.5), ks.Dropout(0.5), x.shape, x,
                 apply_kwargs={"jax": {"rng": jax.random.key(1)},
                               "kiln": {"rng": kiln.random.key(1)}})
    _, apply = ks.Dropout(0.5, mode="test")
    # like JAX, the key is required even where it is unused
    np.testing.assert_array_equal(np.asarray(apply((), knp.asarray(x), rng=kkey)), x)
    with pytest.raises(ValueError, match="PRNG key"):
        ks.Dropout(0.5)[1]((), knp.asarray(x))


def test_aliases_and_names():
    public = {n for n in dir(js) if not n.startswith("_")} - {
        "functools", "math", "jnp", "lax", "random"}
    assert public <= set(dir(ks)), public - set(dir(ks))
    assert ks.glorot is ks.glorot_normal and ks.randn is ks.normal
    assert ks.logsoftmax is ks.log_softmax
    assert ks.MaxPool.__name__ == "MaxPool"
    jpublic = {n for n in dir(jo) if not n.startswith("_")} - {
        "annotations", "jax", "jnp", "functools", "partial", "namedtuple", "map", "zip",
        "safe_map", "safe_zip", "unzip2", "Any", "Callable", "NamedTuple"}
    assert jpublic <= set(dir(ko)), jpublic - set(dir(ko))
    assert ko.adam.__name__ == "adam" and "Adam" in ko.adam.__doc__


# ------------------------------------------------------------------------------ combinators

def _resnet_block(lib, channels):
    main = lib.serial(lib.Dense(channels), lib.Relu)
    return lib.serial(lib.FanOut(2), lib.parallel(main, lib.Identity), lib.FanInSum)


def _net(lib):
    return lib.serial(
        _resnet_block(lib, 4), lib.Dropout(0.8), lib.FanOut(2),
        lib.parallel(lib.Identity, lib.Exp), lib.FanInConcat(), lib.Flatten, lib.Dense(4))


def test_serial_parallel_composition():
    x = data((2, 3, 4))
    jkey, kkey = both_keys(11)
    kparams, kx = _check_layer(_net(js), _net(ks), x.shape, x, seed=5,
                               apply_kwargs={"jax": {"rng": jkey}, "kiln": {"rng": kkey}},
                               jit_oracle=True)
    assert isinstance(kparams, list) and len(kparams) == 7
    # under kiln.jit, with a raw key and with a typed key (split per layer either way)
    kapply, japply = _net(ks)[1], jax.jit(_net(js)[1])
    eager = kapply(kparams, kx, rng=kkey)
    np.testing.assert_allclose(np.asarray(kiln.jit(kapply)(kparams, kx, rng=kkey)),
                               np.asarray(eager), rtol=1e-6, atol=1e-6)
    _, jparams = _net(js)[0](jax.random.PRNGKey(5), x.shape)
    np.testing.assert_allclose(
        np.asarray(kiln.jit(kapply)(kparams, kx, rng=kiln.random.key(3))),
        np.asarray(japply(jparams, x, rng=jax.random.key(3))), rtol=1e-6, atol=1e-6)
    # parallel's init returns the shapes and the parameters, one per branch
    shapes, params = ks.parallel(ks.Dense(2), ks.Dense(3))[0](
        kiln.random.PRNGKey(0), [(4, 5), (4, 6)])
    assert shape_tuple(shapes) == [(4, 2), (4, 3)] and len(params) == 2


def test_shape_dependent():
    def make(lib):
        return lib.shape_dependent(lambda s: lib.Dense(s[-1] + 2))
    x = data((4, 3))  # the shapes of the Dense-0 case: JAX reuses its compilations
    _check_layer(make(js), make(ks), x.shape, x)


def _mlp(lib):
    # shared by the jit/grad test and the end-to-end training (JAX compiles once per shape)
    return lib.serial(lib.Dense(16), lib.Relu, lib.Dense(16), lib.Tanh, lib.Dense(4),
                      lib.LogSoftmax)


def _mlp_data():
    rs = np.random.RandomState(0)
    x = rs.randn(32, 6).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rs.randint(0, 4, 32)]
    return x, y


def test_stax_under_jit_grad_vmap():
    x, labels = _mlp_data()
    jkey, kkey = both_keys(0)
    _, jp = _mlp(js)[0](jkey, (-1, 6))
    _, kp = _mlp(ks)[0](kkey, (-1, 6))
    assert_trees_close(jp, kp, exact=True)
    japply, kapply = _mlp(js)[1], _mlp(ks)[1]

    out = kiln.jit(kapply)(kp, knp.asarray(x))
    assert_trees_close(jax.jit(japply)(jp, x), out, rtol=1e-5, atol=1e-6)

    def jloss(p):
        return -jnp.mean(jnp.sum(japply(p, x) * labels, axis=1))

    def kloss(p):
        return -knp.mean(knp.sum(kapply(p, knp.asarray(x)) * labels, axis=1))

    jg = jax.jit(jax.grad(jloss))(jp)  # one XLA compile instead of one per eager op
    assert_trees_close(jg, kiln.grad(kloss)(kp), rtol=1e-5, atol=1e-6)
    assert_trees_close(jg, kiln.jit(kiln.grad(kloss))(kp), rtol=1e-5, atol=1e-6)
    # vmap over a batch of single examples equals the batched apply
    per_example = kiln.vmap(lambda xi: kapply(kp, xi[None])[0])(knp.asarray(x))
    np.testing.assert_allclose(np.asarray(per_example), np.asarray(out), rtol=1e-6,
                               atol=1e-6)


def test_conv_net_grad_matches_jax():
    lib_net = {lib: lib.serial(lib.Conv(2, (2, 2)), lib.BatchNorm(), lib.Relu,
                               lib.AvgPool((2, 2)), lib.Flatten, lib.Dense(2))
               for lib in (js, ks)}
    x = data((2, 5, 5, 2))
    jkey, kkey = both_keys(4)
    _, jp = lib_net[js][0](jkey, x.shape)
    _, kp = lib_net[ks][0](kkey, x.shape)
    jg = jax.jit(jax.grad(lambda p: jnp.sum(lib_net[js][1](p, x) ** 2)))(jp)
    kg = kiln.grad(lambda p: knp.sum(lib_net[ks][1](p, knp.asarray(x)) ** 2))(kp)
    assert_trees_close(jg, kg, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------ optimizers

OPTIMIZERS = [
    ("sgd", (0.1,), {}),
    ("sgd", (), {"step_size": "exp"}),
    ("momentum", (0.1, 0.9), {}),
    ("nesterov", (0.05, 0.8), {}),
    ("adagrad", (0.3,), {}),
    ("adagrad", (0.3,), {"momentum": 0.5}),
    ("rmsprop", (0.01,), {}),
    ("rmsprop", (0.01,), {"gamma": 0.7, "eps": 1e-4}),
    ("rmsprop_momentum", (0.01,), {}),
    ("adam", (0.05,), {}),
    ("adam", (), {"step_size": "poly", "b1": 0.8, "b2": 0.99, "eps": 1e-6}),
    ("adamax", (0.05,), {}),
    ("sm3", (0.2,), {}),
    ("sm3", (), {"step_size": "piecewise", "momentum": 0.5}),
]


def _schedule(which, mod):
    if which == "exp":
        return mod.exponential_decay(0.2, 2, 0.5)
    if which == "poly":
        return mod.polynomial_decay(0.1, 3, 0.01, power=2.0)
    if which == "piecewise":
        return mod.piecewise_constant([1, 3], [0.3, 0.1, 0.03])
    return which


def _params(lib_np):
    return {"w": lib_np.asarray(data((3, 4), 5)), "b": lib_np.asarray(data((4,), 6)),
            "s": lib_np.asarray(np.float32(1.5)),
            "nested": [lib_np.asarray(data((2, 1, 3), 7))]}


def _numpy_grad(p):
    # The gradient of a non-convex quartic-ish loss, computed in float32 NumPy so that both
    # libraries get bit-identical gradients for identical parameters: any divergence then
    # comes from the optimizers themselves.
    a = np.asarray(p)
    return (np.float32(4.5) * a - np.float32(0.7) + np.float32(0.3) * a * a
            ).astype(np.float32)


def _run_optimizer(mod, lib, lib_np, tree_map, name, args, kwargs, steps=5, jit=False):
    kwargs = dict(kwargs)
    if "step_size" in kwargs:
        kwargs["step_size"] = _schedule(kwargs["step_size"], mod)
    init, update, get_params = getattr(mod, name)(*args, **kwargs)
    params = _params(lib_np)
    state = init(params)
    step = lib.jit(update) if jit else update
    trajectory = []
    for i in range(steps):
        grads = tree_map(lambda a: lib_np.asarray(_numpy_grad(a)), get_params(state))
        state = step(i, grads, state)
        trajectory.append(get_params(state))
    return trajectory, state


@pytest.mark.parametrize("name,args,kwargs", sample_cases(
    [pytest.param(*c, id=f"{c[0]}-{i}") for i, c in enumerate(OPTIMIZERS)],
    lambda p: p.values[0], salt="optimizers"))
def test_optimizer_matches_jax(name, args, kwargs):
    jtraj, jstate = _run_optimizer(jo, jax, jnp, jax.tree.map, name, args, kwargs)
    ktraj, kstate = _run_optimizer(ko, kiln, knp, kiln.tree.map, name, args, kwargs)
    # atol: XLA's CPU division by a broadcast scalar multiplies by its reciprocal (1 ulp
    # off the IEEE quotient kiln computes), which adam/adamax's bias correction amplifies
    # near zero.
    for jp, kp in zip(jtraj, ktraj):
        assert_trees_close(jp, kp, rtol=RTOL, atol=1e-6)
    assert isinstance(kstate, ko.OptimizerState)
    assert len(kiln.tree.leaves(kstate)) == len(jax.tree.leaves(jstate))
    assert_trees_close(jstate.packed_state, kstate.packed_state, rtol=RTOL, atol=1e-6)


@pytest.mark.parametrize("name,args,kwargs", [OPTIMIZERS[9], OPTIMIZERS[12], OPTIMIZERS[4]])
def test_optimizer_update_under_jit(name, args, kwargs):
    jtraj, _ = _run_optimizer(jo, jax, jnp, jax.tree.map, name, args, kwargs, steps=3)
    ktraj, kstate = _run_optimizer(ko, kiln, knp, kiln.tree.map, name, args, kwargs,
                                   steps=3, jit=True)
    for jp, kp in zip(jtraj, ktraj):
        assert_trees_close(jp, kp, rtol=1e-5, atol=1e-6)
    assert isinstance(kstate, ko.OptimizerState)


def test_schedules_match_jax():
    for make in [lambda m: m.constant(0.3), lambda m: m.exponential_decay(0.5, 3, 0.1),
                 lambda m: m.inverse_time_decay(0.5, 2, 0.3),
                 lambda m: m.inverse_time_decay(0.5, 2, 0.3, staircase=True),
                 lambda m: m.polynomial_decay(1.0, 4, 0.1),
                 lambda m: m.polynomial_decay(1.0, 4, 0.1, power=0.5),
                 lambda m: m.piecewise_constant([2, 5], [1.0, 0.5, 0.1]),
                 lambda m: m.make_schedule(0.7)]:
        js_sched, ks_sched = make(jo), make(ko)
        for i in range(8):
            e, a = js_sched(i), ks_sched(i)
            np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-6)
            assert np.asarray(a).dtype == np.asarray(e).dtype
        # traced step index
        for i in (0, 3, 6):
            e = js_sched(jnp.int32(i))
            a = kiln.jit(ks_sched)(knp.int32(i))
            np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-6)
    def f(i):
        return i * 2
    assert ko.make_schedule(f) is f
    with pytest.raises(TypeError):
        ko.make_schedule(knp.ones(3))
    with pytest.raises(ValueError, match="one shorter"):
        ko.piecewise_constant([1, 2], [1.0, 2.0])
    with pytest.raises(ValueError, match="sequences"):
        ko.piecewise_constant(1, [1.0, 2.0])


def test_l2_norm_and_clip_grads():
    tree = {"a": data((3, 2)), "b": [data((4,), 1), np.float32(2.0)]}
    jt, kt = jax.tree.map(jnp.asarray, tree), kiln.tree.map(knp.asarray, tree)
    assert_trees_close(jo.l2_norm(jt), ko.l2_norm(kt))
    for max_norm in (0.5, 100.0):
        assert_trees_close(jo.clip_grads(jt, max_norm), ko.clip_grads(kt, max_norm))
    clipped = ko.clip_grads(kt, 0.5)
    np.testing.assert_allclose(float(ko.l2_norm(clipped)), 0.5, rtol=1e-6)
    g = kiln.grad(lambda t: ko.l2_norm(ko.clip_grads(t, 1.0)))(kt)
    jgr = jax.jit(jax.grad(lambda t: jo.l2_norm(jo.clip_grads(t, 1.0))))(jt)
    assert_trees_close(jgr, g, rtol=1e-5, atol=1e-6)


def test_pack_unpack_and_pytree_registration():
    init, update, get_params = ko.adam(0.1)
    params = {"w": knp.ones((2, 3)), "b": [knp.zeros(3), knp.float32(1.0)]}
    state = init(params)
    leaves, treedef = kiln.tree.flatten(state)
    assert len(leaves) == 9  # (x, m, v) per parameter leaf
    rebuilt = kiln.tree.unflatten(treedef, leaves)
    assert isinstance(rebuilt, ko.OptimizerState)
    assert rebuilt.tree_def == state.tree_def and rebuilt.subtree_defs == state.subtree_defs

    marked = ko.unpack_optimizer_state(state)
    assert isinstance(marked["w"], ko.JoinPoint)
    assert kiln.tree.structure(marked) == kiln.tree.structure({"w": 0, "b": [0, 0]})
    x, m, v = marked["w"].subtree
    np.testing.assert_array_equal(np.asarray(x), np.ones((2, 3), np.float32))
    assert next(iter(marked["w"])) is marked["w"].subtree
    packed = ko.pack_optimizer_state(marked)
    assert packed.tree_def == state.tree_def and packed.subtree_defs == state.subtree_defs
    assert_trees_close(get_params(state), get_params(packed), exact=True)

    # JAX's unpack gives the same marked tree for the same state
    jstate = jo.adam(0.1)[0](jax.tree.map(jnp.asarray, {"w": np.ones((2, 3), np.float32),
                                                        "b": [np.zeros(3, np.float32),
                                                              np.float32(1.0)]}))
    jmarked = jo.unpack_optimizer_state(jstate)
    assert_trees_close([jp.subtree for jp in jax.tree.leaves(jmarked)],
                       [kp.subtree for kp in kiln.tree.leaves(marked)], exact=True)

    # the state passes through jit and vmap as a pytree
    step = kiln.jit(lambda s: update(0, kiln.tree.map(knp.ones_like, get_params(s)), s))
    assert isinstance(step(state), ko.OptimizerState)
    batched = init({"w": knp.arange(6.0).reshape(2, 3)})
    grads = {"w": knp.asarray(data((2, 3), 9))}
    vstate = kiln.vmap(update, in_axes=(None, 0, 0))(0, grads, batched)
    for r in range(2):
        row = update(0, {"w": grads["w"][r]}, init({"w": knp.arange(6.0).reshape(2, 3)[r]}))
        np.testing.assert_allclose(np.asarray(get_params(vstate)["w"][r]),
                                   np.asarray(get_params(row)["w"]), rtol=1e-6)


def test_optimizer_structure_errors():
    init, update, get_params = ko.sgd(0.1)
    state = init({"a": knp.ones(2), "b": knp.ones(2)})
    with pytest.raises(TypeError, match="did not match the parameter tree"):
        update(0, {"a": knp.ones(2)}, state)

    @ko.optimizer
    def bad(step_size):
        return (lambda x: (x, x), lambda i, g, s: (s[0],), lambda s: s[0])
    binit, bupdate, _ = bad(0.1)
    with pytest.raises(TypeError, match="did not match its input structure"):
        bupdate(0, knp.ones(2), binit(knp.ones(2)))
    assert isinstance(ko.sgd(0.1), ko.Optimizer)


def test_custom_optimizer_decorator_matches_jax():
    def make(mod, np_lib):
        @mod.optimizer
        def signsgd(step_size):
            def init(x):
                return {"x": x, "count": np_lib.zeros((), np_lib.int32)}

            def update(i, g, s):
                return {"x": s["x"] - step_size * np_lib.sign(g), "count": s["count"] + 1}

            return init, update, lambda s: s["x"]
        return signsgd(0.01)
    for lib, mod, np_lib, tmap in [(jax, jo, jnp, jax.tree.map),
                                   (kiln, ko, knp, kiln.tree.map)]:
        init, update, get_params = make(mod, np_lib)
        state = init(_params(np_lib))
        for i in range(3):
            state = update(i, tmap(lambda a: a - 0.1, get_params(state)), state)
        if lib is jax:
            expected = get_params(state)
        else:
            assert_trees_close(expected, get_params(state), exact=True)


# ------------------------------------------------------------------------------ end to end

def test_mlp_adam_training_matches_jax():
    x, y = _mlp_data()

    def train(lib, lib_np, stax, opt):
        init_fun, apply_fun = _mlp(stax)
        _, params = init_fun(lib.random.PRNGKey(0), (-1, 6))
        opt_init, opt_update, get_params = opt.adam(1e-2)

        def loss(p):
            return -lib_np.mean(lib_np.sum(apply_fun(p, x) * y, axis=1))

        @lib.jit
        def step(i, state):
            value, grads = lib.value_and_grad(loss)(get_params(state))
            return value, opt_update(i, grads, state)

        state = opt_init(params)
        losses = []
        for i in range(20):
            value, state = step(i, state)
            losses.append(float(value))
        return np.array(losses)

    jl = train(jax, jnp, js, jo)
    kl = train(kiln, knp, ks, ko)
    assert jl[-1] < jl[0]
    np.testing.assert_allclose(kl, jl, rtol=1e-5, atol=1e-6)
