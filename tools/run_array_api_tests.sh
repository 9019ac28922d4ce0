#!/usr/bin/env bash
# Run the Python array API standard's test suite (data-apis/array-api-tests) against an
# array namespace, e.g. kiln.numpy or jax.numpy, and write a summary.
#
# usage: tools/run_array_api_tests.sh MODULE [PYTEST_ARGS...]
#
#   MODULE         the namespace to test: kiln.numpy, jax.numpy, ...
#   PYTEST_ARGS    passed to pytest after the defaults, e.g. a selection of test files
#                  (array_api_tests/test_linalg.py; without one, the whole suite) or -k
#                  expressions
#
# environment:
#   AAT_SOURCE     where to get the suite: a local git dir or a git URL
#                  (default https://github.com/data-apis/array-api-tests)
#   AAT_REF        commit/branch of the suite to check out (default: its default branch)
#   AAT_SPEC       where to get the spec (the suite's array-api submodule) when
#                  `git submodule update` cannot: a local git dir or a git URL
#   AAT_DIR        scratch dir for the checkout (default /tmp/array-api-tests)
#   AAT_OUT        dir for the report and summary (default $AAT_DIR/out)
#   MAX_EXAMPLES   hypothesis examples per test (default 20)
#   AAT_NO_INSTALL set to 1 to skip `pip install` of the suite's dependencies
#
# The run uses --derandomize and --disable-deadline, so two modules see the same examples
# and a slow first call (JIT compilation) is not a failure. Output:
#   $AAT_OUT/<MODULE>.json  (pytest-json-report), $AAT_OUT/<MODULE>.txt (pytest output),
#   $AAT_OUT/<MODULE>.summary.txt (counts per file and the failing test ids).
set -euo pipefail

if [[ $# -lt 1 ]]; then
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
MODULE=$1
shift

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AAT_SOURCE=${AAT_SOURCE:-https://github.com/data-apis/array-api-tests}
AAT_DIR=${AAT_DIR:-/tmp/array-api-tests}
AAT_OUT=${AAT_OUT:-$AAT_DIR/out}
MAX_EXAMPLES=${MAX_EXAMPLES:-20}
PYTHON=${PYTHON:-python}

# -- set up the suite -------------------------------------------------------------------
if [[ ! -d $AAT_DIR/array_api_tests ]]; then
    rm -rf "$AAT_DIR"
    git clone -q "$AAT_SOURCE" "$AAT_DIR"
fi
if [[ -n ${AAT_REF:-} ]]; then
    git -C "$AAT_DIR" checkout -q "$AAT_REF"
fi
if [[ ! -f $AAT_DIR/array-api/LICENSE ]]; then
    spec_commit=$(git -C "$AAT_DIR" ls-tree HEAD array-api | awk '{print $3}')
    if ! git -C "$AAT_DIR" submodule update --init -q array-api 2>/dev/null; then
        if [[ -z ${AAT_SPEC:-} ]]; then
            echo "cannot fetch the array-api submodule; set AAT_SPEC to a copy of" \
                 "data-apis/array-api (needs commit $spec_commit)" >&2
            exit 1
        fi
        rm -rf "$AAT_DIR/array-api"
        git clone -q "$AAT_SPEC" "$AAT_DIR/array-api"
        git -C "$AAT_DIR/array-api" checkout -q "$spec_commit"
    fi
fi
if [[ ${AAT_NO_INSTALL:-0} != 1 ]]; then
    "$PYTHON" -m pip install -q -r "$AAT_DIR/requirements.txt"
fi

# -- run it -----------------------------------------------------------------------------
mkdir -p "$AAT_OUT"
cd "$AAT_DIR"
target=array_api_tests
for arg in "$@"; do
    if [[ $arg == array_api_tests/* ]]; then target=; fi
done
set +e
ARRAY_API_TESTS_MODULE=$MODULE JAX_PLATFORMS=${JAX_PLATFORMS:-cpu} \
PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" \
"$PYTHON" -m pytest $target -p no:cacheprovider -q -rN \
    --max-examples="$MAX_EXAMPLES" --derandomize --disable-deadline \
    --json-report --json-report-file="$AAT_OUT/$MODULE.json" \
    --json-report-omit=log,streams,warnings,collectors \
    "$@" > "$AAT_OUT/$MODULE.txt" 2>&1
rc=$?
set -e

# -- summarize --------------------------------------------------------------------------
"$PYTHON" - "$AAT_OUT/$MODULE.json" "$MODULE" > "$AAT_OUT/$MODULE.summary.txt" <<'EOF'
import collections
import json
import sys

report = json.load(open(sys.argv[1]))
per_file = collections.defaultdict(collections.Counter)
failed = []
for t in report["tests"]:
    path = t["nodeid"].split("::")[0].replace("array_api_tests/", "")
    per_file[path][t["outcome"]] += 1
    if t["outcome"] in ("failed", "error"):
        msg = (t.get("call") or t.get("setup") or {}).get("crash", {}).get("message", "")
        failed.append((t["nodeid"], msg.splitlines()[0][:160] if msg else ""))
total = collections.Counter()
print(f"module: {sys.argv[2]}   duration: {report['duration']:.0f}s")
print(f"{'file':48} {'passed':>7} {'failed':>7} {'skipped':>8}")
for path in sorted(per_file):
    c = per_file[path]
    total.update(c)
    print(f"{path:48} {c['passed']:7} {c['failed'] + c['error']:7} {c['skipped']:8}")
print(f"{'TOTAL':48} {total['passed']:7} {total['failed'] + total['error']:7} "
      f"{total['skipped']:8}")
print("\nfailing tests:")
for nodeid, msg in failed:
    print(f"  {nodeid}  ::  {msg}")
EOF
cat "$AAT_OUT/$MODULE.summary.txt" | sed -n '1,/^$/p'
echo "summary: $AAT_OUT/$MODULE.summary.txt (pytest exit status $rc)"
