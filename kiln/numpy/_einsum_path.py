"""Contraction-order optimization for ``einsum``: ``einsum_path`` and an ``einsum`` that
contracts three or more operands pairwise in the order it finds.

A path is opt_einsum's format (what ``jax.numpy.einsum_path`` returns): a list of tuples
of positions in the current operand list; the operands named are contracted into one that
is appended at the end. Strategies: 'greedy' (repeatedly the pair whose result is smallest
relative to its inputs, ties broken by flops), 'optimal' (exhaustive search over pairwise
orders, memoized on the set of remaining operands; greedy beyond 9 operands), 'auto'
(optimal up to 4 operands), ``False``/'none' (one step), or an explicit path.

Each pairwise step is an ``einsum`` of ``kiln.numpy._linalg_basic`` (a ``dot_general``
after diagonal/broadcast handling); this module only decides the order.
"""
from __future__ import annotations

import functools
import math
import string

from kiln.core.trace import get_aval
from kiln.numpy import _util
from kiln.numpy._linalg_basic import einsum as _einsum_base

__all__ = ["einsum", "einsum_path"]

_OPTIMAL_MAX = 9


def _parse_einsum(subscripts, shapes):
    """Per-operand label lists and the output labels, ellipses expanded to spare letters
    (implicit output: ellipsis labels, then the labels used once, sorted)."""
    subscripts = subscripts.replace(" ", "")
    lhs, arrow, out = subscripts.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum: {len(terms)} input subscripts for {len(shapes)} operands")
    spare = [c for c in string.ascii_letters if c not in set(subscripts)]
    n_ell = max([len(s) - (len(t) - 3) for t, s in zip(terms, shapes) if "..." in t],
                default=0)
    ell = spare[:max(n_ell, 0)]
    labels = []
    for t, shape in zip(terms, shapes):
        if "..." in t:
            pre, post = t.split("...")
            k = len(shape) - len(pre) - len(post)
            if k < 0:
                raise ValueError(f"einsum: operand has fewer dims than subscripts {t}")
            lab = list(pre) + ell[len(ell) - k:] + list(post)
        else:
            lab = list(t)
        if len(lab) != len(shape):
            raise ValueError(f"einsum: subscripts {t!r} do not match operand of rank "
                             f"{len(shape)}")
        labels.append(lab)
    if arrow:
        pre, dots, post = out.partition("...")
        out_labels = list(pre) + (ell if dots else []) + list(post)
    else:
        counts = {}
        for lab in labels:
            for c in lab:
                counts[c] = counts.get(c, 0) + 1
        out_labels = ell + sorted(c for c, n in counts.items() if n == 1 and c not in ell)
    return labels, out_labels


def _sizes(labels, shapes):
    sizes = {}
    for lab, shape in zip(labels, shapes):
        for c, d in zip(lab, shape):
            if d != 1 or c not in sizes:
                sizes[c] = d
    return sizes


def _flops(idx, sizes, inner, nterms):
    """opt_einsum's flop count of one contraction over the index set ``idx``."""
    n = math.prod(sizes[c] for c in idx)
    return n * max(nterms - 1, 1) * (2 if inner else 1)


def _contract(sets, pos, keep_out, sizes):
    """Result index set and flops of contracting operands ``pos`` of ``sets``."""
    chosen = [sets[i] for i in pos]
    rest = [s for i, s in enumerate(sets) if i not in pos]
    keep = set(keep_out).union(*rest) if rest else set(keep_out)
    idx = frozenset().union(*chosen)
    result = frozenset(c for c in idx if c in keep)
    return result, _flops(idx, sizes, bool(idx - result), len(chosen))


