"""High-level ("hijax") values at transformation boundaries.

A hijax value is an object of a type registered with ``jax.experimental.hijax.
register_hitype`` whose abstract value has ``is_high`` (Flax NNX's ``HijaxVariable``).
Inside transformations kiln lowers hijax values *while tracing*: a hijax primitive's
``to_lojax`` runs on the Python objects (whose contents are then tracers), so the staged
program only ever holds ordinary arrays. What needs care is the boundary:

* a hijax argument of ``jit`` is passed as its low-level values (``lo_ty_qdd`` /
  ``read_loval``), the traced function gets a new hijax object over the traced values
  (``new_from_loval``), and for a mutable one its final values (under its final
  quasi-dynamic data, which may differ: a dict that gained a key) are extra outputs,
  written back into the caller's object after the call (``update_from_loval``), as JAX does;
* ``eval_shape`` lowers and raises them the same way (nothing is written back).

What it must not hold: the hijax API (``kiln.experimental.hijax``).
"""
from __future__ import annotations

#: Classes registered with ``register_hitype`` (their instances are hijax values).
hi_types: set = set()


def is_hi(x) -> bool:
    return type(x) in hi_types


def any_hi(xs) -> bool:
    return bool(hi_types) and any(type(x) in hi_types for x in xs)


class HiSpec:
    """How one hijax argument crosses a boundary: its abstract value, quasi-dynamic data
    (``None`` for an immutable type) and number of low-level values."""

    __slots__ = ("aval", "qdd", "n")

    def __init__(self, aval, qdd, n):
        self.aval, self.qdd, self.n = aval, qdd, n

    def key(self):
        return (self.aval, self.qdd)


def lower(x):
    """``(HiSpec, low-level values)`` of the hijax value ``x`` (under the current trace)."""
    from kiln.core.trace import get_aval
    aval = get_aval(x)
    if getattr(aval, "has_qdd", False):
        qdd = x.cur_qdd()
        vals = list(aval.read_loval(qdd, x))
        return HiSpec(aval, qdd, len(vals)), vals
    try:
        lo_avals = aval.lo_ty()
    except (AssertionError, NotImplementedError) as e:
        raise NotImplementedError(
            f"kiln: a hijax value of type {aval} without quasi-dynamic data cannot cross a "
            "transformation boundary (its type defines no lo_ty)") from e
    vals = list(aval.lower_val(x))
    return HiSpec(aval, None, len(lo_avals)), vals


def lo_avals(spec: HiSpec) -> list:
    if spec.qdd is not None:
        return list(spec.aval.lo_ty_qdd(spec.qdd))
    return list(spec.aval.lo_ty())


def raise_(spec: HiSpec, vals):
    """A new hijax value over the low-level values ``vals`` (tracers, inside a trace)."""
    if spec.qdd is not None:
        return spec.aval.new_from_loval(spec.qdd, *vals)
    return spec.aval.raise_val(*vals)


def final(spec: HiSpec, obj):
    """``(final qdd, final low-level values)`` of a mutable hijax value at the end of a
    trace (``None`` for an immutable one)."""
    if spec.qdd is None:
        return None
    qdd = obj.cur_qdd()
    return qdd, list(spec.aval.read_loval(qdd, obj))


def write_back(spec: HiSpec, obj, qdd, vals) -> None:
    """Store a call's final low-level values into the caller's mutable hijax value."""
    spec.aval.update_from_loval(qdd, obj, *vals)


def lower_args(a_flat):
    """``(specs, low-level flat args)``: one spec per argument (``None`` for an ordinary
    one), the hijax arguments replaced by their low-level values."""
    specs, lo = [], []
    for x in a_flat:
        if type(x) in hi_types:
            spec, vals = lower(x)
            specs.append(spec)
            lo.extend(vals)
        else:
            specs.append(None)
            lo.append(x)
    return specs, lo


def raise_args(specs, lo_xs):
    """The inverse of :func:`lower_args` inside a trace: new hijax values over tracers
    (they belong to the current trace)."""
    from kiln.core.trace import current_trace
    out, it = [], iter(lo_xs)
    for s in specs:
        if s is None:
            out.append(next(it))
        else:
            obj = raise_(s, [next(it) for _ in range(s.n)])
            mark_owned(current_trace(), obj)
            out.append(obj)
    return out


