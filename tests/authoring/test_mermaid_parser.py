"""Mermaid export, read back by the real Mermaid parser (node + the ``mermaid`` package from npm).

The package is installed once into a cache folder (``$XDG_CACHE_HOME/llm-fsm-test-mermaid``, by
default ``~/.cache/llm-fsm-test-mermaid``) and reused; the tests are skipped only when node or npm
is missing. Each diagram must parse, and must mean what was drawn: the parser's own state list and
relations are compared with the definition (a line Mermaid reads as another statement parses, but
loses an edge or a state).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

import llm_fsm
from llm_fsm.authoring.diagram import (
    ACTS_NOTE,
    edge_label,
    extra_nodes,
    global_label,
    subflow_text,
    to_mermaid,
    tools_text,
)
from llm_fsm.definition.models import RETURN, FSMDefinition, State
from tests.conftest import EXAMPLES

PACKAGES = {"mermaid": "11.17.2", "jsdom": "24.1.3"}  # both run on node 18 and later
# mermaid.parse() checks the syntax; the diagram it builds (getDiagramFromText) says what was read.
# Some of mermaid's code wants a DOM even to parse: jsdom provides one.
PARSE_SCRIPT = """
import { JSDOM } from 'jsdom';
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import('mermaid');
mermaid.initialize({ startOnLoad: false });
let input = '';
for await (const chunk of process.stdin) input += chunk;
const results = [];
for (const text of JSON.parse(input)) {
  try {
    await mermaid.parse(text);
    const { db } = await mermaid.mermaidAPI.getDiagramFromText(text);
    const states = Object.fromEntries([...db.getStates()].map(([id, s]) => [id, s.descriptions]));
    const relations = db.getRelations().map((r) => [r.id1, r.id2, r.relationTitle || '']);
    results.push({ ok: true, states, relations });
  } catch (error) {
    results.push({ ok: false, error: String(error?.message ?? error) });
  }
}
process.stdout.write(JSON.stringify(results));
"""

Parse = Callable[[list[str]], list[dict[str, Any]]]


def cache_folder() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "llm-fsm-test-mermaid"


def installed(folder: Path) -> bool:
    for name, version in PACKAGES.items():
        manifest = folder / "node_modules" / name / "package.json"
        if not manifest.exists() or json.loads(manifest.read_text()).get("version") != version:
            return False
    return True


@pytest.fixture(scope="session")
def mermaid() -> Parse:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run Mermaid's parser (apt-get install nodejs npm)")
    folder = cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock"), timeout=900):
        if not installed(folder):
            (folder / "package.json").write_text(json.dumps({"private": True, "dependencies": PACKAGES}, indent=2))
            command = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"]
            done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=900, check=False)
            if done.returncode != 0 or not installed(folder):
                pytest.fail(f"npm could not install {PACKAGES} into {folder}:\n{done.stderr[-3000:]}")
        (folder / "parse.mjs").write_text(PARSE_SCRIPT)

    def parse(texts: list[str]) -> list[dict[str, Any]]:
        done = subprocess.run(
            [node, "parse.mjs"], cwd=folder, input=json.dumps(texts), capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results: list[dict[str, Any]] = json.loads(done.stdout)
        return results

    return parse


# ---------------------------------------------------------------- what the parser read, against the definition


def decoded(text: str) -> str:
    """A label as Mermaid renders it: its entity codes (``#59;``, kept as ``ﬂ°°59¶ß`` while parsing) decoded."""
    text = text.replace("ﬂ°°", "&#").replace("ﬂ°", "&").replace("¶ß", ";")
    text = re.sub(r"&#(\d+);", lambda m: chr(int(m.group(1))), text)
    return text.replace("&quot;", '"')


def shown(text: str) -> str:
    return " ".join(text.split())


def expected(definition: FSMDefinition) -> tuple[dict[str, str], Counter[tuple[str, str, str]]]:
    """The labels of the states (by the ids the export gives them) and the edges the diagram must hold:
    global transitions once each, from the "from anywhere" node; "$return" to the "back" node."""
    ids = {sid: f"s{n}" for n, sid in enumerate(definition.states)}
    ids[RETURN] = "back"

    def notes(state: State) -> str:  # what the state's box says besides its id (Mermaid appends it to the label)
        tools = f" {ACTS_NOTE}" if state.acts else ""
        tools += f" {tools_text(state.tools)}" if state.tools else ""
        return tools + (f" {subflow_text(definition, state)}" if state.subflow else "")

    labels = {ids[sid]: shown(sid + notes(s)) for sid, s in definition.states.items()}
    labels.update({node: shown(label) for node, label in extra_nodes(definition).items()})
    edges = Counter([("root_start", ids[definition.initial_state], "")])
    for sid, state in definition.states.items():
        edges.update((ids[sid], ids[t.target_state], shown(edge_label(t))) for t in state.transitions)
        edges.update([(ids[sid], "root_end", "")] if state.terminal else [])
    edges.update(("anywhere", ids[g.target_state], shown(global_label(g))) for g in definition.global_transitions)
    return labels, edges


def assert_read_back(definition: FSMDefinition, result: dict[str, Any]) -> None:
    text = to_mermaid(definition)
    assert result["ok"], f"Mermaid cannot parse:\n{text}\n{result.get('error')}"
    labels, edges = expected(definition)
    states = {sid: shown(decoded(" ".join(descriptions))) for sid, descriptions in result["states"].items()}
    assert {sid: states.get(sid) for sid in labels} == labels, text
    assert set(states) - set(labels) <= {"root_start", "root_end"}, text
    relations = Counter((a, b, shown(decoded(title))) for a, b, title in result["relations"])
    assert relations == edges, text


def check_all(mermaid: Parse, definitions: list[FSMDefinition]) -> None:
    results = mermaid([to_mermaid(d) for d in definitions])
    for definition, result in zip(definitions, results, strict=True):
        assert_read_back(definition, result)


# ---------------------------------------------------------------- the tests


def test_every_example_is_read_back_as_drawn(mermaid):
    check_all(mermaid, [llm_fsm.load(path) for path in EXAMPLES])


def test_global_transitions_and_going_back_are_read_back_as_drawn(mermaid):
    states = {
        "ask": {"transitions": [{"target_state": "done", "conditions": [{"requires_context_keys": ["x"]}]}]},
        "help": {"transitions": [{"target_state": RETURN, "description": "answered: back; to it"}]},
        "more": {"transitions": [{"target_state": "help"}, {"target_state": RETURN}]},
        "cancelled": {},
        "done": {},
    }
    moves = [
        {"target_state": "cancelled", "description": "stop #now", "priority": 1, "except_states": ["more", "help"]},
        {"target_state": "help", "conditions": [{"logic": {"==": [{"var": "q"}, "a:b"]}}]},
        {"target_state": RETURN, "description": "back"},
    ]
    definition = llm_fsm.load({"name": "g", "initial_state": "ask", "states": states, "global_transitions": moves})
    text = to_mermaid(definition)
    assert text.count("anywhere -->") == 3 and "class anywhere, back moves" in text
    check_all(mermaid, [definition])


def test_acting_states_and_automatic_moves_are_read_back_as_drawn(mermaid):
    states = {
        "ask": {"transitions": [{"target_state": "research", "description": "The topic is known"}]},
        "research": {
            "acts": True,
            "transitions": [
                {"target_state": "write", "automatic": True, "conditions": [{"requires_context_keys": ["notes"]}]},
                {"target_state": RETURN, "automatic": True, "priority": 200, "conditions": [{"logic": False}]},
            ],
        },
        "write": {"acts": True, "transitions": [{"target_state": "done"}, {"target_state": "research"}]},
        "done": {"acts": True},
        "cancelled": {},
    }
    moves = [{"target_state": "cancelled", "automatic": True, "conditions": [{"requires_context_keys": ["stop"]}]}]
    definition = llm_fsm.load({"name": "w", "initial_state": "ask", "states": states, "global_transitions": moves})
    text = to_mermaid(definition)
    assert "    class s1, s2, s3 acts" in text and "(auto, p100) [has notes]" in text
    check_all(mermaid, [definition])


def test_the_tools_of_a_state_are_read_back_as_drawn(mermaid):
    from tests.tools.test_tools import SUPPORT

    data = json.loads(json.dumps(SUPPORT))
    data["states"]["note"] = {"tools": ["slow"], "transitions": [{"target_state": "done"}]}
    data["states"]["found"]["transitions"].append({"target_state": "note"})
    check_all(mermaid, [llm_fsm.load(data)])


KEYWORDS = [
    "note", "class", "classDef", "style", "accTitle", "accDescr", "end", "subgraph", "click", "href", "direction",
    "default", "Default_route", "state", "scale", "hide", "stateDiagram", "stateDiagram_v2", "as", "left", "right",
    "of", "fork", "join", "choice", "concurrent", "root_start", "root_end", "s0", "s1",
]  # fmt: skip
HOSTILE = [
    "two words", 'say "hi"', "it's", "état", "日本語", "emoji 😀", "a[b]", "[*]", "<<fork>>", "[[choice]]",
    "{x}", "a:b", "a;b", "#", "#quot;", "&amp;", "%%", "%%{init: {}}%%", "-->", "a -- b", "::: x", "<b>bold</b>",
    "back\\slash", "tab\there", "new\nline", "carriage\rreturn", "\u2028", "nul\x00", "lone \ud800", "", " ",
    "direction LR", "note left of x", "end note", "style s0 fill:#f00;", "classDef x fill:#f00;", "accTitle: x",
    "hide empty description", "click s0 call f()", "state \"x\" as y", "a\\nb",
]  # fmt: skip


def lone_state(sid: str, description: str) -> FSMDefinition:
    """A definition (built without the loader, which would refuse such ids) around state ``sid``."""
    back = [{"target_state": sid, "description": description}, {"target_state": "done", "priority": 5}]
    states = {
        sid: {"id": sid, "transitions": [{"target_state": "after", "description": description}]},
        "after": {"id": "after", "transitions": back},
        "done": {"id": "done"},
    }
    return FSMDefinition.model_validate({"name": "x", "initial_state": sid, "states": states})


@pytest.mark.parametrize("group", ["keywords", "hostile"])
def test_hostile_state_ids_and_descriptions_are_read_back_as_drawn(mermaid, group):
    names = KEYWORDS if group == "keywords" else HOSTILE
    check_all(mermaid, [lone_state(name, f"to {name}") for name in names if name not in ("after", "done")])


def test_keyword_ids_through_the_loader(mermaid):
    """The loader accepts identifiers only, and many are Mermaid keywords."""
    states = {name: {"transitions": [{"target_state": "end"}]} for name in KEYWORDS[:-4]}
    states["end"] = {}
    definition = llm_fsm.load({"name": "k", "initial_state": "note", "states": states})
    check_all(mermaid, [definition])


ALPHABET = list("ab Z_9:;#\"{}[]<>%&\\/-*.,()!?=|~`'\n\t\r\x00\x1f\u2028\u00e9\u65e5😀") + [
    "note",
    "end",
    "direction TB",
    "style",
    "class",
    "state",
    "-->",
    "[*]",
    "#35;",
    "%%{",
    "::",
    "<<fork>>",
]


def test_fuzzed_ids_and_descriptions_are_read_back_as_drawn(mermaid):
    rng = random.Random(13)

    def word() -> str:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8)))

    definitions = []
    for _ in range(150):
        names = list(dict.fromkeys(word() for _ in range(4)))
        states: dict[str, dict[str, Any]] = {}
        for n, name in enumerate(names):
            targets = names[n + 1 :] or []
            states[name] = {
                "id": name,
                "transitions": [
                    {"target_state": target, "description": word(), "conditions": [{"logic": {"==": [word(), 1]}}]}
                    for target in targets
                ],
            }
        definitions.append(FSMDefinition.model_validate({"name": "f", "initial_state": names[0], "states": states}))
    check_all(mermaid, definitions)
