"""Run a JAX library's own test suite on JAX and on kiln, and compare test by test.

Usage (from anywhere; the library's tests are extracted outside the repository, see
``docs/ecosystem.md``)::

    python tools/library_suite.py --cwd /work/ext/equinox --name equinox -- tests -x ...
    python tools/library_suite.py --only kiln --cwd ... -- tests/test_nn.py

Runs ``python -m pytest ARGS`` (real JAX) and ``python -m kiln.as_jax -m pytest ARGS``
(kiln) in ``--cwd``, each writing a JUnit XML file under ``--out`` (default
``/tmp/library_suite``), then prints both pass counts, the ratio of JAX's passes that
pass on kiln, and the tests that pass on JAX but not on kiln (with the first line of
their failure). ``--only jax``/``--only kiln`` runs one side (the other side's last XML
is reused when it exists).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def _run(side: str, cwd: str, args: list[str], xml: str, env: dict, timeout: float) -> None:
    cmd = [sys.executable, "-m"]
    cmd += ["kiln.as_jax", "-m", "pytest"] if side == "kiln" else ["pytest"]
    cmd += ["-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *args]
    print("$", " ".join(cmd), flush=True)
    try:
        subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        print(f"  {side}: timed out after {timeout:.0f} s", flush=True)


def _results(xml: str) -> dict:
    """test id -> (outcome, message) from a JUnit XML file."""
    out = {}
    if not os.path.exists(xml):
        return out
    for case in ET.parse(xml).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        outcome, msg = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, msg = "failed", (child.get("message") or "").split("\n")[0]
            elif child.tag == "skipped":
                outcome, msg = "skipped", (child.get("message") or "").split("\n")[0]
        out[tid] = (outcome, msg)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cwd", required=True)
    p.add_argument("--name", default="suite")
    p.add_argument("--out", default="/tmp/library_suite")
    p.add_argument("--only", choices=("jax", "kiln"))
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ)
    xmls = {s: os.path.join(a.out, f"{a.name}-{s}.xml") for s in ("jax", "kiln")}
    for side in ("jax", "kiln"):
        if a.only in (None, side):
            _run(side, a.cwd, args, xmls[side], env, a.timeout)
    res = {s: _results(x) for s, x in xmls.items()}
    jp = {t for t, (o, _) in res["jax"].items() if o == "passed"}
    kp = {t for t, (o, _) in res["kiln"].items() if o == "passed"}
    both = jp & kp
    ratio = len(both) / len(jp) if jp else float("nan")
    print(f"{a.name}: JAX passed {len(jp)} of {len(res['jax'])}; kiln passed {len(kp)} of "
          f"{len(res['kiln'])}; kiln passes {len(both)} of JAX's {len(jp)} ({ratio:.1%})")
    for t in sorted(jp - kp):
        o, msg = res["kiln"].get(t, ("missing", ""))
        print(f"  {o:8s} {t}  {msg[:160]}")
    extra = sorted(kp - jp)
    if extra:
        print(f"  ({len(extra)} pass on kiln only)")


if __name__ == "__main__":
    main()
