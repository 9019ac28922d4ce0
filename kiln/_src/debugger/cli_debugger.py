"""``jax._src.debugger.cli_debugger``: the ``jdb`` prompt (:class:`kiln._debugger.CliDebugger`);
``run_debugger`` is the ``"cli"`` backend."""
from kiln._debugger import CliDebugger  # noqa: F401
from kiln._debugger import run_cli_debugger as run_debugger  # noqa: F401
