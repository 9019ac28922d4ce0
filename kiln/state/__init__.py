"""Mutable array references (``jax.new_ref``, ``jax.Ref``, ``jax.ref``): see ``docs/state.md``.

* ``kiln.core.ref``: ``AbstractRef``, ``Ref`` and the primitives (the interpreters know them);
* ``indexing``: ``Slice``/``NDIndexer``, how a reference is indexed;
* ``apply``: what reading/writing an indexed part means, for eager code and discharge alike;
* ``primitives``: the user API, abstract evaluation and implementations;
* ``rules``: JVP, transpose, batching and partial-evaluation rules;
* ``discharge``: turning programs with references into pure programs for the compiler.
"""
from kiln.state import discharge as _discharge
from kiln.state import primitives, rules  # noqa: F401  (registers implementations, rules)
from kiln.state.indexing import NDIndexer, Slice, ds, dslice  # noqa: F401
from kiln.state.primitives import (  # noqa: F401
    empty_ref,
    free_ref,
    freeze,
    new_ref,
    ref_addupdate,
    ref_get,
    ref_set,
    ref_swap,
)
from kiln.state.types import AbstractRef, TransformedRef  # noqa: F401


def _install_backend():
    from kiln.backends import cpu
    cpu.state_handler[0] = (_discharge.has_refs, _discharge.run)


_install_backend()
