"""The Python SDK's module structure, read from its source with ast (nothing is imported and
no sandbox is needed).

* No import cycle inside the package: an import counts wherever it is written, at module
  level, inside a function (a lazy import only postpones the cycle to the first call) or
  under ``if TYPE_CHECKING:`` (a type checker follows it, and it is the same dependency).
* The threaded SDK and the asyncio one have the same module boundaries: each module of one
  side has its twin on the other (TWINS), the twins import each other's twins, and every
  public class ``X`` of a threaded module is ``AsyncX`` in its twin. Modules both sides use
  (SHARED) sit below all of them.
"""
import ast
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Set

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO / "sdk" / "python" / "sbx"
PACKAGE = "sbx"
INIT = "__init__"

#: Each threaded module and its asyncio twin: a reader finds the same piece in the
#: same-named place on both sides.
TWINS = {
    "_client": "_async_client",
    "processes": "async_processes",
    "commands": "async_commands",
    "files": "async_files",
    "sandbox": "async_sandbox",
    "code": "async_code",
}

#: Private helpers both sides build on; they import no module of TWINS.
SHARED = {"_protocol", "_results", "_ops", "_callbacks", "_code"}


class Edge(NamedTuple):
    source: str
    target: str
    line: int
    where: str  # "module level", "in Commands.run", "under TYPE_CHECKING", ...

    def describe(self) -> str:
        return f"{self.source} -> {self.target} ({self.source}.py:{self.line}, {self.where})"


