"""Imports only point down (docs/architecture.md, "Layer order").

Every module of the ``kiln`` package is parsed with ``ast``, function bodies included (a
function-local import is an import), relative imports resolved. The low layers
(``kiln/core/``, ``kiln/interpreters/``, ``kiln/compiler/``, ``kiln/array.py``,
``kiln/sharding.py``) must not import the high modules (``kiln.api`` and the modules it
gathers (``kiln.transformations``, ``kiln.jitting``, ...), ``kiln.numpy``,
``kiln.parallel``, ``kiln.random``, ``kiln.backends``, ``kiln.custom_derivatives``): a
high layer that a low one needs installs a hook when it is imported. No import cycle may
pass through a low module and a high one; and no import cycle at all may hold a low module
(a function-local import or ``importlib.import_module("kiln.x")`` is an edge too).
"""
from __future__ import annotations

import ast
import collections
import pathlib

import kiln

PKG = pathlib.Path(kiln.__file__).resolve().parent
LOW = ("kiln.core", "kiln.interpreters", "kiln.compiler", "kiln.array", "kiln.sharding")
# ``kiln.api`` gathers the public transformations from the modules named by subject.
API = ("kiln.api", "kiln.transformations", "kiln.jitting", "kiln.stages", "kiln.shape_eval",
       "kiln.transfer", "kiln.scopes")
HIGH = (*API, "kiln.numpy", "kiln.parallel", "kiln.random", "kiln.backends",
        "kiln.custom_derivatives")


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _modules() -> dict[str, pathlib.Path]:
    """Dotted name -> file of every module of the package."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_checking_only(tree) -> set:
    """The nodes inside ``if TYPE_CHECKING:`` blocks (imports for annotations only: they
    never run)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                or isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"):
            for stmt in node.body:
                out.update(map(id, ast.walk(stmt)))
    return out


def _imports(name: str, path: pathlib.Path, runtime_only: bool = False):
    """``(lineno, imported names, modules depended on)`` of every import statement in the
    module (anywhere: module level, functions, classes). ``from a import b`` names ``a``
    and ``a.b`` and depends on module ``a.b`` when there is one, else on ``a`` (a parent
    package's ``__init__`` is not an edge of its own); a relative import is resolved
    against the module's package. ``runtime_only``: without the imports under ``if
    TYPE_CHECKING:``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
            yield node.lineno, names, names
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names]
            yield node.lineno, [mod, *subs], [n if n in MODULES else mod for n in subs]
        elif _is_import_module_call(node):
            yield node.lineno, [node.args[0].value], [node.args[0].value]


def _is_import_module_call(node) -> bool:
    """``importlib.import_module("kiln.x")`` (or ``import_module(...)``) with a literal
    module name: an import the ``import`` statements do not show."""
    if not (isinstance(node, ast.Call) and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return False
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == "import_module"
            or isinstance(f, ast.Name) and f.id == "import_module")


def _module_of(name: str) -> str | None:
    """The kiln module an imported name refers to (its longest module prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _graph() -> dict[str, dict[str, int]]:
    """module -> {imported kiln module: first line importing it} (imports that run: those
    under ``if TYPE_CHECKING:`` are left out)."""
    graph: dict[str, dict[str, int]] = {m: {} for m in MODULES}
    for m, path in MODULES.items():
        for line, _, deps in _imports(m, path, runtime_only=True):
            for n in deps:
                target = _module_of(n) if n.startswith("kiln") else None
                if target is not None and target != m:
                    graph[m].setdefault(target, line)
    return graph


def _where(graph, a: str, b: str) -> str:
    return f"{MODULES[a].relative_to(PKG.parent)}:{graph[a][b]}"


def test_low_layers_do_not_import_high_ones():
    bad = []
    for m, path in MODULES.items():
        if not _within(m, LOW):
            continue
        for line, names, _ in _imports(m, path):
            hits = [n for n in names if _within(n, HIGH)]
            if hits:
                bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {hits[0]}")
    assert not bad, ("low layers import high ones (install a hook in the low layer and "
                     "register it from the high one instead):\n  " + "\n  ".join(sorted(bad)))


def _strongly_connected(graph) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)
    return out


def _path(graph, src: str, dst: str, allowed: set) -> list[str]:
    prev = {src: None}
    queue = collections.deque([src])
    while queue:
        v = queue.popleft()
        for w in graph[v]:
            if w in allowed and w not in prev:
                prev[w] = v
                if w == dst:
                    out = [w]
                    while prev[out[-1]] is not None:
                        out.append(prev[out[-1]])
                    return out[::-1]
                queue.append(w)
    return []


def test_no_import_cycle_through_low_and_high_modules():
    graph = _graph()
    cycles = []
    for comp in _strongly_connected(graph):
        lows = sorted(m for m in comp if _within(m, LOW))
        highs = sorted(m for m in comp if _within(m, HIGH))
        if lows and highs:
            members = set(comp)
            cycle = (_path(graph, lows[0], highs[0], members)
                     + _path(graph, highs[0], lows[0], members)[1:])
            steps = [f"{a} -> {b} ({_where(graph, a, b)})" for a, b in zip(cycle, cycle[1:])]
            cycles.append("\n    ".join(steps))
    assert not cycles, "import cycles through low and high modules:\n    " + \
        "\n  and\n    ".join(cycles)


def test_no_import_cycle_through_low_modules():
    """No strongly connected group of the package's import graph (function-local imports
    and literal ``importlib.import_module`` calls included) holds a module of ``core/``,
    ``interpreters/``, ``compiler/``, ``array.py`` or ``sharding.py``: a low module needed
    by a higher one is imported by it, never the other way round, even lazily."""
    graph = _graph()
    bad = []
    for comp in _strongly_connected(graph):
        members = set(comp)
        if len(comp) < 2 or not any(_within(m, LOW) for m in comp):
            continue
        edges = sorted(f"{a} -> {b} ({_where(graph, a, b)})"
                       for a in comp for b in graph[a] if b in members)
        bad.append(f"{len(comp)} modules, {len(edges)} edges:\n    " + "\n    ".join(edges))
    assert not bad, ("import cycles through the low layers (the low module owns a hook "
                     "that the higher one installs, or the helper moves down):\n  "
                     + "\n  ".join(bad))


def test_the_checks_see_function_local_and_relative_imports(tmp_path):
    """The parser finds an import inside a function body and resolves a relative one."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from ..api import jit\n    import kiln.numpy\n"
                   "    return importlib.import_module('kiln.random')\n"
                   "if TYPE_CHECKING:\n    from kiln.sharding import Mesh\n")
    found = list(_imports("kiln.core.m", src))
    runtime = [(2, ["kiln.api", "kiln.api.jit"], ["kiln.api"]),
               (3, ["kiln.numpy"], ["kiln.numpy"]),
               (4, ["kiln.random"], ["kiln.random"])]
    typing_only = (6, ["kiln.sharding", "kiln.sharding.Mesh"], ["kiln.sharding"])
    assert sorted(found) == sorted([*runtime, typing_only])
    assert sorted(_imports("kiln.core.m", src, runtime_only=True)) == runtime
    assert _module_of("kiln.lax.rng_bit_generator.set_threefry") == \
        "kiln.lax.rng_bit_generator"
    cyc = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert sorted(map(sorted, _strongly_connected(cyc))) == [["a", "b", "c"], ["d"]]