# ----------------------------------------------------------------------------------------------
# Hijax values a staged function closed over ("captured"): written ones must cross the
# boundary too. A staging trace records the hijax values it did not create or receive the
# first time a hijax primitive touches them, with their state then; when tracing ends and
# such a value was changed, its state is restored and ``CapturedHiWrite`` raised: a loop
# (``scan``) then traces its body again with those values as extra carries; elsewhere it
# is JAX's unsupported case for kiln (``NotImplementedError``).

class CapturedHiWrite(NotImplementedError):
    """A staged function wrote into hijax values it closed over (``objs``)."""

    def __init__(self, objs):
        super().__init__(
            "kiln: a staged function (jit, cond, while_loop) wrote into a hijax value it "
            "closed over; pass the value as an argument instead (scan bodies may write "
            "them: kiln carries them through the loop)")
        self.objs = objs


class _TraceHi:
    """A staging trace's ``hi_state``; the trace calls :meth:`finish` when tracing ends
    (``kiln.interpreters.staging`` sits below this module and does not import it)."""

    __slots__ = ("owned", "captured")

    def __init__(self):
        self.owned = set()          # ids of hijax values created or raised in this trace
        self.captured = {}          # id -> (value, state when first touched)

    def finish(self) -> None:
        """Restore the captured hijax values; if one was written, raise
        ``CapturedHiWrite`` naming those."""
        if not self.captured:
            return
        written = [obj for obj, snap in self.captured.values() if changed(obj, snap)]
        for obj, snap in self.captured.values():
            restore(obj, snap)
        if written:
            raise CapturedHiWrite(written)


def _state_of(trace):
    st = trace.hi_state
    if st is None:
        st = trace.hi_state = _TraceHi()
    return st


def _slots(obj):
    names = []
    for klass in type(obj).__mro__:
        for n in getattr(klass, "__slots__", ()):
            if n not in ("__weakref__", "__dict__") and n not in names:
                names.append(n)
    return names


def snapshot(obj):
    """The state of a hijax value (its slots and ``__dict__``), to restore later."""
    state = {}
    for n in _slots(obj):
        try:
            state[n] = object.__getattribute__(obj, n)
        except AttributeError:
            pass
    try:        # (not getattr: hijax values may forward unknown attributes)
        d = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        d = None
    return state, (dict(d) if d is not None else None)


def restore(obj, snap) -> None:
    state, d = snap
    for n, v in state.items():
        object.__setattr__(obj, n, v)
    if d is not None:
        own = object.__getattribute__(obj, "__dict__")
        own.clear()
        own.update(d)


def changed(obj, snap) -> bool:
    now = snapshot(obj)
    return any(now[0].get(k) is not v for k, v in snap[0].items()) or (
        snap[1] is not None and (now[1].keys() != snap[1].keys()
                                 or any(now[1][k] is not v for k, v in snap[1].items())))


def mark_owned(trace, obj) -> None:
    """``obj`` belongs to ``trace`` (created or raised there): not a captured value."""
    from kiln.interpreters.staging import JaxprTrace
    if type(trace) is JaxprTrace:
        _state_of(trace).owned.add(id(obj))


def before_bind(trace, args) -> None:
    """Record the hijax values among ``args`` that ``trace`` meets for the first time and
    did not create (with their current state)."""
    st = _state_of(trace)
    for a in args:
        if type(a) in hi_types:
            i = id(a)
            if i not in st.owned and i not in st.captured:
                st.captured[i] = (a, snapshot(a))


def after_bind(trace, outs) -> None:
    for o in (outs if isinstance(outs, (list, tuple)) else (outs,)):
        if type(o) in hi_types:
            _state_of(trace).owned.add(id(o))


def finish_trace(trace) -> None:
    """At the end of tracing: restore the captured hijax values; if one was written,
    raise ``CapturedHiWrite`` naming those."""
    st = trace.hi_state
    if st is not None:
        st.finish()