def modules() -> Dict[str, Path]:
    """The package's modules by name (``__init__`` for the package itself)."""
    return {p.stem: p for p in sorted(PACKAGE_DIR.glob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _ImportFinder(ast.NodeVisitor):
    """Every import statement of a module, with where it is written."""

    def __init__(self, name: str, known: Set[str]) -> None:
        self.name = name
        self.known = known
        self.scopes: List[str] = []
        self.type_checking = 0
        self.edges: List[Edge] = []

    def _where(self) -> str:
        parts = []
        if self.scopes:
            parts.append("in " + ".".join(self.scopes))
        if self.type_checking:
            parts.append("under TYPE_CHECKING")
        return ", ".join(parts) or "module level"

    def _add(self, target: str, node: ast.stmt) -> None:
        self.edges.append(Edge(self.name, target, node.lineno, self._where()))

    def _scoped(self, node: ast.AST, name: str) -> None:
        self.scopes.append(name)
        self.generic_visit(node)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.type_checking += 1
        for stmt in node.body:
            self.visit(stmt)
        self.type_checking -= 1
        for stmt in node.orelse:
            self.visit(stmt)

    def _submodule(self, dotted: str) -> Optional[str]:
        """The package's module that ``dotted`` (below the package) names; the package's
        own ``__init__`` for the empty name; None outside the package."""
        if not dotted:
            return INIT
        first = dotted.split(".")[0]
        return first if first in self.known else None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == PACKAGE:
                self._add(INIT, node)
            elif alias.name.startswith(PACKAGE + "."):
                target = self._submodule(alias.name[len(PACKAGE) + 1:])
                if target is not None:
                    self._add(target, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 1:
            base: Optional[str] = module
        elif node.level == 0 and (module == PACKAGE or module.startswith(PACKAGE + ".")):
            base = module[len(PACKAGE) + 1:]
        else:
            return  # the standard library (the package has no subpackages to climb out of)
        target = self._submodule(base)
        if target is None:
            return
        if target != INIT:
            self._add(target, node)
            return
        # ``from . import x``: a module of the package, or a name of its __init__.
        for alias in node.names:
            self._add(alias.name if alias.name in self.known else INIT, node)


def import_edges() -> List[Edge]:
    """Every import of one of the package's modules by another, wherever it is written."""
    found = modules()
    edges: List[Edge] = []
    for name, path in found.items():
        finder = _ImportFinder(name, set(found))
        finder.visit(ast.parse(path.read_text(), str(path)))
        edges.extend(e for e in finder.edges if e.target != name)
    return edges


def graph(edges: List[Edge]) -> Dict[str, Set[str]]:
    out: Dict[str, Set[str]] = {name: set() for name in modules()}
    for e in edges:
        out[e.source].add(e.target)
    return out


def find_cycles(g: Dict[str, Set[str]]) -> List[List[str]]:
    """One cycle (its modules in import order, the first repeated at the end) per strongly
    connected part of ``g`` that has one."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    parts: List[List[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            parts.append(part)

    for v in sorted(g):
        if v not in index:
            connect(v)

    cycles = []
    for part in parts:
        members = set(part)
        start = min(part)
        if len(part) == 1 and start not in g[start]:
            continue
        # Shortest way back to start inside the part (breadth first).
        came_from: Dict[str, str] = {}
        frontier = [start]
        while start not in came_from:
            nxt = []
            for v in frontier:
                for w in sorted(g[v] & members):
                    if w not in came_from:
                        came_from[w] = v
                        nxt.append(w)
            frontier = nxt
        path = [start]
        v = came_from[start]
        while v != start:
            path.append(v)
            v = came_from[v]
        path.append(start)
        path.reverse()
        cycles.append(path)
    return cycles


def test_find_cycles_names_a_cycle():
    """The checker itself: it finds a cycle it is shown, and none where there is none."""
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    assert find_cycles({"a": {"a"}}) == [["a", "a"]]
    assert find_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b", "a"], ["c", "d", "c"]]


def test_edges_count_lazy_and_type_checking_imports(tmp_path):
    """The checker itself: imports inside functions and under TYPE_CHECKING are edges."""
    source = ("from typing import TYPE_CHECKING\n"
              "from . import _ops as ops\n"
              "if TYPE_CHECKING:\n"
              "    from .processes import ProcessHandle\n"
              "def run():\n"
              "    from sbx.files import Files\n")
    finder = _ImportFinder("commands", {"commands", "processes", "files", "_ops"})
    finder.visit(ast.parse(source))
    assert [(e.target, e.line, e.where) for e in finder.edges] == [
        ("_ops", 2, "module level"), ("processes", 4, "under TYPE_CHECKING"), ("files", 6, "in run")]


def test_sdk_has_no_import_cycle():
    edges = import_edges()
    cycles = find_cycles(graph(edges))
    lines = []
    for cycle in cycles:
        lines.append("import cycle: " + " -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            lines.extend("    " + e.describe() for e in edges if e.source == a and e.target == b)
    assert not cycles, "\n".join(lines)


def test_every_sdk_module_is_a_twin_or_shared():
    """A new module must be placed: a twin (with its counterpart) or a shared helper."""
    found = set(modules()) - {INIT}
    expected = SHARED | set(TWINS) | set(TWINS.values())
    assert found == expected, (f"modules not in TWINS or SHARED: {sorted(found - expected)}; "
                               f"named there but missing: {sorted(expected - found)}")


def test_shared_helpers_import_no_twin():
    g = graph(import_edges())
    twins = set(TWINS) | set(TWINS.values())
    wrong = {m: sorted(g[m] & (twins | {INIT})) for m in sorted(SHARED) if m in g and g[m] & (twins | {INIT})}
    assert not wrong, f"shared helpers importing feature modules: {wrong}"


def test_async_twins_import_as_the_threaded_modules_do():
    """sync A imports sync B exactly when async A imports async B."""
    g = graph(import_edges())
    differ = []
    for sync, async_ in TWINS.items():
        if sync not in g or async_ not in g:
            differ.append(f"{sync} / {async_}: missing")
            continue
        mirrored = {TWINS[t] for t in g[sync] if t in TWINS}
        actual = {t for t in g[async_] if t in TWINS.values()}
        if mirrored != actual:
            differ.append(f"{sync} imports {sorted(t for t in g[sync] if t in TWINS)}, "
                          f"{async_} imports {sorted(actual)}")
    assert not differ, "\n".join(differ)


def _public_classes(path: Path) -> Set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")}


def test_async_twins_define_the_threaded_classes():
    """Class X of a threaded module is AsyncX of its twin, and the twin has no other."""
    found = modules()
    differ = []
    for sync, async_ in TWINS.items():
        if sync not in found or async_ not in found:
            differ.append(f"{sync} / {async_}: missing")
            continue
        expected = {"Async" + name for name in _public_classes(found[sync])}
        actual = _public_classes(found[async_])
        if expected != actual:
            differ.append(f"{async_}: lacks {sorted(expected - actual)}, "
                          f"has beyond {sync}'s {sorted(actual - expected)}")
    assert not differ, "\n".join(differ)
