"""Products of arrays: ``dot``, ``matmul``, ``vdot``, ``vecdot``, ``inner``, ``outer``,
``tensordot``, ``einsum``, ``kron``, ``matvec``, ``vecmat``.

All contractions go through ``lax.dot_general`` after JAX's dtype promotion; ``einsum``
reduces each operand's private indices with ``reduce_sum``, takes repeated indices'
diagonals, then contracts operands pairwise from left to right.
"""
from __future__ import annotations

import string

import numpy as np

from kiln import lax
from kiln.array import Array, make_array
from kiln.config import config as _config
from kiln.core.trace import get_aval
from kiln.numpy import _eager, _util
from kiln.numpy._util import as_operand, canonicalize_axis, check_arraylike

__all__ = ["dot", "matmul", "vdot", "vecdot", "inner", "outer", "tensordot", "einsum",
           "einsum_path", "kron", "matvec", "vecmat"]


def _dot_general(a, b, contract, batch, precision, preferred_element_type):
    from kiln import dtypes
    pet = None if preferred_element_type is None else dtypes.canonicalize_dtype(
        preferred_element_type)
    out = lax.dot_general(a, b, (contract, batch), precision=precision,
                          preferred_element_type=pet)
    return out


def _promote(name, a, b):
    check_arraylike(name, a, b)
    return _util.promote_dtypes(a, b)


def dot(a, b, *, precision=None, preferred_element_type=None, out_sharding=None):
    """NumPy's ``dot``: scalar product, inner product, or contraction of a's last axis
    with b's second-to-last (last for 1-D ``b``). ``out_sharding``: accepted as in JAX (a
    layout; kiln's values do not depend on it)."""
    if (type(a) is Array and type(b) is Array and precision is None
            and preferred_element_type is None and _eager.eager()
            and _config.jax_default_matmul_precision is None):
        av, bv = a._value, b._value
        if (av.dtype is bv.dtype and av.dtype in _eager.PLAIN and 0 < av.ndim < 3
                and 0 < bv.ndim < 3 and av.shape[-1] == bv.shape[0]):
            # np.dot: same BLAS calls and bits as the primitive's np.matmul for 1-D/2-D
            # operands (checked over shapes and dtypes), with less fixed cost.
            if _eager.filtered():
                return make_array(_eager.as_ndarray(np.dot(av, bv)))
            return make_array(_eager.as_ndarray(_eager.call_quietly(np.dot, av, bv)))
    a, b = _promote("dot", a, b)
    na, nb = get_aval(a).ndim, get_aval(b).ndim
    if na == 0 or nb == 0:
        from kiln.numpy._ufuncs import multiply
        out = multiply(a, b)
        if preferred_element_type is not None:
            out = lax.convert_element_type(out, preferred_element_type)
        return out
    cb = 0 if nb == 1 else nb - 2
    return _dot_general(a, b, ((na - 1,), (cb,)), ((), ()), precision,
                        preferred_element_type)


