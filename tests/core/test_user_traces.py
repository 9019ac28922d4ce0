"""Traces that libraries define with JAX's protocol (Haiku's ``to_dot``, Oryx): kiln hands
them custom-derivative calls in JAX's form and accepts JAX's form when they forward a call
to one of kiln's traces. The same trace classes, built from ``jax`` and from ``kiln``, must
give the same values and see the same calls."""
from __future__ import annotations

import types

import numpy as np
import pytest

import kiln
import kiln.core
import kiln.extend.core
import kiln.numpy as knp
from kiln.extend import linear_util as klu


def _namespace(jx, core_mod, extend_core, lu, np_mod):
    return types.SimpleNamespace(
        jax=jx, Trace=core_mod.Trace, Tracer=core_mod.Tracer, typeof=jx.typeof, lu=lu,
        take_current_trace=extend_core.take_current_trace,
        set_current_trace=extend_core.set_current_trace, TraceTag=extend_core.TraceTag,
        np=np_mod)


def _kiln_ns():
    return _namespace(kiln, kiln.core, kiln.extend.core, klu, knp)


def _jax_ns():
    pytest.importorskip("jax")
    import jax
    import jax.core
    import jax.extend.core
    import jax.numpy as jnp
    from jax.extend import linear_util as jlu
    return _namespace(jax, jax.core, jax.extend.core, jlu, jnp)


_ZEROS = ("Zero", "SymbolicZero")


def _build(ns, forward_rules: bool):
    """A logging transformation written as a library writes one for JAX 0.10. With
    ``forward_rules`` it hands custom-derivative calls on to its parent trace (with ``fun``
    and the rules interpreted under itself); otherwise it drops the rules, as Haiku does."""

    class LogTracer(ns.Tracer):
        def __init__(self, trace, val):
            super().__init__(trace, ns.typeof(val))
            self.val = val

        def full_lower(self):
            return self

    def subtrace(f, tag, log, *vals):
        with ns.take_current_trace() as parent:
            trace = LogTrace(parent, tag, log)
            with ns.set_current_trace(trace):
                # Perturbation flags (custom_vjp's fwd) and symbolic zero tangents pass as is.
                ins = [v if isinstance(v, bool) or type(v).__name__ in _ZEROS else
                       LogTracer(trace, v) for v in vals]
                outs = f(*ins)
            return [trace.to_val(o) for o in outs]

    subtrace_t = ns.lu.transformation2(subtrace)

    def wrap(fun, tag, log):
        return subtrace_t(fun, tag, log)

    class LogTrace(ns.Trace):
        def __init__(self, parent, tag, log):
            super().__init__()
            self.parent_trace = parent
            self.tag = tag
            self.log = log

        def to_val(self, x):
            if isinstance(x, LogTracer) and x._trace.tag is self.tag:
                return x.val
            return x

        def process_primitive(self, primitive, tracers, params):
            vals = [self.to_val(t) for t in tracers]
            avals = [ns.typeof(v) for v in vals]
            out = primitive.bind_with_trace(self.parent_trace, vals, avals, params)
            if primitive.multiple_results:
                return [LogTracer(self, o) for o in out]
            return LogTracer(self, out)

        def process_custom_jvp_call(self, primitive, fun, jvp, tracers, *, symbolic_zeros):
            self.log.append(("custom_jvp", str(primitive), symbolic_zeros))
            vals = [self.to_val(t) for t in tracers]
            if not forward_rules:
                with ns.set_current_trace(self.parent_trace):
                    return [LogTracer(self, o) for o in fun.call_wrapped(*vals)]
            outs = self.parent_trace.process_custom_jvp_call(
                primitive, wrap(fun, self.tag, self.log), wrap(jvp, self.tag, self.log), vals,
                symbolic_zeros=symbolic_zeros)
            return [LogTracer(self, o) for o in outs]

        def process_custom_vjp_call(self, primitive, fun, fwd, bwd, tracers, *, out_trees,
                                    symbolic_zeros):
            self.log.append(("custom_vjp", str(primitive), symbolic_zeros))
            vals = [self.to_val(t) for t in tracers]
            if not forward_rules:
                with ns.set_current_trace(self.parent_trace):
                    return [LogTracer(self, o) for o in fun.call_wrapped(*vals)]
            outs = self.parent_trace.process_custom_vjp_call(
                primitive, wrap(fun, self.tag, self.log), wrap(fwd, self.tag, self.log), bwd,
                vals, out_trees=out_trees, symbolic_zeros=symbolic_zeros)
            return [LogTracer(self, o) for o in outs]

    def logged(f, log):
        def run(*args):
            flat = ns.lu.wrap_init(lambda *xs: [f(*xs)])
            return wrap(flat, ns.TraceTag(), log).call_wrapped(*args)[0]
        return run

    return logged


