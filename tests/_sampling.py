"""Test tiers and the sampling knob for long generated tables (docs/testing.md).

Two environment variables decide how much of the suite runs:

- ``KILN_TEST_TIER``: ``default`` (unset) leaves out the tests marked ``slow`` and samples
  the generated tables; ``full`` runs every test and every generated case.
- ``KILN_NUM_GENERATED_CASES`` (as JAX's ``JAX_NUM_GENERATED_CASES``): at most this many
  cases per group (one operation, one function, ...) in each sampled table; ``all`` (or
  ``0``) runs every case. Default: 1 in the default tier, ``all`` in the full tier.

Sampling never drops a group: each parametrized test keeps at least one case of every group
(so every op of the op-record tables still runs under every transformation), and which case
stands for its group rotates from one test function to the next (deterministically, by a
hash of the test name), so the transformations together exercise more of the variants.
"""
from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Hashable, Sequence

TIER = os.environ.get("KILN_TEST_TIER", "default").strip().lower() or "default"
if TIER not in ("default", "full"):
    raise ValueError(f"KILN_TEST_TIER={TIER!r}: expected 'default' or 'full'")


def _num_cases() -> int | None:
    raw = os.environ.get("KILN_NUM_GENERATED_CASES", "").strip().lower()
    if not raw:
        return None if TIER == "full" else 1
    if raw in ("all", "0"):
        return None
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"KILN_NUM_GENERATED_CASES={raw!r}: expected a positive integer or "
                         "'all'") from None
    if n < 0:
        raise ValueError(f"KILN_NUM_GENERATED_CASES={raw!r}: expected a positive integer or "
                         "'all'")
    return n


# None: every case.
NUM_CASES: int | None = _num_cases()


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


def sample_cases(cases: Sequence, group: Callable[[object], Hashable], salt: str,
                 n: int | None = None) -> list:
    """At most ``n`` (default ``NUM_CASES``) of ``cases`` per ``group(case)``, in the
    original order.

    Args:
      cases: the table (values or ``pytest.param`` objects).
      group: maps a case to its group key (e.g. the operation it tests); every group keeps
        ``min(n, size)`` cases.
      salt: names the test function, so different tests pick different members.
      n: cases per group; ``None`` keeps the whole table.

    Returns:
      The kept cases, a deterministic function of ``cases``, ``group``, ``salt`` and ``n``.
    """
    n = NUM_CASES if n is None else n
    if n is None:
        return list(cases)
    groups: dict = {}
    for i, c in enumerate(cases):
        groups.setdefault(group(c), []).append(i)
    keep = set()
    for key, idx in groups.items():
        if len(idx) <= n:
            keep.update(idx)
            continue
        start = _crc(f"{salt}|{key!r}") % len(idx)
        keep.update(idx[(start + j) % len(idx)] for j in range(n))
    return [c for i, c in enumerate(cases) if i in keep]



def sample_cover(cases: Sequence, keys: Callable[[object], tuple], salt: str,
                 n: int | None = None) -> list:
    """Cases of a table with several axes (e.g. index expression x update op), kept until
    every value of every axis appears in at least ``n`` of them (default ``NUM_CASES``; the
    whole table when that is ``None``), in the original order.

    Args:
      cases: the table (values or ``pytest.param`` objects), e.g. only the valid pairs.
      keys: maps a case to its coordinates, one hashable per axis, e.g. ``(index, op)``.
      salt: names the test function; it rotates where the scan starts.
      n: cases per axis value.

    Returns:
      The kept cases: about ``n`` times the longest axis instead of the product.
    """
    n = NUM_CASES if n is None else n
    if n is None or not cases:
        return list(cases)
    start = _crc(salt) % len(cases)
    order = [(start + k) % len(cases) for k in range(len(cases))]
    count: dict = {}
    keep = set()
    for need_all in (True, False):      # first cases that add to every axis, then any
        for i in order:
            if i in keep:
                continue
            ks = [(axis, key) for axis, key in enumerate(keys(cases[i]))]
            under = [count.get(k, 0) < n for k in ks]
            if all(under) if need_all else any(under):
                keep.add(i)
                for k in ks:
                    count[k] = count.get(k, 0) + 1
    return [c for i, c in enumerate(cases) if i in keep]
