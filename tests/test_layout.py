"""The package's layout (docs/architecture.md): no module imports one that imports it back, directly
or through others, and each layer imports only the layers it may; no module or class grows too long to
take in (over 500 and 250 lines).

Every import statement counts: top-level, inside functions and under ``if TYPE_CHECKING:``.
``from llm_fsm.x import y`` is an import of the module ``llm_fsm.x.y`` when there is one, else of
``llm_fsm.x``; importing a package is importing its ``__init__``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import llm_fsm

PACKAGE = Path(llm_fsm.__file__).parent
ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


# What each layer may import besides itself (the subpackages; every other module is the core).
MAY_IMPORT = {
    "core": set(),
    "store": {"core"},
    "authoring": {"core"},
    "testing": {"core", "authoring"},
    "server": {"core", "store", "authoring"},
    "cli": {"core", "store", "authoring", "testing", "server"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.AST, package: str) -> Iterator[tuple[str, str | None]]:
    """(module, name) for each import: ``import a.b`` gives ("a.b", None), ``from a import b`` ("a", "b")."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield from ((base, alias.name) for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """Each module of llm_fsm → the modules of llm_fsm it imports."""
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for base, name in imported_names(ast.parse(path.read_text(encoding="utf-8")), package):
            target = f"{base}.{name}" if f"{base}.{name}" in files else base
            if target in files and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in MAY_IMPORT else "core"


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module: the modules that import each other."""
    reach = {module: reachable(graph, module) for module in graph}
    components = {frozenset({m, *(n for n in reach[m] if m in reach[n])}) for m in graph}
    return sorted((set(c) for c in components if len(c) > 1), key=sorted)


def test_the_import_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "llm_fsm.cli.main" in graph["llm_fsm.cli.run"]  # top level
    assert "llm_fsm.store.stored" in graph["llm_fsm.cli.conversation_factory"]  # in a function and under TYPE_CHECKING
    assert "llm_fsm.logic" in graph["llm_fsm.engine"]  # from llm_fsm import logic: the module
    assert "llm_fsm.cli" not in graph["llm_fsm.cli.chat"]
    assert "llm_fsm.memory.spec" in graph["llm_fsm.definition"]  # a module of a core package
    assert "llm_fsm.memory" in graph["llm_fsm.prompt"]  # from llm_fsm import memory: the package's __init__


def test_the_core_packages_are_the_core():
    # memory/ is part of the core (definition and engine read its declarations; the turn writes it), not a layer
    assert layer("llm_fsm.memory.working") == layer("llm_fsm.refusals") == "core"


def test_the_cycle_finder_names_modules_that_import_each_other():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_no_module_imports_one_that_imports_it_back():
    found = cycles(import_graph())
    assert not found, "modules that import each other: " + "; ".join(" ↔ ".join(sorted(c)) for c in found)


def test_each_layer_imports_only_what_it_may():
    wrong = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in targets
        if layer(target) != layer(module) and layer(target) not in MAY_IMPORT[layer(module)]
    ]
    assert not wrong, "; ".join(sorted(wrong))


def module_map() -> set[str]:
    """The modules docs/architecture.md names in its module map (the code block under "## Modules"),
    as paths relative to llm_fsm/ (``store/base.py``)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = re.search(r"^## Modules\n.*?^```\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block, "docs/architecture.md has a module map: a code block under '## Modules'"
    # a path starts the line or follows a space, so "store/__init__.py" does not also name "__init__.py"
    return set(re.findall(r"(?<![\w/.])((?:\w+/)*\w+\.py)\b", block.group(1)))


def test_the_architecture_page_names_every_module_and_no_other():
    modules = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")}
    named = module_map()
    assert not modules - named, "docs/architecture.md's module map leaves out: " + ", ".join(sorted(modules - named))
    assert not named - modules, "docs/architecture.md's module map names modules that do not exist: " + ", ".join(
        sorted(named - modules)
    )


# A newcomer reads a module, or a class, whole: past these sizes it is split into modules of one concept each
# (see docs/architecture.md). The module is every line of its file; a class, from its "class" line to its last.
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 250


def oversized(name: str, text: str) -> list[str]:
    """What in the module ``name`` (its source ``text``) is over the limits, each with its size."""
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > MAX_CLASS_LINES:
                found.append(f"{name}: class {node.name}, {size} lines (at most {MAX_CLASS_LINES})")
    return found


def test_the_size_check_names_each_long_module_and_class_with_its_size():
    def klass(name: str, lines: int, indent: str = "") -> str:
        body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
        return f"{indent}class {name}:\n{body}"

    fits = klass("Fits", MAX_CLASS_LINES) + "y = 0\n" * (MAX_MODULE_LINES - MAX_CLASS_LINES)
    assert len(fits.splitlines()) == MAX_MODULE_LINES and oversized("fits.py", fits) == []
    nested = "def f():\n" + klass("Inner", MAX_CLASS_LINES + 1, indent="    ")  # classes in functions count too
    long = klass("Long", MAX_CLASS_LINES + 1) + nested + "y = 0\n" * 10
    assert oversized("llm_fsm/long.py", long) == [
        f"llm_fsm/long.py: {2 * MAX_CLASS_LINES + 13} lines (at most {MAX_MODULE_LINES})",
        f"llm_fsm/long.py: class Long, {MAX_CLASS_LINES + 1} lines (at most {MAX_CLASS_LINES})",
        f"llm_fsm/long.py: class Inner, {MAX_CLASS_LINES + 1} lines (at most {MAX_CLASS_LINES})",
    ]


def test_no_module_or_class_is_too_long_to_take_in():
    found = [
        problem
        for path in sorted(PACKAGE.rglob("*.py"))
        for problem in oversized(path.relative_to(PACKAGE.parent).as_posix(), path.read_text(encoding="utf-8"))
    ]
    assert not found, "split these into modules of one concept each (docs/architecture.md): " + "; ".join(found)