def matmul(a, b, *, precision=None, preferred_element_type=None, out_sharding=None):
    """Matrix product with NumPy's rules: 1-D operands are promoted to matrices (and the
    added axis removed), leading batch axes broadcast. ``out_sharding``: accepted as in JAX
    (a layout; kiln's values do not depend on it)."""
    a, b = _promote("matmul", a, b)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    if len(sa) == 0 or len(sb) == 0:
        raise ValueError(f"matmul: Input operand {0 if len(sa) == 0 else 1} does not have "
                         "enough dimensions (has 0, gufunc core with signature (n?,k),(k,m?)->"
                         "(n?,m?) requires 1)")
    a_vec, b_vec = len(sa) == 1, len(sb) == 1
    if a_vec or b_vec:
        # A vector operand is contracted as is (one dot_general, as JAX stages it): its
        # axis meets a's last axis / b's second-to-last, and never appears in the result.
        ka, kb = sa[-1], sb[0] if b_vec else sb[-2]
        if ka != kb:
            raise TypeError(f"dot_general requires contracting dimensions to have the same "
                            f"shape, got {(ka,)} and {(kb,)}.")
        cb = 0 if b_vec else len(sb) - 2
        return _dot_general(a, b, ((len(sa) - 1,), (cb,)), ((), ()), precision,
                            preferred_element_type)
    if a_vec:
        a = lax.reshape(a, (1,) + sa)
        sa = (1,) + sa
    if b_vec:
        b = lax.reshape(b, sb + (1,))
        sb = sb + (1,)
    if sa[-1] != sb[-2]:
        raise TypeError(f"dot_general requires contracting dimensions to have the same shape, "
                        f"got {(sa[-1],)} and {(sb[-2],)}.")
    na, nb = len(sa), len(sb)
    if nb == 2:
        # (..., m, k) @ (k, n): no batch axes needed.
        out = _dot_general(a, b, ((na - 1,), (0,)), ((), ()), precision,
                           preferred_element_type)
    elif na == 2:
        # (m, k) @ (..., k, n): contract, then move m behind the batch axes.
        out = _dot_general(a, b, ((1,), (nb - 2,)), ((), ()), precision,
                           preferred_element_type)
        # out axes: (m, batch..., n)
        nbatch = nb - 2
        perm = tuple(range(1, 1 + nbatch)) + (0, nbatch + 1)
        out = lax.transpose(out, perm)
    else:
        batch_shape = _util.broadcast_shapes(sa[:-2], sb[:-2])
        a = _util.broadcast_to(a, batch_shape + sa[-2:])
        b = _util.broadcast_to(b, batch_shape + sb[-2:])
        nbatch = len(batch_shape)
        bd = tuple(range(nbatch))
        out = _dot_general(a, b, ((nbatch + 1,), (nbatch,)), (bd, bd), precision,
                           preferred_element_type)
    shape = get_aval(out).shape
    if a_vec and b_vec:
        return lax.reshape(out, shape[:-2])
    if a_vec:
        return lax.reshape(out, shape[:-2] + shape[-1:])
    if b_vec:
        return lax.reshape(out, shape[:-1])
    return out


def matvec(x1, x2, /):
    """Batched matrix-vector product."""
    check_arraylike("matvec", x1, x2)
    return matmul(x1, lax.expand_dims(as_operand(x2), (get_aval(as_operand(x2)).ndim,))
                  )[..., 0]


def vecmat(x1, x2, /):
    """Batched (conjugated) vector-matrix product."""
    check_arraylike("vecmat", x1, x2)
    from kiln.numpy._ufuncs import conj
    x1 = conj(x1)
    out = matmul(lax.expand_dims(x1, (get_aval(x1).ndim - 1,)), x2)
    return out[..., 0, :]


def vdot(a, b, *, precision=None, preferred_element_type=None):
    """Dot product of the flattened arrays, conjugating ``a``."""
    a, b = _promote("vdot", a, b)
    from kiln.numpy._ufuncs import conj
    a = conj(a)
    a = lax.reshape(a, (get_aval(a).size,))
    b = lax.reshape(b, (get_aval(b).size,))
    return dot(a, b, precision=precision, preferred_element_type=preferred_element_type)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    """Conjugated dot product of vectors along ``axis``, broadcasting the rest."""
    x1, x2 = _promote("vecdot", x1, x2)
    from kiln.numpy._shape import moveaxis
    from kiln.numpy._ufuncs import conj
    x1 = moveaxis(conj(x1), canonicalize_axis(axis, get_aval(x1).ndim), -1)
    x2 = moveaxis(x2, canonicalize_axis(axis, get_aval(x2).ndim), -1)
    if get_aval(x1).shape[-1] != get_aval(x2).shape[-1]:
        raise ValueError("x1 and x2 must have the same size along the given axis")
    return matmul(x1[..., None, :], x2[..., None], precision=precision,
                  preferred_element_type=preferred_element_type)[..., 0, 0]


def inner(a, b, *, precision=None, preferred_element_type=None):
    """Sum of products over the last axes."""
    a, b = _promote("inner", a, b)
    na, nb = get_aval(a).ndim, get_aval(b).ndim
    if na == 0 or nb == 0:
        from kiln.numpy._ufuncs import multiply
        return multiply(a, b)
    return _dot_general(a, b, ((na - 1,), (nb - 1,)), ((), ()), precision,
                        preferred_element_type)


