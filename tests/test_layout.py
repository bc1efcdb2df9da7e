"""The package's layout (docs/architecture.md): its rooms as floors, each importing only from its own floor
and those below; guided mode reached only through its seam; no module imports one that imports it back,
directly or through others; and a map that names every module.

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


# The rooms, from the ground up: a module imports only from its own room and the rooms below it. A room is a
# package of llm_fsm or a few top-level modules; the edges the turn uses (llm, telemetry, tools, memory) are
# below it, and what people use (store, authoring, testing, server, editor, cli) above the conversation.
FLOORS: list[tuple[str, set[str]]] = [
    ("ground", {"errors", "values", "secrets", "records", "schemas", "jsonfiles", "named_files", "hooks", "contract"}),
    ("logic", {"logic"}),
    ("definition", {"definition"}),
    ("snapshot", {"snapshot"}),
    ("guided", {"guided"}),
    ("telemetry", {"telemetry"}),
    ("llm", {"llm"}),
    ("edges", {"tools", "memory"}),
    ("turn", {"turn"}),
    ("subflows", {"subflows"}),
    ("conversation", {"conversation", "driving", "running", "binding", "recorded", "streaming"}),
    ("face", {""}),  # llm_fsm/__init__.py: every public name, imported on first use
    ("store", {"store"}),
    ("authoring", {"authoring"}),
    ("testing", {"testing"}),
    ("server", {"server"}),
    ("editor", {"editor"}),  # llm-fsm edit: its own local server and page, beside serve's
    ("cli", {"cli"}),
]
FLOOR = {room: level for level, (_, rooms) in enumerate(FLOORS) for room in rooms}


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


def room(module: str) -> str:
    """The room of a module: its package under llm_fsm (``turn`` for ``llm_fsm.turn.runner``), or its own name for a
    top-level module; ``""`` for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def floor(module: str) -> int:
    return FLOOR[room(module)]


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
    assert (
        "llm_fsm.logic.rules" in graph["llm_fsm.definition.conditions"]
    )  # from llm_fsm.logic import rules: the module
    assert "llm_fsm.cli" not in graph["llm_fsm.cli.chat"]
    assert "llm_fsm.definition.memory" in graph["llm_fsm.definition.models"]  # a module of a core package
    assert "llm_fsm.memory" in graph["llm_fsm.turn.prompt"]  # from llm_fsm import memory: the package's __init__


def test_every_room_has_a_floor():
    rooms = {room(module) for module in import_graph()}
    assert not rooms - set(FLOOR), "rooms with no floor in FLOORS: " + ", ".join(sorted(rooms - set(FLOOR)))
    assert floor("llm_fsm.definition.loader") < floor("llm_fsm.guided.words") < floor("llm_fsm.turn.runner")


def test_the_cycle_finder_names_modules_that_import_each_other():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_no_module_imports_one_that_imports_it_back():
    found = cycles(import_graph())
    assert not found, "modules that import each other: " + "; ".join(" ↔ ".join(sorted(c)) for c in found)


def test_no_import_runs_up_a_floor():
    wrong = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in targets
        if floor(target) > floor(module)
    ]
    assert not wrong, "; ".join(sorted(wrong))


def test_guided_mode_is_reached_only_through_its_seam():
    # what helps a small model is one package, asked through llm_fsm/guided/__init__.py alone; and the turn asks it
    # from one module, its reply mode (llm_fsm/turn/reply_modes.py), so nothing else of the turn knows it is there
    graph = import_graph()
    wrong = [
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if room(module) != "guided" and room(target) == "guided" and target != "llm_fsm.guided"
    ]
    assert not wrong, "; ".join(sorted(wrong))
    turn = {module for module, targets in graph.items() if room(module) == "turn" and "llm_fsm.guided" in targets}
    assert turn == {"llm_fsm.turn.reply_modes"}, "the turn imports guided mode from: " + ", ".join(sorted(turn))
    # and only the reply mode asks whether the turn is guided: the rest of the turn asks the mode
    asking = {
        path.relative_to(PACKAGE).as_posix()
        for path in (PACKAGE / "turn").glob("*.py")
        if "settings.guided" in path.read_text(encoding="utf-8")
    }
    assert asking == {"turn/reply_modes.py"}, "turn modules asking settings.guided: " + ", ".join(sorted(asking))


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


def private_imports(tree: ast.AST) -> list[str]:
    """The private names (``_x``, not ``__x__``) a module's ``from llm_fsm... import`` statements take."""
    return [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llm_fsm")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


def test_the_private_name_check_sees_a_private_import_and_no_other():
    tree = ast.parse("from llm_fsm.a import _x, y, __version__\nfrom os import _exit\n")
    assert private_imports(tree) == ["llm_fsm.a._x"]


def test_no_module_imports_another_module_s_private_names():
    # a name another module needs is part of its module's face: named without the underscore
    found = [
        f"{path.relative_to(PACKAGE.parent).as_posix()} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in private_imports(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, "; ".join(found)


TESTS = Path(__file__).resolve().parent
NOT_A_ROOM = {"data", "stress", "real_model"}  # corpora, long runs and the real-model suite


def test_the_tests_mirror_the_package_s_rooms():
    """A folder of tests is named for the package (or top-level module) it tests; the whole project at the top."""
    folders = {p.parent.name for p in TESTS.glob("*/test_*.py")} - NOT_A_ROOM  # what tests make (artifacts/): none
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    packages |= {p.stem for p in PACKAGE.glob("*.py")}  # the conversation's own modules at the top, too
    assert folders, "no test folders found"
    assert not folders - packages, "test folders named for no package: " + ", ".join(sorted(folders - packages))
    for folder in folders:
        assert (TESTS / folder / "__init__.py").is_file(), f"tests/{folder}/ has no __init__.py"
