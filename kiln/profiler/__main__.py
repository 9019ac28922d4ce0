"""``python -m kiln.profiler LOG [--top N]``: print the summary of a trace (see
:func:`kiln.profiler.summary`)."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and print the summary of the trace it names; returns the exit code."""
    from kiln.profiler._summary import summary
    parser = argparse.ArgumentParser(
        prog="python -m kiln.profiler",
        description="Top kernels, ops and host spans of a trace written by "
                    "kiln.profiler.trace(LOG).")
    parser.add_argument("log", help="the trace's log_dir, a run directory or an .xplane.pb")
    parser.add_argument("--top", type=int, default=20, help="rows per table (default 20)")
    args = parser.parse_args(argv)
    try:
        print(summary(args.log, top=args.top))
    except FileNotFoundError as e:
        print(f"kiln.profiler: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
