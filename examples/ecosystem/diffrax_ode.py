"""Diffrax on kiln: an adaptive Dopri5 solve of a damped oscillator, saved at fixed times,
and the gradient of the final state with respect to the damping.

``python -m kiln.as_jax examples/ecosystem/diffrax_ode.py`` (kiln) or
``python examples/ecosystem/diffrax_ode.py`` (JAX). Prints JSON on its last line.
"""
import json

import diffrax
import jax
import jax.numpy as jnp


def vector_field(t, y, damping):
    pos, vel = y
    return jnp.stack([vel, -pos - damping * vel])


def solve(damping):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field), diffrax.Dopri5(), t0=0.0, t1=4.0, dt0=0.1,
        y0=jnp.array([1.0, 0.0]), args=damping,
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-8),
        saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 4.0, 5)))
    return sol.ys


ys = jax.jit(solve)(0.3)
dfinal = jax.grad(lambda d: solve(d)[-1, 0])(0.3)
print(json.dumps({"ys": ys.ravel().tolist(), "d_final_pos_d_damping": float(dfinal)}))
