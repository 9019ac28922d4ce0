"""Bad input raises the exception class JAX raises (or a subclass of it), over a table of
calls: wrong shapes, axes, dtypes, traced values used as Python values, leaked/unhashable
static arguments. Where JAX itself fails by accident (a lowering crash), kiln's own clear
error is kept and the case is left out of this table."""
from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

J = types.SimpleNamespace(np=jnp, jit=jax.jit, grad=jax.grad, vmap=jax.vmap, random=jax.random,
                          nn=jax.nn, lax=jax.lax)
K = types.SimpleNamespace(np=knp, jit=kiln.jit, grad=kiln.grad, vmap=kiln.vmap,
                          random=kiln.random, nn=kiln.nn, lax=kiln.lax)
a = np.ones((2, 3), np.float32)
b = np.ones((4, 5), np.float32)
v = np.ones(3, np.float32)
i = np.arange(3)

CALLS = [
 ("add shapes", lambda m: m.np.add(a,b)),
 ("matmul", lambda m: m.np.matmul(a,a)),
 ("dot", lambda m: m.np.dot(a,b)),
 ("sum axis", lambda m: m.np.sum(a,axis=2)),
 ("sum axis dup", lambda m: m.np.sum(a,axis=(0,0))),
 ("mean axis float", lambda m: m.np.mean(a,axis=1.0)),
 ("reshape", lambda m: m.np.reshape(a,(4,2))),
 ("reshape -1 -1", lambda m: m.np.reshape(a,(-1,-1))),
 ("transpose axes", lambda m: m.np.transpose(a,(0,0))),
 ("concatenate", lambda m: m.np.concatenate([a,b])),
 ("concatenate axis", lambda m: m.np.concatenate([a,a],axis=3)),
 ("stack", lambda m: m.np.stack([a,b])),
 ("split", lambda m: m.np.split(v,2)),
 ("squeeze", lambda m: m.np.squeeze(a,0)),
 ("expand_dims", lambda m: m.np.expand_dims(a,5)),
 ("moveaxis", lambda m: m.np.moveaxis(a,0,4)),
 ("swapaxes", lambda m: m.np.swapaxes(a,0,3)),
 ("broadcast_to", lambda m: m.np.broadcast_to(a,(3,3))),
 ("take float idx", lambda m: m.np.take(v, np.array([0.5]))),
 ("argmax axis", lambda m: m.np.argmax(a,axis=3)),
 ("cumsum axis", lambda m: m.np.cumsum(a,axis=2)),
 ("sort axis", lambda m: m.np.sort(a,axis=2)),
 ("where shapes", lambda m: m.np.where(a>0,a,b)),
 ("clip", lambda m: m.np.clip(a, b)),
 ("einsum", lambda m: m.np.einsum("ij,jk->ik",a,a)),
 ("einsum bad", lambda m: m.np.einsum("ij->k",a)),
 ("tensordot", lambda m: m.np.tensordot(a,a,axes=1)),
 ("linalg.inv nonsq", lambda m: m.np.linalg.inv(a)),
 ("linalg.solve", lambda m: m.np.linalg.solve(np.eye(3,dtype=np.float32), np.ones(2,np.float32))),
 ("linalg.det int", lambda m: m.np.linalg.det(np.eye(3,dtype=np.int32))),
 ("linalg.cholesky 1d", lambda m: m.np.linalg.cholesky(v)),
 ("linalg.norm ord", lambda m: m.np.linalg.norm(a, ord="bad")),
 ("fft axis", lambda m: m.np.fft.fft(v, axis=3)),
 ("fft n", lambda m: m.np.fft.fft(v, n=0)),
 ("arange nonint", lambda m: m.np.arange("a")),
 ("zeros shape", lambda m: m.np.zeros((2,-1))),
 ("zeros shape float", lambda m: m.np.zeros((2.5,))),
 ("full shape", lambda m: m.np.full((2,), np.ones(3))),
 ("eye", lambda m: m.np.eye(-1)),
 ("linspace num", lambda m: m.np.linspace(0,1,-1)),
 ("array ragged", lambda m: m.np.array([[1,2],[3]])),
 ("asarray str", lambda m: m.np.asarray("abc")),
 ("astype bad", lambda m: m.np.asarray(a).astype("foo")),
 ("pad width", lambda m: m.np.pad(a, ((1,1),(1,1),(1,1)))),
 ("pad mode", lambda m: m.np.pad(a, 1, mode="bogus")),
 ("repeat neg", lambda m: m.np.repeat(v, -1)),
 ("tile", lambda m: m.np.tile(v, 1.5)),
 ("roll axis", lambda m: m.np.roll(a, 1, axis=5)),
 ("flip axis", lambda m: m.np.flip(a, 3)),
 ("diag 3d", lambda m: m.np.diag(np.ones((2,2,2)))),
 ("trace axes", lambda m: m.np.trace(a, axis1=0, axis2=0)),
 ("outer list", lambda m: m.np.outer([1,2],[3,4])),
 ("sum list", lambda m: m.np.sum([1,2,3])),
 ("sin list", lambda m: m.np.sin([1.0])),
 ("bitwise float", lambda m: m.np.bitwise_and(v, v)),
 ("left_shift float", lambda m: m.np.left_shift(v, 1)),
 ("invert float", lambda m: m.np.invert(v)),
 ("floor complex", lambda m: m.np.floor(np.ones(2,np.complex64))),
 ("argsort kind", lambda m: m.np.argsort(v, kind="bogus")),
 ("searchsorted 2d", lambda m: m.np.searchsorted(a, v)),
 ("unique axis", lambda m: m.np.unique(a, axis=4)),
 ("bincount float", lambda m: m.np.bincount(v)),
 ("histogram bins", lambda m: m.np.histogram(v, bins=-1)),
 ("quantile q", lambda m: m.np.quantile(v, 2.0)),
 ("quantile method", lambda m: m.np.quantile(v, 0.5, method="bogus")),
 ("percentile", lambda m: m.np.percentile(v, 0.5, axis=3)),
 ("interp shapes", lambda m: m.np.interp(v, np.ones(2), np.ones(3))),
 ("convolve 2d", lambda m: m.np.convolve(a, a)),
 ("polyval", lambda m: m.np.polyval(a, v)),
 ("cross dims", lambda m: m.np.cross(np.ones(4), np.ones(4))),
 ("kron", lambda m: m.np.kron(a, 1.0)),
 ("matmul scalar", lambda m: m.np.matmul(1.0, a)),
 ("vdot", lambda m: m.np.vdot(v, np.ones(4))),
 ("index oob tuple", lambda m: m.np.asarray(a)[0,0,0]),
 ("index float", lambda m: m.np.asarray(a)[1.0]),
 ("index list", lambda m: m.np.asarray(a)[[0,1]]),
 ("at set shape", lambda m: m.np.asarray(a).at[0].set(np.ones(4))),
 ("at bad method", lambda m: m.np.asarray(a).at[0].sett(1)),
 ("bool of array", lambda m: bool(m.np.asarray(a))),
 ("int of array", lambda m: int(m.np.asarray(a))),
 ("len 0d", lambda m: len(m.np.asarray(1.0))),
 ("iter 0d", lambda m: iter(m.np.asarray(1.0))),
 ("hash", lambda m: hash(m.np.asarray(1.0))),
 ("setitem", lambda m: m.np.asarray(a).__setitem__(0, 1.)),
 ("nonzero jit", lambda m: m.jit(lambda x: m.np.nonzero(x))(v)),
 ("bool index jit", lambda m: m.jit(lambda x: x[x>0])(v)),
 ("if tracer", lambda m: m.jit(lambda x: 1 if x>0 else 2)(1.0)),
 ("int tracer", lambda m: m.jit(lambda x: int(x))(1.0)),
 ("range tracer", lambda m: m.jit(lambda x: m.np.zeros(x))(3)),
 ("grad int", lambda m: m.grad(lambda x: x*2)(3)),
 ("grad nonscalar", lambda m: m.grad(lambda x: x*2)(v)),
 ("vmap axis size", lambda m: m.vmap(lambda x,y: x+y)(v, np.ones(4))),
 ("vmap in_axes", lambda m: m.vmap(lambda x: x, in_axes=2)(v)),
 ("jit static unhashable", lambda m: m.jit(lambda x, s: x, static_argnums=1)(1.0, [1])),
 ("random key bad", lambda m: m.random.normal(1, (2,))),
 ("random choice", lambda m: m.random.choice(m.random.PRNGKey(0), 3, (5,), replace=False)),
 ("nn softmax axis", lambda m: m.nn.softmax(a, axis=3)),
 ("one_hot float", lambda m: m.nn.one_hot(v, 3.5)),
 ("lax.add dtype", lambda m: m.lax.add(v, i)),
 ("lax.dot shapes", lambda m: m.lax.dot(a, a)),
 ("lax.scan length", lambda m: m.lax.scan(lambda c, x: (c, x), 0., v, length=4)),
 ("lax.cond branches", lambda m: m.lax.cond(True, lambda: 1., lambda: np.ones(2))),
 ("lax.fori float", lambda m: m.lax.fori_loop(0., 3, lambda i, c: c, 0.)),
 ("lax.while carry", lambda m: m.lax.while_loop(lambda c: c < 3, lambda c: c + 1.5, 0)),
]

