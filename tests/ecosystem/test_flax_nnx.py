"""``flax.nnx`` on kiln (through ``kiln.as_jax``, in subprocesses): the README MLP trained
with ``nnx.Optimizer`` over Optax gives JAX's losses, and NNX programs using mutable array
references (``Variable(ref=True)``) and NNX transforms agree with JAX. Skipped without Flax
(or without JAX, the oracle)."""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")


def _run(args, timeout=600):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)


def _losses(text, what):
    return [float(v) for v in re.findall(rf"{what} (\d+\.\d+)", text)]


def test_nnx_readme_mlp_same_losses_as_jax():
    script = os.path.join(ROOT, "examples", "flax_nnx_mlp.py")
    pj = _run([script, "--steps", "100"])
    assert pj.returncode == 0, pj.stderr
    pk = _run(["-m", "kiln.as_jax", script, "--steps", "100"])
    assert pk.returncode == 0, pk.stderr
    assert "kiln" in pk.stdout and "kiln" not in pj.stdout
    lj, lk = _losses(pj.stdout, "loss"), _losses(pk.stdout, "loss")
    assert len(lj) == len(lk) == 7              # steps 0, 20, ..., 80, final, eval
    # Training losses: the same to 6 digits in practice.
    np.testing.assert_allclose(lk[:-1], lj[:-1], rtol=1e-5)
    # The evaluation loss uses BatchNorm's running mean, which follows linear1's bias: that
    # bias has a zero gradient (BatchNorm removes it), so Adam turns its rounding-level
    # gradient into full-size steps whose signs follow each implementation's rounding (see
    # the example's docstring). It agrees to about 4 digits.
    np.testing.assert_allclose(lk[-1], lj[-1], rtol=1e-3)
    assert lk[-2] < 0.5 * lk[0]


_REFS_PROBE = """
import json, jax, jax.numpy as jnp, optax
from flax import nnx

class Count(nnx.Variable):
    pass

class Model(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 2, rngs=rngs)
        self.calls = Count(jnp.array(0))
    def __call__(self, x):
        self.calls[...] += 1
        return self.lin(x)

out = {}
m = nnx.with_vars(Model(nnx.Rngs(0)), ref=True)     # every Variable holds a jax.Ref
out["is_ref"] = bool(nnx.variablelib.is_array_ref(m.lin.kernel.get_raw_value()))
x = jnp.arange(6.0).reshape(2, 3)

@jax.jit
def f(m, x):
    return m(x).sum()
out["jit"] = [float(f(m, x)), float(f(m, x)), int(m.calls[...])]

out["grad_x"] = jax.grad(lambda x: m(x).sum())(x).tolist()     # references read inside grad
out["calls"] = int(m.calls[...])
try:                                        # differentiating w.r.t. references: JAX's error
    nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(m)
    out["grad_refs_error"] = ""
except ValueError as e:
    out["grad_refs_error"] = str(e).splitlines()[0]
out["vmap"] = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(m, x).tolist()
lin = nnx.Linear(3, 2, rngs=nnx.Rngs(1))      # the same model without references trains
opt = nnx.Optimizer(lin, optax.sgd(0.1), wrt=nnx.Param)
@nnx.jit
def step(lin, opt, x):
    loss, g = nnx.value_and_grad(lambda lin: (lin(x) ** 2).mean())(lin)
    opt.update(lin, g)
    return loss
out["train"] = [float(step(lin, opt, x)) for _ in range(3)]
r = jax.new_ref(jnp.zeros(3))
def loss(w):
    r[...] = jax.lax.stop_gradient(w) * 2      # a write of a constant is allowed
    return (w * r[...]).sum()
out["grad_closed"] = jax.grad(loss)(jnp.ones(3)).tolist()
print(json.dumps(out))
"""


@pytest.mark.slow  # ~17 s; test_nnx_readme_mlp_same_losses_as_jax stays
def test_nnx_variables_as_refs_match_jax():
    pj = _run(["-c", textwrap.dedent(_REFS_PROBE)])
    assert pj.returncode == 0, pj.stderr
    pk = _run(["-m", "kiln.as_jax", "-c", textwrap.dedent(_REFS_PROBE)])
    assert pk.returncode == 0, pk.stderr
    j = json.loads(pj.stdout.strip().splitlines()[-1])
    k = json.loads(pk.stdout.strip().splitlines()[-1])
    assert k.keys() == j.keys()
    assert k["is_ref"] and j["is_ref"]
    assert k.pop("grad_refs_error") == j.pop("grad_refs_error") != ""
    for name in j:
        np.testing.assert_allclose(np.asarray(k[name], float), np.asarray(j[name], float),
                                   rtol=1e-5, err_msg=name)


_HIJAX_PROBE = """
import json, jax, jax.numpy as jnp
from flax import nnx
out = {}
v = nnx.with_vars(nnx.Param(jnp.array(1.0), a="hi"), hijax=True)
@jax.jit
def put(v, a):
    v[...] = a
    v[...] += 5
    return v + 2
out["jit"] = [float(put(v, 10.0)), float(v[...])]
metrics = nnx.Variable({}, hijax=True)
@jax.jit
def record(x, metrics):
    metrics["x_sum"] = jnp.sum(x)
record(jnp.ones((4, 5)), metrics)
out["dynamic"] = float(metrics["x_sum"])
with nnx.var_defaults(hijax=True):
    rngs = nnx.Rngs(0)
    draw = jax.jit(lambda rngs: jax.random.key_data(rngs()))
    out["rngs"] = [draw(rngs).tolist(), draw(rngs).tolist()]
c = nnx.Variable(jnp.array(3.0), hijax=True)
def body(_, __):
    c[...] = c[...] + 1.0
    return None, c[...]
out["scan"] = [jax.lax.scan(body, None, None, length=5)[1].tolist(), float(c[...])]
print(json.dumps(out))
"""


@pytest.mark.slow  # ~15 s; tests/core/test_hijax.py covers hijax without Flax
def test_nnx_hijax_variables_match_jax():
    pj = _run(["-c", textwrap.dedent(_HIJAX_PROBE)])
    assert pj.returncode == 0, pj.stderr
    pk = _run(["-m", "kiln.as_jax", "-c", textwrap.dedent(_HIJAX_PROBE)])
    assert pk.returncode == 0, pk.stderr
    j = json.loads(pj.stdout.strip().splitlines()[-1])
    k = json.loads(pk.stdout.strip().splitlines()[-1])
    assert k == j