def _functions(ns):
    jax, np_ = ns.jax, ns.np

    @jax.custom_jvp
    def f(x):
        return np_.sin(x)

    f.defjvp(lambda p, t: (f(p[0]), 3.0 * t[0]))

    @jax.custom_vjp
    def g(x):
        return np_.sin(x) * 2.0

    g.defvjp(lambda x: (g(x), x), lambda x, ct: (5.0 * ct * x,))

    @jax.custom_jvp
    def h(x, y):
        return x * y

    def h_jvp(p, t):
        (x, y), (tx, ty) = p, t
        assert type(ty).__name__ == "SymbolicZero"
        return h(x, y), 7.0 * tx

    h.defjvp(h_jvp, symbolic_zeros=True)
    return f, g, h


def _scenarios(ns, forward_rules: bool):
    jax = ns.jax
    logged = _build(ns, forward_rules)
    f, g, h = _functions(ns)
    x = ns.np.float32(0.5)
    xs = ns.np.arange(3.0, dtype="float32")
    out = {}
    cases = {
        "f": lambda log: logged(f, log)(x),
        "relu": lambda log: logged(jax.nn.relu, log)(xs - 1.0),
        "grad_of_logged_f": lambda log: jax.grad(logged(f, log))(x),
        "logged_grad_f": lambda log: logged(jax.grad(f), log)(x),
        "jit_of_logged_f": lambda log: jax.jit(logged(f, log))(x),
        "vmap_of_logged_f": lambda log: jax.vmap(logged(f, log))(xs),
        "grad_of_logged_g": lambda log: jax.grad(logged(g, log))(x),
        "logged_grad_g": lambda log: logged(jax.grad(g), log)(x),
        "vmap_grad_of_logged_g": lambda log: jax.vmap(jax.grad(logged(g, log)))(xs),
        "grad_of_logged_h": lambda log: jax.grad(logged(lambda a: h(a, 2.0), log))(x),
    }
    for name, case in cases.items():
        log: list = []
        try:
            val = np.asarray(case(log))
        except Exception as e:         # compared by class: JAX's errors are kiln's
            val = type(e).__name__
        out[name] = (val, log)
    return out


@pytest.mark.parametrize("forward_rules", [True, False])
def test_user_trace_custom_derivatives_match_jax(forward_rules):
    kiln_out = _scenarios(_kiln_ns(), forward_rules)
    jax_out = _scenarios(_jax_ns(), forward_rules)
    assert kiln_out.keys() == jax_out.keys()
    for name in kiln_out:
        (kv, klog), (jv, jlog) = kiln_out[name], jax_out[name]
        assert klog == jlog, name
        if isinstance(jv, str):
            assert kv == jv, name
        else:
            np.testing.assert_allclose(kv, jv, rtol=1e-6, err_msg=name)


def test_user_trace_custom_jvp_values():
    """Without JAX: the rules that reach kiln's traces through a user trace are used."""
    ns = _kiln_ns()
    logged = _build(ns, forward_rules=True)
    f, g, _ = _functions(ns)
    log: list = []
    assert float(kiln.grad(logged(f, log))(0.5)) == 3.0
    assert log and set(log) == {("custom_jvp", "custom_jvp_call", False)}
    log = []
    assert float(kiln.grad(logged(g, log))(0.5)) == 2.5
    assert log and set(log) == {("custom_vjp", "custom_vjp_call", False)}


def test_kiln_traces_are_not_jax_protocol():
    from kiln.interpreters import ad, batching, staging
    assert not kiln.core.trace.EvalTrace.jax_protocol
    assert not ad.JVPTrace.jax_protocol
    assert not batching.BatchTrace.jax_protocol
    assert not staging.JaxprTrace.jax_protocol

    class Mine(kiln.core.Trace):
        pass
    assert Mine.jax_protocol
