"""NumPyro's eight-schools example (its README's quick start), unmodified JAX code.

Runs NUTS on the non-centered eight-schools model and prints the posterior means. On kiln::

    python -m kiln.as_jax examples/numpyro_eight_schools.py

and on JAX (when installed)::

    python examples/numpyro_eight_schools.py

Both draw the same random bits (kiln's PRNG is JAX's), so the chains agree up to
floating-point rounding in the leapfrog steps. ``--warmup``/``--samples`` set the chain
length (default 500 each).
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS
from numpyro.infer.reparam import TransformReparam

J = 8
y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools_noncentered(J, sigma, y=None):
    """The README's model, with the school effects reparameterized (non-centered)."""
    mu = numpyro.sample("mu", dist.Normal(0, 5))
    tau = numpyro.sample("tau", dist.HalfCauchy(5))
    with numpyro.plate("J", J):
        with numpyro.handlers.reparam(config={"theta": TransformReparam()}):
            theta = numpyro.sample(
                "theta",
                dist.TransformedDistribution(
                    dist.Normal(0.0, 1.0), dist.transforms.AffineTransform(mu, tau)
                ),
            )
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def run(num_warmup: int = 500, num_samples: int = 500, seed: int = 0) -> dict:
    """Runs the chain; returns the posterior means of ``mu``, ``tau`` and ``theta``."""
    mcmc = MCMC(NUTS(eight_schools_noncentered), num_warmup=num_warmup,
                num_samples=num_samples, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed), J, sigma, y=y, extra_fields=("potential_energy",))
    s = mcmc.get_samples()
    return {"mu": float(jnp.mean(s["mu"])), "tau": float(jnp.mean(s["tau"])),
            "theta": [float(v) for v in jnp.mean(s["theta"], axis=0)],
            "potential_energy": float(jnp.mean(mcmc.get_extra_fields()["potential_energy"]))}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    m = run(a.warmup, a.samples, a.seed)
    print(f"mu    {m['mu']:.4f}")
    print(f"tau   {m['tau']:.4f}")
    print("theta " + " ".join(f"{v:.4f}" for v in m["theta"]))
    print(f"mean potential energy {m['potential_energy']:.4f}")