def _greedy(sets, out, sizes):
    sets = list(sets)
    path, total = [], 0
    while len(sets) > 1:
        best = None
        for i in range(len(sets)):
            for j in range(i + 1, len(sets)):
                res, fl = _contract(sets, (i, j), out, sizes)
                size = lambda s: math.prod(sizes[c] for c in s)  # noqa: E731
                removed = size(res) - size(sets[i]) - size(sets[j])
                key = (removed, fl, i, j)
                if best is None or key < best[0]:
                    best = (key, res, fl)
        (_, _, i, j), res, fl = best
        path.append((i, j))
        total += fl
        sets = [s for k, s in enumerate(sets) if k not in (i, j)] + [res]
    return path, total


def _optimal(sets, out, sizes):
    out = frozenset(out)

    @functools.cache
    def best(remaining):
        # remaining: tuple of index sets; returns (cost, path)
        if len(remaining) == 1:
            return 0, ()
        result = None
        for i in range(len(remaining)):
            for j in range(i + 1, len(remaining)):
                res, fl = _contract(remaining, (i, j), out, sizes)
                rest = [s for k, s in enumerate(remaining) if k not in (i, j)] + [res]
                cost, sub = best(tuple(rest))
                if result is None or fl + cost < result[0]:
                    result = (fl + cost, ((i, j),) + sub)
        return result

    cost, path = best(tuple(sets))
    return list(path), cost


class EinsumPathInfo:
    """Summary of a contraction path (opt_einsum's ``PathInfo`` attributes)."""

    def __init__(self, subscripts, path, steps, naive_cost, opt_cost, largest):
        self.eq = subscripts
        self.path = path
        self.contraction_list = steps
        self.naive_cost = naive_cost
        self.opt_cost = opt_cost
        self.speedup = naive_cost / max(opt_cost, 1)
        self.largest_intermediate = largest

    def __repr__(self):
        lines = [f"  Complete contraction:  {self.eq}",
                 f"         Naive FLOP count:  {self.naive_cost:.3e}",
                 f"     Optimized FLOP count:  {self.opt_cost:.3e}",
                 f"      Theoretical speedup:  {self.speedup:.3e}",
                 f"     Largest intermediate:  {self.largest_intermediate:.3e} elements",
                 "-" * 60, "  contraction          remaining"]
        lines += [f"  {s:<20} {r}" for s, r in self.contraction_list]
        return "\n".join(lines)

    __str__ = __repr__


def _interleaved_to_string(args):
    """``einsum(x, [0, 1], y, [1, 2], [0, 2])`` → ``('ab,bc->ac', [x, y])``."""
    if len(args) % 2:
        body, out = args[:-1], args[-1]
    else:
        body, out = args, None
    ops, subs = list(body[0::2]), list(body[1::2])
    # As opt_einsum (JAX): the user's labels map to letters in their sorted order, so the
    # implicit output (labels seen once, in letter order) follows the labels' order.
    try:
        symbols = sorted({v for sub in subs for v in sub if v is not Ellipsis})
    except TypeError:
        raise TypeError("For this input type lists must contain either Ellipsis "
                        "or hashable and comparable object (e.g. int, str).") from None
    letters = {v: string.ascii_letters[k] for k, v in enumerate(symbols)}

    def term(sub):
        s = []
        for v in sub:
            if v is Ellipsis:
                s.append("...")
            else:
                if v not in letters:
                    letters[v] = string.ascii_letters[len(letters)]
                s.append(letters[v])
        return "".join(s)

    eq = ",".join(term(s) for s in subs)
    if out is not None:
        eq += "->" + term(out)
    return eq, ops


