"""``jax.experimental.hijax`` on kiln: a mutable high-level type defined through the API
(a box holding a pytree, its type state the pytree's structure and leaf types), used
eagerly, as a ``jit`` argument (mutated, structure changing), under ``eval_shape``,
written by a ``scan`` body that closed over it, and read inside ``grad``; the same program
on JAX (in-process) as the oracle."""
import dataclasses

import numpy as np
import pytest

import kiln

jax = pytest.importorskip("jax")


def make_box_api(m):
    """A mutable box type built on the hijax API of ``m`` (kiln or jax)."""
    hjx = m.experimental.hijax if hasattr(m.experimental, "hijax") else None
    if hjx is None:
        import importlib
        hjx = importlib.import_module(m.__name__ + ".experimental.hijax")
    tree = m.tree_util

    @dataclasses.dataclass(frozen=True)
    class BoxState:
        leaf_avals: tuple
        treedef: object

    class BoxTy(hjx.MutableHiType):
        has_qdd = True

        def __hash__(self):
            return hash("BoxTy")

        def __eq__(self, other):
            return isinstance(other, BoxTy)

        def str_short(self, *_, **__):
            return "BoxTy"

        def lo_ty_qdd(self, st):
            return [t for a in st.leaf_avals for t in a.lo_ty()]

        def new_from_loval(self, st, *vals):
            return Box._new(tree.tree_unflatten(st.treedef, list(vals)))

        def read_loval(self, st, box):
            leaves, td = tree.tree_flatten(box_get(box))
            assert td == st.treedef
            return leaves

        def update_from_loval(self, st, box, *vals):
            box_set(box, tree.tree_unflatten(st.treedef, list(vals)))

        def to_tangent_aval(self):
            return BoxTy()

    class Box:
        def __init__(self, val):
            self._val = val

        @classmethod
        def _new(cls, val):
            return cls(val)

        def cur_qdd(self):
            leaves, td = tree.tree_flatten(self._val)
            return BoxState(tuple(m.typeof(x) for x in leaves), td)

    hjx.register_hitype(Box, lambda b: BoxTy())

    class BoxGet(hjx.HiPrimitive):
        multiple_results = True

        def abstract_eval(self, box_aval, *, avals):
            return list(avals), set()

        def impl(self, box, *, avals):
            return tree.tree_leaves(box._val)

        to_lojax = impl

    class BoxSet(hjx.HiPrimitive):
        multiple_results = True

        def abstract_eval(self, box_aval_qdd, *leaf_avals, treedef):
            # JAX tracks the box's type state while tracing (kiln lowers at trace time)
            box_aval_qdd.mutable_qdd.update(BoxState(tuple(leaf_avals), treedef))
            return [], set()

        def impl(self, box, *leaves, treedef):
            box._val = tree.tree_unflatten(treedef, list(leaves))
            return []

        to_lojax = impl

    get_p, set_p = BoxGet("box_get"), BoxSet("box_set")

    def box_get(box):
        st = box.cur_qdd()
        return tree.tree_unflatten(st.treedef, get_p.bind(box, avals=st.leaf_avals))

    def box_set(box, val):
        leaves, td = tree.tree_flatten(val)
        set_p.bind(box, *leaves, treedef=td)

    return Box, box_get, box_set


def _program(m):
    jnp = m.numpy
    Box, get, put = make_box_api(m)
    out = {}
    b = Box({"a": jnp.float32(1.0)})
    put(b, {"a": get(b)["a"] + 1})
    out["eager"] = get(b)["a"]

    @m.jit
    def step(box, x):
        v = get(box)
        put(box, {"a": v["a"] * x, "n": jnp.int32(1)})    # the structure changes
        return v["a"] + x

    out["jit_out"] = step(b, 3.0)
    out["after_jit"] = [get(b)["a"], get(b)["n"]]
    out["jit_again"] = step(b, 2.0)             # new structure: traced again
    out["after_again"] = [get(b)["a"], get(b)["n"]]

    def shape_of(box):
        put(box, {"a": get(box)["a"] * 2})
        return get(box)["a"]
    s = m.eval_shape(shape_of, Box({"a": jnp.zeros((2, 3))}))
    out["eval_shape"] = [list(s.shape), str(s.dtype)]

    c = Box({"a": jnp.float32(3.0)})

    def body(carry, x):
        put(c, {"a": get(c)["a"] + x})
        return carry, get(c)["a"]
    _, ys = m.lax.scan(body, None, jnp.arange(4.0))
    out["scan_ys"], out["scan_after"] = ys, get(c)["a"]

    g = Box({"a": jnp.float32(2.0)})
    out["grad"] = m.grad(lambda x: x ** 2 * get(g)["a"])(3.0)
    return out


def test_mutable_hijax_type_matches_jax():
    k, j = _program(kiln), _program(jax)
    assert k.keys() == j.keys()
    for name in j:
        if name == "eval_shape":
            assert k[name] == j[name]
            continue
        np.testing.assert_allclose(np.asarray(k[name], float), np.asarray(j[name], float),
                                   err_msg=name)


def test_captured_hijax_write_in_jit_is_refused():
    Box, get, put = make_box_api(kiln)
    b = Box({"a": kiln.numpy.float32(1.0)})

    @kiln.jit
    def f(x):
        put(b, {"a": x})
        return x

    with pytest.raises(NotImplementedError, match="closed over"):
        f(2.0)
    assert float(get(b)["a"]) == 1.0            # restored, no tracer leaked