def outer(a, b, out=None):
    """``a.ravel()[:, None] * b.ravel()[None, :]``."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.outer is not supported.")
    a, b = _promote("outer", a, b)
    a = lax.reshape(a, (get_aval(a).size, 1))
    b = lax.reshape(b, (1, get_aval(b).size))
    from kiln.numpy._ufuncs import multiply
    return multiply(a, b)


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None,
              out_sharding=None):
    """Contract ``axes`` (an int: the last/first n axes; or two sequences of axes).
    ``out_sharding``: accepted as in JAX (a layout; kiln's values do not depend on it)."""
    a, b = _promote("tensordot", a, b)
    na, nb = get_aval(a).ndim, get_aval(b).ndim
    if isinstance(axes, int) or (hasattr(axes, "__index__") and not isinstance(axes, (list,
                                                                                    tuple))):
        n = int(axes)
        if n < 0 or n > min(na, nb):
            raise TypeError(f"Number of tensordot axes (axes {n}) exceeds input ranks "
                            f"({na} and {nb})")
        ca, cb = tuple(range(na - n, na)), tuple(range(n))
    elif isinstance(axes, (list, tuple)) and len(axes) == 2:
        ax_a, ax_b = axes
        ax_a = (ax_a,) if isinstance(ax_a, int) else tuple(ax_a)
        ax_b = (ax_b,) if isinstance(ax_b, int) else tuple(ax_b)
        if len(ax_a) != len(ax_b):
            raise TypeError("tensordot requires axes lists to have equal length, got "
                            f"{ax_a} and {ax_b}.")
        ca = tuple(canonicalize_axis(i, na) for i in ax_a)
        cb = tuple(canonicalize_axis(i, nb) for i in ax_b)
    else:
        raise TypeError("tensordot axes argument must be an int, a pair of ints, or a pair of "
                        f"lists/tuples of ints; got {axes}")
    return _dot_general(a, b, (ca, cb), ((), ()), precision, preferred_element_type)


def kron(a, b):
    """Kronecker product."""
    a, b = _promote("kron", a, b)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    nd = max(len(sa), len(sb))
    sa = (1,) * (nd - len(sa)) + sa
    sb = (1,) * (nd - len(sb)) + sb
    a = lax.reshape(a, sa)
    b = lax.reshape(b, sb)
    big = []
    for x, y in zip(sa, sb):
        big.extend((x, y))
    big = tuple(big)
    ab = lax.broadcast_in_dim(a, big, tuple(range(0, 2 * nd, 2)))
    bb = lax.broadcast_in_dim(b, big, tuple(range(1, 2 * nd, 2)))
    from kiln.numpy._ufuncs import multiply
    return lax.reshape(multiply(ab, bb), tuple(x * y for x, y in zip(sa, sb)))


# ----------------------------------------------------------------------------------------------
# einsum


def _parse_einsum(subscripts, shapes):
    """Return per-operand label lists and the output label list (ellipsis expanded)."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        lhs, out = subscripts.split("->")
        explicit = True
    else:
        lhs, out, explicit = subscripts, None, False
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: {len(ins)} input subscripts for {len(shapes)} operands")
    used = set(subscripts) - set(",.->")
    spare = [c for c in string.ascii_letters if c not in used]
    max_ell = 0
    for term, shape in zip(ins, shapes):
        if "..." in term:
            max_ell = max(max_ell, len(shape) - (len(term) - 3))
    ell_labels = spare[:max_ell]
    labels = []
    for term, shape in zip(ins, shapes):
        if "..." in term:
            pre, post = term.split("...")
            k = len(shape) - len(pre) - len(post)
            if k < 0:
                raise ValueError(f"einsum: operand has fewer dims than subscripts {term}")
            lab = list(pre) + ell_labels[max_ell - k:] + list(post)
        else:
            lab = list(term)
            if len(lab) != len(shape):
                raise ValueError(f"einsum: subscripts {term!r} do not match operand of rank "
                                 f"{len(shape)}")
        labels.append(lab)
    if explicit:
        if "..." in out:
            pre, post = out.split("...")
            out_labels = list(pre) + ell_labels + list(post)
        else:
            out_labels = list(out)
        seen_in = set().union(*labels) if labels else set()
        for c in out_labels:
            if c not in seen_in:
                raise ValueError(f"Output character {c!r} did not appear in the input")
        if len(set(out_labels)) != len(out_labels):
            raise ValueError(f"einsum: output subscript {out!r} repeats a label")
    else:
        counts = {}
        for lab in labels:
            for c in lab:
                counts[c] = counts.get(c, 0) + 1
        out_labels = ell_labels + sorted(c for c, n in counts.items()
                                         if n == 1 and c not in ell_labels)
    return labels, out_labels


def _take_diagonals(x, labels):
    """Collapse repeated labels of one operand to their diagonal."""
    while True:
        seen = {}
        dup = None
        for i, c in enumerate(labels):
            if c in seen:
                dup = (seen[c], i)
                break
            seen[c] = i
        if dup is None:
            return x, labels
        from kiln.numpy._shape import diagonal
        i, j = dup
        x = diagonal(x, 0, i, j)
        labels = [c for k, c in enumerate(labels) if k not in (i, j)] + [labels[i]]


def einsum(subscripts, /, *operands, out=None, optimize="auto", precision=None,
           preferred_element_type=None, _dot_general=None):
    """Einstein summation over string ``subscripts`` (ellipses allowed)."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.einsum is not supported.")
    if not isinstance(subscripts, str):
        raise NotImplementedError("einsum with the interleaved (operand, sublist) form is not "
                                  "implemented")
    check_arraylike("einsum", *operands)
    ops = _util.promote_dtypes(*operands)
    shapes = [get_aval(o).shape for o in ops]
    labels, out_labels = _parse_einsum(subscripts, shapes)
    sizes = {}
    for lab, shape in zip(labels, shapes):
        for c, d in zip(lab, shape):
            if d != 1:
                if sizes.get(c, d) != d:
                    raise ValueError(f"einsum: size of label {c!r} differs: {sizes[c]} vs {d}")
                sizes[c] = d
            else:
                sizes.setdefault(c, 1)
    work = []
    for x, lab in zip(ops, labels):
        x, lab = _take_diagonals(x, list(lab))
        # A size-1 axis whose label is larger elsewhere broadcasts: drop it.
        drop = [i for i, c in enumerate(lab) if get_aval(x).shape[i] == 1 and sizes[c] != 1]
        if drop:
            x = lax.reshape(x, tuple(d for i, d in enumerate(get_aval(x).shape) if i not in drop))
            lab = [c for i, c in enumerate(lab) if i not in drop]
        work.append((x, lab))

    def needed_after(k):
        s = set(out_labels)
        for _, lab in work[k:]:
            s.update(lab)
        return s

    # Sum out labels private to one operand up front.
    for k, (x, lab) in enumerate(work):
        others = set(out_labels)
        for j, (_, l2) in enumerate(work):
            if j != k:
                others.update(l2)
        private = tuple(i for i, c in enumerate(lab) if c not in others)
        if private:
            x = lax.reduce_sum(x, private)
            lab = [c for i, c in enumerate(lab) if i not in private]
        work[k] = (x, lab)

    x, lab = work[0]
    for k in range(1, len(work)):
        y, ylab = work[k]
        keep = needed_after(k + 1)
        common = [c for c in lab if c in ylab]
        batch = [c for c in common if c in keep]
        contract = [c for c in common if c not in keep]
        bx = tuple(lab.index(c) for c in batch)
        by = tuple(ylab.index(c) for c in batch)
        cx = tuple(lab.index(c) for c in contract)
        cy = tuple(ylab.index(c) for c in contract)
        x = _dot_general_ein(x, y, (cx, cy), (bx, by), precision, preferred_element_type)
        lab = (batch + [c for c in lab if c not in common]
               + [c for c in ylab if c not in common])
        # Labels no longer needed (appearing only in x and not later) get summed.
        dead = tuple(i for i, c in enumerate(lab) if c not in needed_after(k + 1))
        if dead:
            x = lax.reduce_sum(x, dead)
            lab = [c for i, c in enumerate(lab) if i not in dead]
    extra = tuple(i for i, c in enumerate(lab) if c not in out_labels)
    if extra:
        x = lax.reduce_sum(x, extra)
        lab = [c for i, c in enumerate(lab) if i not in extra]
    # Labels of the output missing here were size-1 everywhere (or broadcast): add them.
    missing = [c for c in out_labels if c not in lab]
    if missing:
        shape = get_aval(x).shape + tuple(sizes.get(c, 1) for c in missing)
        x = lax.broadcast_in_dim(x, shape, tuple(range(len(lab))))
        lab = lab + missing
    perm = tuple(lab.index(c) for c in out_labels)
    x = lax.transpose(x, perm)
    if preferred_element_type is not None and len(work) == 1:
        x = lax.convert_element_type(x, preferred_element_type)
    return x


def _dot_general_ein(x, y, contract, batch, precision, preferred_element_type):
    return _dot_general(x, y, contract, batch, precision, preferred_element_type)


def einsum_path(subscripts, *operands, optimize="greedy"):
    """A trivial left-to-right contraction path."""
    return [(0, 1)] * max(len(operands) - 1, 0), "kiln einsum: left-to-right pairwise"
