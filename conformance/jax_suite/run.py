"""Run modules of JAX's own test suite on real JAX and on kiln, the same test ids on both,
and compare (see README.md in this folder).

    python conformance/jax_suite/run.py --checkout /work/ext/jax-v0.10.2 \\
        --max-tests 150 api_test lax_test ...

For each module: collect its test ids on real JAX; if there are more than ``--max-tests``,
keep every k-th id (k = ceil(n / max)), a deterministic sample; run those ids on JAX
(``python -m pytest``) and on kiln (``boot_kiln.py``: ``import jax`` is kiln, JAX's test
helpers come from the checkout), each in its own subprocess, one module at a time, with
``JAX_NUM_GENERATED_CASES=1``, ``XLA_FLAGS=--xla_force_host_platform_device_count=8``, a
per-test timeout and no xdist. Results (JUnit XML and JSON lines) go to ``--out``. Then it
prints, per module, JAX passed / kiln passed / kiln passed among JAX's passes / skipped by
the harness on kiln, and kiln's failures among JAX's passes grouped by cause (exception
class and first message line). ``--report`` only re-reads the results.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _env(side: str, ids: str | None, results: str, timeout: int) -> dict:
    env = dict(os.environ)
    env["JAX_NUM_GENERATED_CASES"] = "1"
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (REPO, HERE, os.environ.get("PYTHONPATH", "")) if p)
    env["JAX_SUITE_SIDE"] = side
    env["JAX_SUITE_RESULTS"] = results
    env["JAX_SUITE_TIMEOUT"] = str(timeout)
    if ids:
        env["JAX_SUITE_IDS"] = ids
    else:
        env.pop("JAX_SUITE_IDS", None)
    return env


def _pytest_cmd(side: str, checkout: str) -> list[str]:
    if side == "kiln":
        return [sys.executable, os.path.join(HERE, "boot_kiln.py"), checkout]
    return [sys.executable, "-m", "pytest"]


COMMON = ["-p", "no:cacheprovider", "-p", "no:xdist", "-p", "jax_suite_plugin",
          "-o", "addopts=", "-q"]


def collect(checkout: str, module: str, out: str) -> list[str]:
    tests = os.path.join(checkout, "tests")
    cmd = [*_pytest_cmd("jax", checkout), *COMMON, "--collect-only", f"{module}.py"]
    env = _env("jax", None, os.path.join(out, f"{module}-collect.jsonl"), 0)
    p = subprocess.run(cmd, cwd=tests, env=env, capture_output=True, text=True)
    ids = [ln.strip() for ln in p.stdout.splitlines() if "::" in ln]
    return ids


def sample(ids: list[str], max_tests: int) -> list[str]:
    if max_tests <= 0 or len(ids) <= max_tests:
        return ids
    k = math.ceil(len(ids) / max_tests)
    return ids[::k]


def run_side(side: str, checkout: str, module: str, ids_file: str, out: str,
             timeout: int, module_timeout: int) -> float:
    tests = os.path.join(checkout, "tests")
    xml = os.path.join(out, f"{module}-{side}.xml")
    results = os.path.join(out, f"{module}-{side}.jsonl")
    cmd = [*_pytest_cmd(side, checkout), *COMMON, f"--junitxml={xml}", f"{module}.py"]
    print("$", "(cd", tests, "&&", " ".join(cmd), ")", flush=True)
    t0 = time.time()
    with open(os.path.join(out, f"{module}-{side}.log"), "w") as log:
        try:
            subprocess.run(cmd, cwd=tests, env=_env(side, ids_file, results, timeout),
                           stdout=log, stderr=subprocess.STDOUT, timeout=module_timeout)
        except subprocess.TimeoutExpired:
            print(f"  {side}: module timed out after {module_timeout} s", flush=True)
    return time.time() - t0


def load(path: str) -> tuple[dict, list]:
    res, errors = {}, []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if "collect_error" in rec:
                    errors.append(rec)
                else:
                    res[rec["id"]] = rec
    return res, errors


def _cause(rec: dict | None, collect_errors: list) -> str:
    if rec is None:
        if collect_errors:
            return f"not collected: {collect_errors[0].get('message', '')[:140]}"
        return "not run (not collected on kiln, or the module run was cut off)"
    msg = rec.get("message", "")
    if rec["outcome"] == "skipped":
        return f"skipped: {msg[:140]}"
    msg = re.sub(r"0x[0-9a-f]+", "0x…", msg)
    return f"{rec.get('exc', '?')}: {msg[:140]}"


def report(module: str, ids: list[str], out: str) -> dict:
    jax, _ = load(os.path.join(out, f"{module}-jax.jsonl"))
    kiln, kerr = load(os.path.join(out, f"{module}-kiln.jsonl"))
    jp = [t for t in ids if jax.get(t, {}).get("outcome") == "passed"]
    kp = [t for t in ids if kiln.get(t, {}).get("outcome") == "passed"]
    both = [t for t in jp if kiln.get(t, {}).get("outcome") == "passed"]
    harness_skip = [t for t in jp if kiln.get(t, {}).get("outcome") == "skipped"
                    and "jax_suite:" in kiln[t].get("message", "")]
    causes = collections.defaultdict(list)
    for t in jp:
        rec = kiln.get(t)
        if rec is None or rec["outcome"] != "passed":
            causes[_cause(rec, kerr)].append(t)
    return {"module": module, "selected": len(ids), "jax_passed": len(jp),
            "kiln_passed": len(kp), "both": len(both), "harness_skipped": len(harness_skip),
            "causes": {c: ts for c, ts in sorted(causes.items(), key=lambda kv: -len(kv[1]))}}


def print_report(rows: list[dict], verbose: bool) -> None:
    print("\n| module | selected | JAX passed | kiln passed | kiln passed of JAX's | % | "
          "skipped by harness (counters) |")
    print("|---|---|---|---|---|---|---|")
    tj = tb = 0
    for r in rows:
        pct = 100 * r["both"] / r["jax_passed"] if r["jax_passed"] else float("nan")
        print(f"| {r['module']} | {r['selected']} | {r['jax_passed']} | {r['kiln_passed']} | "
              f"{r['both']} | {pct:.0f}% | {r['harness_skipped']} |")
        tj += r["jax_passed"]
        tb += r["both"]
    if rows:
        print(f"| **total** | | {tj} | | {tb} | {100 * tb / max(tj, 1):.0f}% | |")
    for r in rows:
        if not r["causes"]:
            continue
        print(f"\n## {r['module']}: {r['jax_passed'] - r['both']} of JAX's passes not "
              "passing on kiln")
        for cause, ts in r["causes"].items():
            print(f"  [{len(ts)}] {cause}")
            if verbose:
                for t in ts:
                    print(f"        {t}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("modules", nargs="+", help="test modules (e.g. api_test)")
    p.add_argument("--checkout", required=True, help="JAX source checkout (with tests/)")
    p.add_argument("--out", default="/tmp/jax_suite")
    p.add_argument("--max-tests", type=int, default=0,
                   help="keep every k-th collected id so at most this many run (0: all)")
    p.add_argument("--timeout", type=int, default=60, help="per-test timeout, seconds")
    p.add_argument("--module-timeout", type=int, default=3600)
    p.add_argument("--only", choices=("jax", "kiln"))
    p.add_argument("--report", action="store_true", help="only re-read the results")
    p.add_argument("-v", "--verbose", action="store_true", help="list every failing id")
    a = p.parse_args()
    checkout = os.path.abspath(a.checkout)
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for module in a.modules:
        module = module.removesuffix(".py")
        ids_file = os.path.join(a.out, f"{module}-ids.txt")
        if a.report or (a.only == "kiln" and os.path.exists(ids_file)):
            with open(ids_file) as f:
                ids = [ln.strip() for ln in f if ln.strip()]
        else:
            all_ids = collect(checkout, module, a.out)
            ids = sample(all_ids, a.max_tests)
            with open(ids_file, "w") as f:
                f.write("\n".join(ids) + "\n")
            print(f"{module}: {len(all_ids)} collected on JAX, {len(ids)} selected",
                  flush=True)
        if not a.report:
            for side in ("jax", "kiln"):
                if a.only in (None, side):
                    dt = run_side(side, checkout, module, ids_file, a.out, a.timeout,
                                  a.module_timeout)
                    print(f"  {side}: {dt:.0f} s", flush=True)
        rows.append(report(module, ids, a.out))
    print_report(rows, a.verbose)


if __name__ == "__main__":
    main()