def _plan(subscripts, shapes, optimize):
    labels, out = _parse_einsum(subscripts, shapes)
    sizes = _sizes(labels, shapes)
    sets = [frozenset(lab) for lab in labels]
    n = len(sets)
    if isinstance(optimize, (list, tuple)) and not isinstance(optimize, str):
        path = [tuple(p) for p in optimize if p != "einsum_path"]
    elif optimize is False or optimize is None or optimize == "none" or n < 3:
        path = [tuple(range(n))] if n > 1 else [(0,)]
    elif optimize in ("greedy", "eager"):
        path = _greedy(sets, out, sizes)[0]
    elif optimize in ("optimal", "dp", "branch-all", "branch-2", "branch-1"):
        path = (_optimal if n <= _OPTIMAL_MAX else _greedy)(sets, out, sizes)[0]
    elif optimize is True or optimize == "auto" or optimize == "auto-hq":
        path = (_optimal if n <= 4 else _greedy)(sets, out, sizes)[0]
    else:
        raise ValueError(f"einsum_path: unknown optimize={optimize!r}")
    return labels, out, sizes, path


def einsum_path(subscripts, /, *operands, optimize="auto"):
    """The contraction order ``einsum`` would use, and a summary of its cost."""
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved_to_string((subscripts,) + operands)
    shapes = [tuple(_util.shape_of(o)) for o in operands]
    labels, out, sizes, path = _plan(subscripts, shapes, optimize)
    sets = [frozenset(lab) for lab in labels]
    terms = ["".join(lab) for lab in labels]
    naive = _flops(frozenset().union(*sets), sizes, bool(frozenset().union(*sets) - set(out)),
                   len(sets)) if sets else 0
    cost, largest, steps = 0, 0, []
    for step in path:
        res, fl = _contract(sets, step, out, sizes)
        cost += fl
        largest = max(largest, math.prod(sizes[c] for c in res))
        rest_terms = [t for k, t in enumerate(terms) if k not in step]
        last = len(rest_terms) == 0
        res_term = "".join(out) if last else "".join(sorted(res))
        steps.append((",".join(terms[k] for k in step) + "->" + res_term,
                      ",".join(rest_terms + [res_term])))
        sets = [s for k, s in enumerate(sets) if k not in step] + [res]
        terms = rest_terms + [res_term]
    return list(path), EinsumPathInfo(subscripts, list(path), steps, naive, cost, largest)


def einsum(subscripts, /, *operands, out=None, optimize="auto", precision=None,
           preferred_element_type=None, _dot_general=None, out_sharding=None):
    """Einstein summation; with three or more operands the contraction order comes from
    ``einsum_path(..., optimize=optimize)`` and each step is one pairwise ``einsum``.
    ``out_sharding``: the result's layout (``reshard``; e.g. ``P(unreduced={'x'})``
    makes it unreduced along ``'x'``: the same value, as the sum of per-device partials)."""
    out = _einsum(subscripts, operands, out, optimize, precision, preferred_element_type,
                  _dot_general)
    return _util.laid_out(out, out_sharding)


def _einsum(subscripts, operands, out, optimize, precision, preferred_element_type,
            _dot_general):
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved_to_string((subscripts,) + operands)
    kw = dict(out=out, precision=precision, preferred_element_type=preferred_element_type)
    if _dot_general is not None:
        kw["_dot_general"] = _dot_general
    if len(operands) < 3 or optimize is False or optimize is None or optimize == "none":
        return _einsum_base(subscripts, *operands, **kw)
    _util.check_arraylike("einsum", *operands)
    ops = list(_util.promote_dtypes(*operands))
    shapes = [get_aval(o).shape for o in ops]
    labels, out_labels, _, path = _plan(subscripts, shapes, optimize)
    labels = [list(lab) for lab in labels]
    for step in path:
        rest = [lab for k, lab in enumerate(labels) if k not in step]
        chosen = [labels[k] for k in step]
        if rest:
            need = set(out_labels).union(*rest)
            res = []
            for lab in chosen:
                for c in lab:
                    if c in need and c not in res:
                        res.append(c)
        else:
            res = list(out_labels)
        eq = ",".join("".join(lab) for lab in chosen) + "->" + "".join(res)
        val = _einsum_base(eq, *(ops[k] for k in step), **kw)
        ops = [o for k, o in enumerate(ops) if k not in step] + [val]
        labels = rest + [res]
    return ops[0]
