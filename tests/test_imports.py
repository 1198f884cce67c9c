"""suite/'s import graph: no cycles, and only the layers above the experiments import them.

The graph holds every import statement of suite/, at module level or inside a function (parsed
with ast, nothing is imported): a function-level import is a dependency all the same, deferred
only to save start-up time or to reach an optional package, so a cycle through one is still two
modules that cannot be understood (or moved) apart. Imports under `if TYPE_CHECKING:` never run
and are left out. `from P import name` is an edge to the module P.name where that is a module of
suite/, else to P.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suite"

# Cycles that another change removes; each names its modules. Nothing else may join them.
KNOWN_CYCLES: list[set[str]] = []  # none: a cycle found is a failure
# Who may import suite.experiments: the experiments themselves, the report drawing them, the
# pipeline that runs them and the CLI.
EXPERIMENT_USERS = ("suite.experiments", "suite.report", "suite.reproduce", "suite.__main__")
# The library under the experiments (what the trainer CLI and the experiments build on) and the
# layers above it, which the library never imports: a claim's metrics live with its experiment.
LIBRARY = ("suite.train", "suite.balance", "suite.model", "suite.ops", "suite.cuda", "suite.data")
ABOVE_THE_LIBRARY = (
    "suite.experiments",
    "suite.derived",
    "suite.claims",
    "suite.report",
    "suite.reproduce",
    "suite.__main__",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SUITE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node outside `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(name: str, path: Path, node, modules) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in modules}
    base = node.module or ""
    if node.level:  # relative: from the package holding this module
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        anchor = package[: len(package) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    out = set()
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.add(sub if sub in modules else base)
    return {t for t in out if t in modules}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        edges = set()
        for node in _imports(tree):
            edges |= _targets(name, path, node, modules)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    scc = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        scc.add(w)
                        if w == v:
                            break
                    if len(scc) > 1:
                        out.append(scc)
    return out


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "suite.ops.fused_adaln.op" in graph and "suite.experiments.kernels.bench" in graph
    assert "suite.ops.fused_adaln.args" in graph["suite.ops.fused_adaln.op"]
    assert "suite.ops.fused_adaln.cuda" in graph["suite.ops.fused_adaln.op"]  # function-level


def test_cycle_finder_finds_a_planted_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [{"a", "b", "c"}]


def test_suite_has_no_import_cycles():
    found = cycles(import_graph())
    unexpected = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not unexpected, f"import cycles in suite/: {unexpected}"


def test_only_the_layers_above_import_the_experiments():
    graph = import_graph()
    offenders = {
        m: sorted(t for t in targets if t.startswith("suite.experiments"))
        for m, targets in graph.items()
        if not m.startswith(EXPERIMENT_USERS)
    }
    offenders = {m: t for m, t in offenders.items() if t}
    assert not offenders, f"library modules importing suite.experiments: {offenders}"


def test_the_library_never_imports_the_layers_above_it():
    graph = import_graph()
    assert any(m.startswith("suite.experiments.training.") for m in graph)  # the metrics moved
    offenders = {
        m: sorted(t for t in targets if t.startswith(ABOVE_THE_LIBRARY))
        for m, targets in graph.items()
        if m.startswith(LIBRARY)
    }
    offenders = {m: t for m, t in offenders.items() if t}
    assert not offenders, f"library modules importing the layers above them: {offenders}"


def test_suite_never_imports_the_lab():
    offenders = set()
    for name, path in _modules().items():
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                mods = [] if node.level else [node.module or ""]
            if any(m == "lab" or m.startswith("lab.") for m in mods):
                offenders.add(name)
    assert not offenders, f"suite/ modules importing lab/: {sorted(offenders)}"


def test_no_package_attribute_shadows_its_submodule():
    """`suite.ops.adaln` is the function: no module may be named adaln beside it (a function of
    a package's __init__ hides the submodule of the same name from attribute access)."""
    modules = _modules()
    shadowed = []
    for name, path in modules.items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        bound = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    bound[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                bound[node.name] = None
        for attr, origin in bound.items():
            sub = f"{name}.{attr}"
            if sub in modules and origin != sub:
                shadowed.append(sub)
    assert not shadowed, f"package attributes hiding a submodule of the same name: {shadowed}"
