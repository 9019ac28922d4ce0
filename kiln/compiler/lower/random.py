"""Native lowering of kiln.random's primitives and XLA's float math, for fusion.

``random_bits``, ``random_split`` and ``random_fold_in`` (Threefry-2x32 keys) become
scalar expressions: each output element is the Threefry hash of its key and its
counter, so the bits fuse with the samplers' arithmetic that follows (``normal`` is
one kernel: hash, shift, bitcast, FMA, ``erf_inv``, scale). The counters are those of
``jax_threefry_partitionable=True`` (JAX's default): the 64-bit row-major index of the
element within ``shape``, as (high, low) words; fold-in hashes (0, data). Under the
old non-partitionable scheme these primitives stay host islands (the NumPy impl).

``xla_log``/``xla_log1p``/``xla_exp``/``xla_erf_inv``/``xla_erf``/``xla_fma`` are the
samplers' private primitives computing XLA's CPU formulas bit for bit; their C is
``kiln/compiler/csrc/xla_math.h`` (the same functions the eager samplers run); the
hash's C is ``csrc/threefry.h`` and ``csrc/threefry_ops.h``.
``xla_tan``/``xla_pow`` render as the C library's ``tan``/``pow`` (what XLA calls),
whatever the compiler's own math library replaces for the generic ops.

What it must not hold: the generic elementwise/movement rules (``lower.py``).
"""
from __future__ import annotations

import numpy as np

from kiln.compiler.lower import lower as _lower
from kiln.compiler.lower.index import Idx, flat_index

_U32 = np.dtype(np.uint32)
_U64 = np.dtype(np.uint64)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# primitive -> scalar op name (rendered by render_c with the XLA math C functions)
XLA_MATH = {"xla_log": "xla_log", "xla_log1p": "xla_log1p", "xla_exp": "xla_exp",
            "xla_erf_inv": "xla_erf_inv", "xla_erf": "xla_erf", "xla_fma": "xla_fma",
            "xla_tan": "xla_tan", "xla_pow": "xla_pow"}
RANDOM = ("random_bits", "random_split", "random_fold_in")

# Cost units (an add is 1) for the fusion cost rule: a hash is ~60 integer ops.
COSTS = {"threefry": 40, "xla_log": 10, "xla_log1p": 14, "xla_exp": 10,
         "xla_erf_inv": 30, "xla_erf": 12, "xla_fma": 1, "xla_tan": 16, "xla_pow": 20}

def _threefry_impl(eqn) -> bool:
    impl = eqn.params.get("impl")
    return getattr(impl, "name", None) == "threefry2x32" or str(impl) == "fry"


def is_native(eqn) -> bool:
    """Whether ``eqn`` (a random or XLA-math primitive) has a native lowering here."""
    name = eqn.primitive.name
    if name in XLA_MATH:
        return np.dtype(eqn.outvars[0].aval.dtype) in _FLOATS and all(
            np.dtype(v.aval.dtype) in _FLOATS for v in eqn.invars)
    if name in RANDOM:
        from kiln.config import config
        if not config.jax_threefry_partitionable or not _threefry_impl(eqn):
            return False
        if any(np.dtype(v.aval.dtype) != _U32 for v in eqn.invars):
            return False
        if name == "random_fold_in":
            kshape = tuple(eqn.invars[0].aval.shape[:-1])
            dshape = tuple(eqn.invars[1].aval.shape)
            return dshape in ((), kshape)
        if name == "random_bits":
            shape = tuple(eqn.params["shape"])
            return eqn.params["bit_width"] in (8, 16, 32, 64) and int(np.prod(shape)) < 2**63
        return True
    return False


def lower_eqn(ctx, eqn, ins):
    """The node for ``eqn``'s single output."""
    from kiln.compiler.lower.lower import LazyNode, _flat_capable
    name = eqn.primitive.name
    out = eqn.outvars[0].aval
    table = ctx.table
    if name in XLA_MATH:
        op = XLA_MATH[name]

        def read(idxs):
            return table.op(op, out.dtype, *[x.read(idxs if x.shape else []) for x in ins])

        flat_ok = all(x.shape == () or _flat_capable(x) for x in ins)

        def read_flat(flat):
            args = [x.read([]) if x.shape == () else x.read_flat(flat) for x in ins]
            return None if any(a is None for a in args) else table.op(op, out.dtype, *args)

        cost = COSTS[name] + sum(getattr(x, "cost", 1) for x in ins)
        return LazyNode(out.shape, out.dtype, read, read_flat if flat_ok else None, cost)

    ctx.prog.guards["jax_threefry_partitionable"] = True
    keys = ins[0]
    nb = len(keys.shape) - 1
    cost = COSTS["threefry"] + keys.cost

    def key_words(b):
        return keys.read(list(b) + [Idx.lit(0)]), keys.read(list(b) + [Idx.lit(1)])

    if name == "random_bits":
        shape = tuple(eqn.params["shape"])
        width = eqn.params["bit_width"]

        def bits(b, flat_in_shape):
            k0, k1 = key_words(b)
            ctr = table.index(flat_in_shape, _U64)
            if width == 64:
                return table.op("threefry", _U64, k0, k1, ctr, mode="cat")
            v = table.op("threefry", _U32, k0, k1, ctr, mode="xor")
            return v if width == 32 else table.op("convert_element_type", out.dtype, v)

        def read(idxs):
            return bits(idxs[:nb], flat_index(idxs[nb:], shape))

        read_flat = (lambda f: bits([], f)) if nb == 0 else None
        return LazyNode(out.shape, out.dtype, read, read_flat, cost)

    if name == "random_split":
        shape = tuple(eqn.params["shape"])

        def read(idxs):
            k0, k1 = key_words(idxs[:nb])
            ctr = table.index(flat_index(idxs[nb:-1], shape), _U64)
            which = table.index(idxs[-1], np.dtype(np.int64))
            return table.op("threefry", _U32, k0, k1, ctr, which, mode="pick")

        return LazyNode(out.shape, out.dtype, read, None, cost)

    # random_fold_in: data broadcasts against the key batch (same shape or scalar).
    data = ins[1]

    def read(idxs):
        b = idxs[:-1]
        k0, k1 = key_words(b)
        d = data.read(list(b) if data.shape else [])
        ctr = table.op("convert_element_type", _U64, d)
        which = table.index(idxs[-1], np.dtype(np.int64))
        return table.op("threefry", _U32, k0, k1, ctr, which, mode="pick")

    return LazyNode(out.shape, out.dtype, read, None, cost)


