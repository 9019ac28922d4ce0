"""kiln: composable transformations of Python+NumPy programs, JAX-compatible.

``import kiln as jax; import kiln.numpy as jnp`` runs JAX programs unchanged.
"""
import os as _os

# Compiled kernels run on OpenMP (libgomp, loaded with the first compiled program). After
# each parallel region its threads spin GOMP_SPINCOUNT pause instructions (~40 ns each
# here) before sleeping: libgomp's default 300000 (~12 ms) made a conv net train 3x
# slower under load; 10000 (~0.4 ms) still made every small parallel region cost a
# scheduler time slice on a busy machine (MLP step b128 1.8-2.3x JAX, JAX's mnist_vae
# 3-4x JAX at load 8 on 2 cores). 300 (~12 us) still bridges back-to-back regions of one
# program and gave 0.8-1.5x and ~1x (benchmarks/NOTES.md, "Session 13"). Speed only:
# results do not depend on it. A value the user set is kept.
_os.environ.setdefault("GOMP_SPINCOUNT", "300")
from kiln.numpy import _array_methods  # noqa: F401,I001  (installs operators)
from kiln import (
    _fp_warnings,  # noqa: F401  (silences NumPy inf/nan warnings raised inside kiln)
    ad_checkpoint,  # noqa: F401
    api_util,  # noqa: F401
    custom_batching,  # noqa: F401
    debug,  # noqa: F401
    distributed,  # noqa: F401
    dlpack,  # noqa: F401
    dtypes,  # noqa: F401
    errors,  # noqa: F401
    experimental,  # noqa: F401
    image,  # noqa: F401
    lax,  # noqa: F401
    monitoring,  # noqa: F401
    nn,  # noqa: F401
    numpy,  # noqa: F401
    ops,  # noqa: F401  (jax.ops: segment reductions)
    profiler,  # noqa: F401  (lazy: its modules load on first use)
    random,  # noqa: F401
    ref,  # noqa: F401,E402  (jax.ref: mutable array references)
    scipy,  # noqa: F401
    sharding,  # noqa: F401
    stages,  # noqa: F401
    test_util,  # noqa: F401
    tree,  # noqa: F401
    tree_util,  # noqa: F401
    typing,  # noqa: F401
)
from kiln import config as _config_module
from kiln._fwd_and_bwd import fwd_and_bwd  # noqa: F401
from kiln.ad_checkpoint import checkpoint_policies  # noqa: F401
from kiln.api import (  # noqa: F401
    Compiled,
    Lowered,
    ShapeDtypeStruct,
    block_until_ready,
    clear_caches,
    device_get,
    device_put,
    effects_barrier,
    ensure_compile_time_eval,
    eval_shape,
    grad,
    hessian,
    jacfwd,
    jacobian,
    jacrev,
    jit,
    jvp,
    linear_transpose,
    linearize,
    make_jaxpr,
    named_call,
    named_scope,
    value_and_grad,
    vjp,
    vmap,
)
from kiln.array import PublicArray as Array  # noqa: F401
from kiln.callbacks import pure_callback  # noqa: F401
from kiln.config import (  # noqa: F401  # noqa: F401
    check_tracer_leaks,
    checking_leaks,
    config,
    debug_infs,
    debug_key_reuse,
    no_execution,
    debug_nans,
    default_device,
    default_matmul_precision,
    default_prng_impl,
    disable_jit,
    enable_checks,
    enable_custom_prng,
    enable_x64,
    explain_cache_misses,
    legacy_prng_key,
    log_compiles,
    numpy_dtype_promotion,
    numpy_rank_promotion,
    threefry_partitionable,
    transfer_guard,
    transfer_guard_device_to_device,
    transfer_guard_device_to_host,
    transfer_guard_host_to_device,
)
from kiln.core.ref import Ref  # noqa: F401,E402
from kiln.core.trace import Tracer as _Tracer  # noqa: F401
from kiln.custom_derivatives import (  # noqa: F401
    checkpoint,
    closure_convert,
    custom_gradient,
    custom_jvp,
    custom_vjp,
    remat,
)
from kiln.devices import (  # noqa: F401
    Device,
    default_backend,
    device_count,
    devices,
    local_device_count,
    local_devices,
    process_count,
    process_index,
)
from kiln.dtypes import float0  # noqa: F401
from kiln.interpreters import pjit as _pjit  # noqa: F401
from kiln.parallel import pmap, shard_map, smap  # noqa: F401
from kiln.parallel.placement import (  # noqa: F401
    make_array_from_callback,
    make_array_from_process_local_data,
    make_array_from_single_device_arrays,
    reshard,
    typeof,
)
from kiln.profiler import live_arrays  # noqa: F401
from kiln.sharding import NamedSharding, P, Shard, make_mesh, set_mesh, use_mesh  # noqa: F401
from kiln.state import ds, dslice  # noqa: F401,E402
from kiln.state.primitives import freeze, new_ref  # noqa: F401,E402

__version__ = "0.1.0"


def _on_debug_flags(_value):
    from kiln.core.trace import _debug_checks
    from kiln.numpy._array_methods import _FAST
    # For every thread's values (context managers are thread-local): these switches only
    # gate the checks, which read the flags themselves.
    on = any(config.values_in_use("jax_debug_nans")) or any(
        config.values_in_use("jax_debug_infs"))
    # The eager operator fast path skips NaN checks, rank-promotion checks and jnp's
    # error_check checks (kiln/numpy/_error.py).
    from kiln.numpy._error import any_raise
    _FAST[0] = not on and not any_raise() and all(
        v == "allow" for v in config.values_in_use("jax_numpy_rank_promotion"))
    _debug_checks[0] = on


for _flag in ("jax_debug_nans", "jax_debug_infs", "jax_numpy_rank_promotion",
              "jax_error_checking_behavior_nan", "jax_error_checking_behavior_divide",
              "jax_error_checking_behavior_oob"):
    config.on_change(_flag, _on_debug_flags)
del _flag
_on_debug_flags(None)
del _config_module


# Names JAX 0.10.2 removed from its top level, with JAX's message (the functions stay in
# ``jax._src.api``, as in JAX: ``kiln._src.api``).
_REMOVED = {
    name: (f"jax.{name} is deprecated; use jax.device_put instead. See "
           "https://docs.jax.dev/en/latest/migrate_pmap.html#drop-in-replacements for a "
           "drop-in replacement.")
    for name in ("device_put_sharded", "device_put_replicated")
}


def __getattr__(name: str):
    msg = _REMOVED.get(name)
    if msg is None:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")
    err = AttributeError(msg)
    err.jax_message = True
    raise err
