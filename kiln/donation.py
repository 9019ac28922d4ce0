"""Buffer donation (``jit(..., donate_argnums=...)``) and compiled-memory statistics.

A donated argument hands its buffer to the computation. As in JAX, a donated array
is usable only when an output has its shape and dtype (outputs are matched to donated
inputs in order); each usable donated ``kiln.Array`` is deleted after the call, so a
later use raises ``RuntimeError: Array has been deleted with shape=float32[4].``. Donated
inputs no output can take draw JAX's warning (``Some donated buffers were not usable``)
once per compilation and stay alive. NumPy arrays and values inside other
transformations are never deleted.

On the compiled backend an output is written into its donated input's memory when that
is safe (``reusable`` here checks at run time that nothing else holds the input's buffer:
a kiln Array that owns its NumPy buffer, referenced by nothing but the Array, passed
once; ``kiln.compiler.lower.plan_buffers.writes_into_input`` checks at compile time that the
program's first step writing the output reads the input only element for element and
nothing reads the input afterwards). Otherwise the output gets fresh memory and the
donated input is still deleted, as JAX does.

What it must not hold: the jit cache or tracing (``api.py``).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from kiln._unreadable import Deleted, _short  # noqa: F401  (Deleted re-exported)


def resolve_donation(params, donate_argnums, donate_argnames, static_argnums):
    """(positional indices, keyword names) donated, each inferred from the other through
    the signature as JAX does; static arguments cannot be donated."""
    from kiln.transformations import _ensure_index_tuple
    nums = set(_ensure_index_tuple(donate_argnums) if donate_argnums is not None else ())
    if isinstance(donate_argnames, str):
        donate_argnames = (donate_argnames,)
    names = set(donate_argnames or ())
    pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i in list(nums):
        if 0 <= i < len(pos):
            names.add(pos[i])
    for nm in list(names):
        if nm in pos:
            nums.add(pos.index(nm))
    bad = nums & set(static_argnums)
    if bad:
        raise ValueError(f"donate_argnums and static_argnums cannot overlap: argument "
                         f"{sorted(bad)[0]} is both static and donated")
    return tuple(sorted(nums)), tuple(sorted(names))


def plan(in_avals, out_avals, donated: list[bool]) -> tuple[list[int], list]:
    """Which donated flat inputs an output can take (JAX pairs them in order, by shape
    and dtype), and the avals of those no output can take."""
    free = [(tuple(a.shape), np.dtype(a.dtype)) for a in out_avals]
    used, unusable = [], []
    for i, (a, d) in enumerate(zip(in_avals, donated)):
        if not d:
            continue
        key = (tuple(a.shape), np.dtype(a.dtype))
        if key in free:
            free.remove(key)
            used.append(i)
        else:
            unusable.append(a)
    return used, unusable


def pair_outputs(in_avals, out_avals, used: list[int]) -> tuple:
    """``((flat input, output index), ...)``: each used donated input takes the first
    output of its shape and dtype not taken by an earlier one (JAX's pairing)."""
    free = [(i, tuple(a.shape), np.dtype(a.dtype)) for i, a in enumerate(out_avals)]
    pairs = []
    for k in used:
        key = (tuple(in_avals[k].shape), np.dtype(in_avals[k].dtype))
        for n, (j, shape, dt) in enumerate(free):
            if (shape, dt) == key:
                pairs.append((k, j))
                del free[n]
                break
    return tuple(pairs)


def reusable(flat_args, pairs) -> tuple:
    """The ``(flat input, output)`` pairs whose input buffer the output may take over:
    the argument is a kiln Array owning a writeable, aligned, contiguous NumPy buffer
    that nothing else references (no view, no other Array, no NumPy variable of the
    caller's) and that is not passed twice."""
    import sys

    from kiln.array import Array
    ok = []
    for k, j in pairs:
        a = flat_args[k]
        if type(a) is not Array:
            continue
        v = a._value
        # References: the Array's slot, ``v`` and getrefcount's argument. A view or any
        # other holder adds one.
        if (type(v) is not np.ndarray or sys.getrefcount(v) > 3 or not v.flags.owndata
                or not v.flags.writeable or not v.flags.c_contiguous
                or not v.flags.aligned or v.size == 0):
            continue
        if any(flat_args[i] is a for i in range(len(flat_args)) if i != k):
            continue
        ok.append((k, j))
    return tuple(ok)


def warn_unusable(avals) -> None:
    if avals:
        shapes = ", ".join(_short(a.shape, a.dtype) for a in avals)
        warnings.warn(f"Some donated buffers were not usable: {shapes}.\nSee an explanation "
                      "at https://docs.jax.dev/en/latest/faq.html#buffer-donation.",
                      UserWarning, stacklevel=4)


def delete_donated(flat_args, used: list[int]) -> None:
    from kiln.array import Array
    for i in used:
        x = flat_args[i]
        if type(x) is Array:
            x.delete()


@dataclass(frozen=True)
class CompiledMemoryStats:
    """Bytes a compiled program uses, as ``jax.stages.Compiled.memory_analysis()``.

    ``temp_size_in_bytes`` counts intermediate buffers (kept in a pool across calls)
    and host-island results; ``peak_memory_in_bytes`` is arguments + outputs +
    temporaries - aliased (all live at once in kiln's executor)."""

    generated_code_size_in_bytes: int = 0
    argument_size_in_bytes: int = 0
    output_size_in_bytes: int = 0
    alias_size_in_bytes: int = 0
    temp_size_in_bytes: int = 0
    host_generated_code_size_in_bytes: int = 0
    host_argument_size_in_bytes: int = 0
    host_output_size_in_bytes: int = 0
    host_alias_size_in_bytes: int = 0
    host_temp_size_in_bytes: int = 0
    peak_memory_in_bytes: int = 0


def memory_stats(closed, used_donations: list[int], name: str = "fun") -> CompiledMemoryStats:
    """Memory statistics of ``closed`` as kiln runs it (native program when it has one,
    else the reference interpreter's values)."""
    import os
    def nbytes(a):
        return int(np.prod(a.shape, dtype=np.int64)) * np.dtype(a.dtype).itemsize

    in_avals = closed.in_avals
    args = sum(nbytes(a) for a in in_avals)
    outs = sum(nbytes(a) for a in closed.out_avals)
    alias = sum(nbytes(in_avals[i]) for i in used_donations)
    code = 0
    from kiln.backends import cpu
    exe = cpu.executable_for(closed, name)
    if exe is not None:
        slots = exe.prog.slots
        slot_size: dict = {}
        temp = 0
        for b in exe.prog.buffers:
            if b.kind not in ("tmp", "host"):
                continue
            if b.id in slots:       # temporaries sharing memory count once per slot
                slot_size[slots[b.id]] = max(slot_size.get(slots[b.id], 0), b.nbytes)
            else:
                temp += b.nbytes
        temp += sum(slot_size.values())
        path = getattr(exe.lib, "_name", None)
        if path and os.path.exists(path):
            code = os.path.getsize(path)
    else:
        out_vars = set(id(v) for v in closed.jaxpr.outvars)
        temp = sum(nbytes(v.aval) for e in closed.jaxpr.eqns for v in e.outvars
                   if id(v) not in out_vars)
    return CompiledMemoryStats(
        generated_code_size_in_bytes=code, argument_size_in_bytes=args,
        output_size_in_bytes=outs, alias_size_in_bytes=alias, temp_size_in_bytes=temp,
        peak_memory_in_bytes=args + outs + temp - alias)