def render_op(name: str, params: dict, args: list[str], dt) -> str | None:
    """C text of a scalar op defined here, or None if ``name`` is not one of ours."""
    f32 = dt == np.dtype(np.float32)
    if name == "threefry":
        mode = params["mode"]
        return f"kiln_tf_{mode}({', '.join(args)})"
    if name == "xla_tan":
        return f"{'tanf' if f32 else 'tan'}({args[0]})"
    if name == "xla_pow":
        return f"{'powf' if f32 else 'pow'}({args[0]}, {args[1]})"
    if name == "xla_fma":
        return f"{'fmaf' if f32 else 'fma'}({args[0]}, {args[1]}, {args[2]})"
    if name in ("xla_log", "xla_log1p", "xla_exp", "xla_erf_inv", "xla_erf"):
        base = {"xla_log": "xlog", "xla_log1p": "xlog1p", "xla_exp": "xexp",
                "xla_erf_inv": "xerfinv", "xla_erf": "xerf"}[name]
        return f"{base}{32 if f32 else 64}({args[0]})"
    return None


def xla_math_prelude() -> str:
    """XLA's math functions (``xla_math.h``, static inline) with the processor's defines
    before them: one of :func:`preludes`, and every program's precompiled part when the
    build precompiles one (``CRenderer._assemble``)."""
    from kiln.compiler import csrc
    return "#include <float.h>\n" + csrc.cpu_defines() + csrc.text("xla_math.h")


def preludes(source_text: str) -> list[str]:
    """The C definitions the rendered segments in ``source_text`` need."""
    from kiln.compiler import csrc
    out = []
    if "kiln_tf_" in source_text:
        out += [csrc.text("threefry.h"), csrc.text("threefry_ops.h")]
    logistic = "kiln_logistic_xla" in source_text
    xla_names = ("xlog", "xlog1p", "xexp", "xexpm1", "xerfinv", "xerf", "xerfc", "xlgamma",
                 "xdigamma", "xzeta", "xpolygamma", "xpolygammas", "xigamma", "xigammac",
                 "xigammagrada", "xrandgammagrad", "xi0e", "xi1e",
                 "xtanh", "xrsqrt", "xasin", "xacos", "xatan", "xatan1", "xatanp", "xsinh",
                 "xcosh", "xasinh", "xasinhs", "xacosh", "xacoshs", "xatanh")
    fast_exp = "fexp32" in source_text
    trig = any(f in source_text for f in ("ksin32(", "kcos32(", "ktan32("))
    binary = [n for n, f in (("pow", "kpow32("), ("atan2", "katan2_32(")) if f in source_text]
    early = False   # float32 asin/acos call atan2: katan2_32 where its probe passed
    if "xasin32(" in source_text or "xacos32(" in source_text:
        from kiln.compiler.render import binary_math
        early = binary_math.usable("atan2")
    if logistic or fast_exp or trig or binary or any(f"{b}{w}(" in source_text
                                   for b in xla_names for w in (32, 64)):
        if early:
            from kiln.compiler.render import binary_math
            out.append(binary_math.prelude(["atan2"]) + "#define KILN_ATAN2F katan2_32\n")
            binary = [n for n in binary if n != "atan2"]
        out.append(xla_math_prelude())
    if "xasin32(" in source_text or "xacos32(" in source_text:
        # after the optional KILN_ATAN2F above, never in the precompiled part
        out.append(csrc.text("xla_asin_acos32.h"))
    if fast_exp:
        out.append(csrc.text("fast_exp.h"))
    if trig:        # float32 sin/cos/tan with the C library's bits (render/trig_math.py)
        from kiln.compiler.render import trig_math
        out.append(trig_math.prelude("ksin32(" in source_text or "kcos32(" in source_text))
    if "ksin64(" in source_text or "kcos64(" in source_text:   # float64 sin/cos, ditto
        from kiln.compiler.render import trig_math
        out.append(trig_math.prelude64())
    if binary:      # float32 pow/atan2 with the C library's bits (render/binary_math.py)
        from kiln.compiler.render import binary_math
        out.append(binary_math.prelude(binary))
    if logistic:    # XLA expands logistic(x) as 1 / (1 + exp(-x)) with its own exp
        out.append(csrc.text("xla_logistic.h"))
    return out


_lower.register_rule((*XLA_MATH, *RANDOM), is_native,
                    lambda ctx, eqn, ins, out_kind: [lower_eqn(ctx, eqn, ins)])