def _outcome(m, f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            f(m)
        except Exception as e:  # noqa: BLE001
            return e
    return None


@pytest.mark.parametrize("name,f", CALLS, ids=[c[0] for c in CALLS])
def test_same_exception_class_as_jax(name, f):
    ej, ek = _outcome(J, f), _outcome(K, f)
    if ej is None:
        assert ek is None, f"kiln raised {type(ek).__name__}: {ek}; JAX accepts this call"
    else:
        # kiln's error classes mirror JAX's by name (kiln.errors.ConcretizationTypeError for
        # jax.errors.ConcretizationTypeError); builtins must match or be subclassed.
        assert ek is not None and type(ej).__name__ in [c.__name__ for c in type(ek).__mro__], (
            f"JAX raises {type(ej).__name__} ({ej}); kiln "
            + ("accepts the call" if ek is None else f"raises {type(ek).__name__}: {ek}"))


def _bad_arg_messages(jax):
    def f(a, b, *, c):
        return a
    out = []
    for args, kw in [((object(), 1.0), {"c": 1}), ((1.0, {"k": [1, object()]}), {"c": 1}),
                     ((1.0, 2.0), {"c": "text"})]:
        for t in (jax.make_jaxpr, jax.jit):
            with pytest.raises(TypeError, match="as an abstract array") as e:
                t(f)(*args, **kw)
            out.append(str(e.value).split("\n")[0].rsplit("at path ", 1)[1])
    return out


def test_non_array_arguments_are_rejected_naming_their_path():
    """``make_jaxpr`` (as ``jit``) rejects arguments that are not arrays with JAX's
    TypeError, naming where the value was passed (``b['k'][1]``)."""
    got = _bad_arg_messages(kiln)
    assert got == ["a.", "a.", "b['k'][1].", "b['k'][1].", "c.", "c."]
    jax = pytest.importorskip("jax")
    assert _bad_arg_messages(jax) == got
