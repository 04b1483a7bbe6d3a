"""The package's modules import each other in one direction only: no import cycle.

Every ``.py`` module of ``src/bertembed`` is parsed with :mod:`ast`. Every
import statement counts, wherever it is: at module level, inside a function
or method (a "lazy" import), under ``if TYPE_CHECKING:`` or in a ``try``.
Relative imports are resolved against the importing module's package. An
import of ``pkg.mod`` is an edge to ``pkg.mod``; ``from pkg import name`` is
an edge to ``pkg.name`` when that is a module, else to ``pkg`` (its
``__init__``). The implicit import of a parent package when a submodule is
loaded is not an edge: a package ``__init__`` that re-exports a name from one
of its submodules is an import downwards, not a cycle.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable
from pathlib import Path

import pytest
from helpers.paths import ROOT

PACKAGE = "bertembed"
# The package as imported: the source tree in a checkout, site-packages for a wheel.
SRC = Path(importlib.util.find_spec(PACKAGE).origin).resolve().parent


def module_names(root: Path = SRC, package: str = PACKAGE) -> dict[str, Path]:
    """``{dotted module name: file}`` for every module of the package.

    Python files, and Cython extensions (``.pyx``): those are known as import
    targets but not parsed (a compiled module imports no Python module of the
    package here).
    """
    names = {}
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.pyx")]):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        names[".".join([package, *parts])] = path
    return names


def _package_of(module: str, path: Path) -> str:
    """The package a module's relative imports are resolved against."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve_from(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = _package_of(module, path).split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str, path: Path, known: Iterable[str]) -> set[str]:
    """The package-internal modules that ``module`` imports, anywhere in its file."""
    known = set(known)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()

    def add(target: str) -> None:
        # ``import a.b.c`` of an unknown leaf: the deepest known module.
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != module:
            found.add(target)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(module, path, node)
            if not (base == PACKAGE or base.startswith(PACKAGE + ".")):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in known else base)
    return found


def import_graph() -> dict[str, set[str]]:
    """``{module: modules it imports}``."""
    names = module_names()
    return {m: imports_of(m, p, names) if p.suffix == ".py" else set() for m, p in names.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (iterative DFS)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        colour[start] = GREY
        while stack:
            node, children = stack[-1]
            for child in children:
                if colour.get(child, BLACK) == GREY:
                    return [*path[path.index(child) :], child]
                if colour.get(child) == WHITE:
                    colour[child] = GREY
                    path.append(child)
                    stack.append((child, iter(sorted(graph[child]))))
                    break
            else:
                colour[node] = BLACK
                path.pop()
                stack.pop()
    return None


def format_graph(graph: dict[str, set[str]]) -> str:
    """The graph as text, one ``module -> imports`` line per module."""
    short = {m: m.removeprefix(PACKAGE + ".") if m != PACKAGE else m for m in graph}
    lines = []
    for m in sorted(graph):
        targets = ", ".join(sorted(short.get(t, t) for t in graph[m])) or "-"
        lines.append(f"{short[m]} -> {targets}")
    return "\n".join(lines)


def test_every_module_is_parsed() -> None:
    names = module_names()
    for expected in (
        "bertembed",
        "bertembed._core.embed",
        "bertembed._core._kernel",
        "bertembed._cli.parser",
        "bertembed._bench",
        "bertembed._bench.runner",
        "bertembed.__main__",
    ):
        assert expected in names


#: What each folder of the package may import besides itself (each folder's
#: ``__init__`` says the same in words): a folder, or one module of it. The
#: kernel's folder nothing but the version, checkpoints only the kernel's
#: folder, the ONNX splitter only the safetensors writer; the public modules,
#: the CLI and the harness sit on top.
MAY_IMPORT = {
    "bertembed._core": {"bertembed._version"},
    "bertembed._checkpoints": {"bertembed._core", "bertembed._version"},
    "bertembed._onnx": {"bertembed._checkpoints.safetensors_writer"},
    "bertembed._inputs": set(),
    "bertembed._function": {"bertembed._core"},
    "bertembed._layer": {"bertembed._core", "bertembed._checkpoints", "bertembed._inputs"},
}


def _folder(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_folders_import_only_what_they_may() -> None:
    graph = import_graph()
    wrong = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if _folder(m) in MAY_IMPORT
        for t in targets
        if _folder(t) != _folder(m) and not {_folder(t), t} & MAY_IMPORT[_folder(m)]
    )
    assert not wrong, "imports across the layout's rules:\n" + "\n".join(wrong)


def test_no_import_cycle() -> None:
    graph = import_graph()
    print(format_graph(graph))
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_only_the_layer_and_the_kernel_folder_read_a_layers_tables() -> None:
    # Everything else reads them through bertembed._layer.stored_tables (and saves through save_layer).
    owners = {"bertembed._layer"}
    wrong = []
    for module, path in module_names().items():
        if path.suffix != ".py" or module in owners or _folder(module) == "bertembed._core":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        wrong += [
            f"{module}:{node.lineno} .{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in ("_tables", "_save", "_init", "_of_tables")
        ]
    assert not wrong, "a layer's private attributes read outside _core and _layer:\n" + "\n".join(wrong)


# --------------------------------------------------------------------------- the checker itself


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE
    _write(
        root,
        {
            "__init__.py": "from .a import f\n",
            "a.py": "from . import b\ndef f():\n    pass\n",
            "b.py": "import os\n",
            "sub/__init__.py": "",
            "sub/c.py": "def g():\n    from ..a import f\n    from .d import h\n",
            "sub/d.py": "from bertembed.sub import c\nh = 1\n",
        },
    )
    names = module_names(root)
    graph = {m: imports_of(m, p, names) for m, p in names.items()}
    assert graph["bertembed"] == {"bertembed.a"}
    assert graph["bertembed.a"] == {"bertembed.b"}
    assert graph["bertembed.b"] == set()
    assert graph["bertembed.sub.c"] == {"bertembed.a", "bertembed.sub.d"}
    assert graph["bertembed.sub.d"] == {"bertembed.sub.c"}
    cycle = find_cycle(graph)
    assert cycle is not None
    assert cycle[0] == cycle[-1] and set(cycle) == {"bertembed.sub.c", "bertembed.sub.d"}


def test_checker_finds_no_cycle_in_a_tree() -> None:
    graph = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    assert find_cycle(graph) is None
    assert find_cycle({**graph, "c": {"a"}}) in (["a", "b", "c", "a"], ["a", "c", "a"])


def test_the_installed_package_holds_every_source_module() -> None:
    # The suite runs against an installed wheel (the README's test command):
    # a subpackage or module the packaging leaves out is missing here, not
    # only at some user's first import.
    source = ROOT / "src" / PACKAGE
    if not source.is_dir():
        pytest.skip("no source tree beside the tests")
    missing = sorted(set(module_names(source)) - set(module_names()))
    assert not missing, f"in src/ but not in the imported package: {missing}"
