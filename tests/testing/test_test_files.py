"""``llm-fsm test`` and ``paths --write-tests`` on awkward input: bad expectations, unsatisfiable paths, hooks."""

from __future__ import annotations

import json
import operator
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.testing.conversation_tests import failure_text, junit_xml, run_files
from tests.cli.test_chat import OPEN
from tests.conftest import reply

runner = CliRunner()


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "signup.json").write_text(json.dumps(OPEN))
    return tmp_path


def write_steps(folder, *steps, name="signup.test.json"):
    path = folder / name
    path.write_text(
        json.dumps({"cases": [{"name": "case", "definition": "signup.json", "steps": list(steps)}]}, indent=1)
    )
    return path


def opening(**expect):
    return {"user": None, "reply": reply("ask_name", "Hi! Name?"), "expect": expect}


# -- expectations that cannot be checked, and typos in them -------------------------------------


@pytest.mark.parametrize("field", ["message", "error"])
def test_an_invalid_regex_fails_its_case_with_the_reason(folder, field):
    path = write_steps(folder, opening(**{field: "Name ("}))
    (outcome,) = run_files([path])
    assert not outcome.passed
    assert "/Name (/ is not a valid regular expression: missing ), unterminated subpattern" in str(outcome.steps)
    result = runner.invoke(app, ["test", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.stdout and "not a valid regular expression" in result.stdout


def test_a_typo_in_an_expectation_key_gets_a_did_you_mean_with_its_line_and_column(folder):
    path = write_steps(folder, opening(stat="ask_name"), {"user": "Ann", "expect": {"contxt": {"name": "Ann"}}})
    result = runner.invoke(app, ["test", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    lines = path.read_text().splitlines()
    stat = next(n for n, line in enumerate(lines, 1) if '"stat"' in line)
    contxt = next(n for n, line in enumerate(lines, 1) if '"contxt"' in line)
    assert f"{path}:{stat}:" in result.stderr and "did you mean 'state'?" in result.stderr
    assert f"{path}:{contxt}:" in result.stderr and "did you mean 'context'?" in result.stderr
    assert "unknown field 'stat'" in result.stderr


def test_a_test_file_that_does_not_load_is_called_an_invalid_test_file(folder):
    path = write_steps(folder, {"usr": "hi"})
    (outcome,) = run_files([path])
    assert outcome.error.startswith(f"invalid test file {path}") and "invalid definition" not in outcome.error


# -- paths --write-tests: paths the simulated model cannot follow, comparisons between keys -------


def booking(*conditions):
    """Collect two dates, then confirm when ``conditions`` hold."""
    return {
        "name": "booking",
        "description": "Book a stay.",
        "initial_state": "collect",
        "context_schema": {
            "check_in": {"type": "string", "format": "date"},
            "check_out": {"type": "string", "format": "date"},
        },
        "states": {
            "collect": {
                "purpose": "Ask for the dates of the stay",
                "required_context_keys": ["check_in", "check_out"],
                "transitions": [{"target_state": "done", "description": "Dates known", "conditions": list(conditions)}],
            },
            "done": {"purpose": "Confirm the booking"},
        },
    }


COMPARE = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
IN_ORDER = {"description": "dates in order", "logic": {"<": [{"var": "check_in"}, {"var": "check_out"}]}}


def test_paths_says_which_condition_on_which_path_it_could_not_satisfy_and_writes_nothing(tmp_path):
    never = {"description": "a day before itself", "logic": {"<": [{"var": "check_in"}, {"var": "check_in"}]}}
    definition = tmp_path / "booking.json"
    definition.write_text(json.dumps(booking(IN_ORDER, never)))
    out = tmp_path / "booking.test.json"
    result = runner.invoke(app, ["paths", str(definition), "--write-tests", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "collect → done" in result.stderr and "condition 'a day before itself'" in result.stderr
    assert "'dates in order'" not in result.stderr and not out.exists()


def test_paths_writes_a_runnable_case_for_a_comparison_of_two_dates(tmp_path):
    definition = tmp_path / "booking.json"
    definition.write_text(json.dumps(booking(IN_ORDER)))
    out = tmp_path / "booking.test.json"
    result = runner.invoke(app, ["paths", str(definition), "--write-tests", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    (case,) = json.loads(out.read_text())["cases"]
    context = {k: v for step in case["steps"] for k, v in step["reply"]["transition"]["context_update"].items()}
    assert context["check_in"] < context["check_out"]
    assert runner.invoke(app, ["test", str(out)]).exit_code == 0


@pytest.mark.parametrize("comparison", ["<", "<=", ">", ">=", "==", "!="])
@pytest.mark.parametrize(
    ("schema", "sample"), [({"type": "integer", "minimum": 1}, 1), ({"type": "string", "format": "date"}, "2026-01-15")]
)
def test_the_simulated_model_satisfies_a_comparison_of_two_keys(comparison, schema, sample):
    from llm_fsm.definition.loader import load
    from llm_fsm.testing.simulation import SimulatedLLM

    compared = {comparison: [{"var": "check_in"}, {"var": "check_out"}]}
    data = booking({"description": "compared", "requires_context_keys": ["check_in", "check_out"], "logic": compared})
    data["context_schema"] = {"check_in": schema, "check_out": schema}
    definition = load(data)
    llm = SimulatedLLM(definition)
    transition = definition.states["collect"].transitions[0]
    update = llm.satisfy("collect", transition, {"check_in": sample})
    assert update is not None
    context = {"check_in": sample, **update}
    assert COMPARE[comparison](context["check_in"], context["check_out"])


def test_the_simulated_model_fills_an_array_key_with_a_list_its_schema_allows():
    from llm_fsm.definition.loader import load
    from llm_fsm.testing.simulation import SimulatedLLM

    data = {
        "name": "pizza",
        "initial_state": "ask",
        "context_schema": {"toppings": {"type": "array", "items": {"type": "string"}}},
        "states": {
            "ask": {
                "transitions": [
                    {"target_state": "done", "conditions": [{"logic": {"in": ["cheese", {"var": "toppings"}]}}]}
                ]
            },
            "done": {},
        },
    }
    definition = load(data)
    update = SimulatedLLM(definition).satisfy("ask", definition.states["ask"].transitions[0], {})
    assert update == {"toppings": ["cheese"]}


# -- hooks: test files name them, llm-fsm test and paths take --hooks ---------------------------

REFUND = {
    "name": "refund",
    "description": "Look an order up, wait for a person to approve the refund.",
    "initial_state": "ask_order",
    "handler_only_keys": ["order_found", "approved"],
    "states": {
        "ask_order": {
            "purpose": "Ask for the order number",
            "required_context_keys": ["order_id"],
            "handlers": ["lookup"],
            "transitions": [
                {
                    "target_state": "approval",
                    "description": "The order exists",
                    "conditions": [{"description": "found", "logic": {"==": [{"var": "order_found"}, True]}}],
                }
            ],
        },
        "approval": {
            "purpose": "Tell the user a person approves refunds",
            "handlers": ["ask_staff"],
            "transitions": [
                {
                    "target_state": "done",
                    "description": "Approved",
                    "conditions": [{"description": "approved", "logic": {"==": [{"var": "approved"}, True]}}],
                }
            ],
        },
        "done": {"purpose": "Confirm the refund"},
    },
}
REFUND_HOOKS = """
from dataclasses import dataclass

from llm_fsm import Break, Hooks

hooks = Hooks()


@dataclass
class Order:  # a dataclass: the module must be in sys.modules while it loads
    id: str


@hooks.handler("lookup", on="after_reply")  # before the move is judged: the lookup can open it this turn
def lookup(*, reply, context, **_):
    order_id = reply.transition.context_update.get("order_id", context.get("order_id"))
    if order_id is not None:
        return {"order_found": Order(str(order_id)).id != "unknown"}


@hooks.handler("ask_staff", on="state_enter")
def ask_staff(*, context, **_):
    raise Break("refund needs approval", {"order": context.get("order_id")})
"""
ASYNC_HOOKS = REFUND_HOOKS.replace("def lookup(", "async def lookup(")
REFUND_STEPS = [
    {"user": None, "reply": reply("ask_order", "Your order number?"), "expect": {"state": "ask_order"}},
    {
        "user": "A-17",
        "reply": reply("approval", "A person will approve it.", order_id="A-17"),
        "expect": {"state": "approval", "status": "paused", "context": {"order_found": True}},
    },
    {"resume": {"approved": True}, "reply": reply("done", "Refunded."), "expect": {"state": "done", "status": "ended"}},
]


@pytest.fixture
def refund(tmp_path):
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "refund.json").write_text(json.dumps(REFUND))
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "refund_hooks.py").write_text(REFUND_HOOKS)
    (tmp_path / "code" / "async_hooks.py").write_text(ASYNC_HOOKS)
    return tmp_path


def refund_test(folder, hooks=None, name="refund.test.json"):
    document = {"cases": [{"name": "refund", "definition": "../defs/refund.json", "steps": REFUND_STEPS}]}
    path = folder / "tests" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"hooks": hooks, **document} if hooks else document))
    return path


@pytest.mark.parametrize("hooks", ["../code/refund_hooks.py:hooks", "../code/async_hooks.py:hooks"])
def test_a_test_file_names_its_hooks_relative_to_itself(refund, hooks, monkeypatch):
    monkeypatch.chdir(refund / "defs")  # not where the hooks are: the path is read from the test file's folder
    path = refund_test(refund, hooks)
    (outcome,) = run_files([path])
    assert outcome.passed, outcome.steps
    assert [s.result.state for s in outcome.steps] == ["ask_order", "approval", "done"]
    assert outcome.steps[1].result.pending.reason == "refund needs approval"
    assert outcome.steps[2].resume and not outcome.steps[1].resume
    result = runner.invoke(app, ["test", str(path), "-v"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "3. (resume): approval → done" in result.stdout


def test_without_hooks_a_case_fails_saying_where_to_name_them_and_test_hooks_supplies_them(refund, monkeypatch):
    path = refund_test(refund)
    (outcome,) = run_files([path])
    assert "names handler 'lookup', which is not registered" in outcome.error
    assert 'name the hooks in the test file\'s "hooks" field, or pass llm-fsm test --hooks' in outcome.error
    monkeypatch.chdir(refund)
    result = runner.invoke(app, ["test", str(path), "--hooks", "code/refund_hooks.py:hooks"])
    assert result.exit_code == 0, result.output
    monkeypatch.chdir(refund / "code")  # a module name is found in the current folder
    assert runner.invoke(app, ["test", str(path), "--hooks", "refund_hooks:hooks"]).exit_code == 0


def test_the_test_files_hooks_win_over_the_command_line(refund, monkeypatch):
    monkeypatch.chdir(refund)
    (refund / "code" / "empty_hooks.py").write_text("from llm_fsm import Hooks\nhooks = Hooks()\n")
    path = refund_test(refund, "../code/refund_hooks.py:hooks")
    result = runner.invoke(app, ["test", str(path), "--hooks", "code/empty_hooks.py:hooks"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("hooks", "reason"),
    [
        ("../code/nothere.py:hooks", "hooks ../code/nothere.py:hooks: no such file"),
        ("../code/refund_hooks.py:hoks", "../code/refund_hooks.py has no 'hoks' (its Hooks objects: hooks)"),
        ("../code/refund_hooks.py:Break", "'Break' in ../code/refund_hooks.py is a type, not a llm_fsm.Hooks object"),
        ("../code/broken.py:hooks", "cannot import ../code/broken.py: ModuleNotFoundError: No module named 'nope'"),
        ("no_such.module:hooks", "no module named 'no_such'"),
        ("../defs/refund.json:hooks", "../defs/refund.json is not a Python file (FILE.py) or module"),
        ("../code/refund_hooks.py", "expected MODULE:NAME or FILE.py:NAME"),
    ],
)
def test_hooks_that_do_not_load_fail_each_case_of_their_file_with_the_reason(refund, hooks, reason):
    (refund / "code" / "broken.py").write_text("import nope\n")
    path = refund_test(refund, hooks)
    other = refund_test(refund, "../code/refund_hooks.py:hooks", name="other.test.json")
    outcomes = run_files([path, other])
    assert [o.passed for o in outcomes] == [False, True]
    assert outcomes[0].name == "refund" and reason in outcomes[0].error, outcomes[0].error
    result = runner.invoke(app, ["test", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 1 and "FAIL" in result.stdout and "Traceback" not in result.output


def test_paths_walks_the_handlers_and_writes_a_file_that_names_them_and_resumes_the_pause(refund, monkeypatch):
    monkeypatch.chdir(refund)
    out = refund / "tests" / "written.test.json"
    args = ["paths", "defs/refund.json", "--write-tests", str(out)]
    missing = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert missing.exit_code == 2 and not out.exists()
    assert "names handler 'lookup', which is not registered" in missing.stderr
    assert "pass the hooks with --hooks MODULE:NAME" in missing.stderr and "Traceback" not in missing.output
    result = runner.invoke(app, [*args, "--hooks", "code/refund_hooks.py:hooks"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert written["hooks"] == "../code/refund_hooks.py:hooks"
    (case,) = written["cases"]
    assert "context" not in case  # the handlers set order_found: nothing is given up front
    assert case["steps"][-1]["resume"] == {"approved": True}
    assert case["steps"][-2]["expect"]["status"] == "paused"
    monkeypatch.chdir(refund / "defs")
    tested = runner.invoke(app, ["test", str(out)])
    assert tested.exit_code == 0, tested.output


# -- problems in a test file, in plain words -------------------------------------------------------


def problems_of(folder, document):
    from llm_fsm.testing.conversation_tests import TestFileError, read

    path = folder / "bad.test.json"
    path.write_text(json.dumps(document, indent=1))
    with pytest.raises(TestFileError) as caught:
        read(path)
    return caught.value.problems


def one_case(*steps, **fields):
    return {"cases": [{"name": "c", "definition": "signup.json", "steps": list(steps), **fields}]}


@pytest.mark.parametrize(
    ("document", "where", "message"),
    [
        ({"cases": {}}, "cases", "expected a list of cases, got an empty object"),
        ({"cases": []}, "cases", "at least one case is needed"),
        ({"cases": ["x"]}, "cases[0]", 'expected an object (a case), got a string ("x")'),
        ({"cases": [{"definition": "s.json", "steps": [{}]}]}, "cases[0].name", "missing required field 'name'"),
        (one_case(), "cases[0].steps", "at least one step is needed"),
        (one_case({}, "hi"), "cases[0].steps[1]", 'expected an object (a step), got a string ("hi")'),
        (
            one_case({}, {"expect": {"rejected": "two"}}),
            "cases[0].steps[1].expect.rejected",
            'expected a whole number or a list of rejections, got a string ("two")',
        ),
        (
            one_case({"expect": {"rejected": [{"kind": "condition"}, 3]}}),
            "cases[0].steps[0].expect.rejected[1]",
            "expected an object (a rejection), got a number (3)",
        ),
        (one_case({"expect": {"rejected": -1}}), "cases[0].steps[0].expect.rejected", "must be at least 0"),
        (
            one_case({"expect": {"status": "done"}}),
            "cases[0].steps[0].expect.status",
            "expected one of 'active', 'paused' or 'ended', got a string (\"done\")",
        ),
        (one_case({"expect": {"max_llm_calls": -1}}), "cases[0].steps[0].expect.max_llm_calls", "must be at least 0"),
        (one_case({"expect": {"max_tokens": -5}}), "cases[0].steps[0].expect.max_tokens", "must be at least 0"),
        (
            one_case({"expect": {"max_llm_calls": "2"}}),
            "cases[0].steps[0].expect.max_llm_calls",
            'expected a whole number, got a string ("2")',
        ),
        (one_case({"expect": []}), "cases[0].steps[0].expect", "expected an object of expectations, got an empty list"),
        (
            one_case({"reply": 4}),
            "cases[0].steps[0].reply",
            "expected a reply (an object) or raw text (a string), got a number (4)",
        ),
        (
            one_case({}, {"user": "yes", "resume": {"approved": True}}),
            "cases[0].steps[1]",
            "a step has either 'user' (the user says something) or 'resume'",
        ),
        (
            one_case({"reply": "a", "replies": ["b"]}),
            "cases[0].steps[0]",
            "a step has either 'reply' or 'replies', not both",
        ),
    ],
)
def test_a_test_files_problems_are_in_plain_words_at_their_place(folder, document, where, message):
    (problem,) = problems_of(folder, document)
    assert problem.path == where and message in problem.message, str(problem)
    assert problem.line is not None


def test_a_misspelt_rejection_field_or_kind_gets_a_did_you_mean(folder):
    kinds, kind = problems_of(folder, one_case({"expect": {"rejected": [{"kinds": "x"}, {"kind": "targt"}]}}))
    assert kinds.message == "unknown field 'kinds'" and kinds.hint == "did you mean 'kind'?"
    assert kind.path == "cases[0].steps[0].expect.rejected[1].kind" and kind.hint == "did you mean 'target'?"


AUTHOR_NEVER_READS = re.compile(
    "Input should|Field required|valid dictionary|after validation|list\\[|dict\\[|instance of|Value error"
    "|_type\\b|_parsing|literal_error|Extra inputs|constrained-|function-"
)
TEST_FILE_WRONG_VALUES: list[object] = [None, True, 0, -3, 1.5, "", "x", [], ["x"], [1], [{}], {}, {"a": 1}]


def full_test_file() -> dict[str, object]:
    """A valid test file in which every field appears once."""
    expect = {
        "state": "ask_name",
        "context": {},
        "message": "Name",
        "rejected": [{"kind": "format", "key": "k", "target_state": "s", "reason": "r", "attempt": 1}],
        "max_llm_calls": 1,
        "max_tokens": 100,
        "status": "active",
        "error": "x",
    }
    steps = [
        {"user": None, "reply": reply("ask_name", "Hi"), "expect": expect},
        {"user": "Ann", "replies": [reply("ask_name", "Hi")]},
        {"resume": {"a": 1}},
    ]
    case = {"name": "c", "definition": "signup.json", "state": "ask_name", "context": {}, "steps": steps}
    return {"$schema": "x", "hooks": "h.py:hooks", "cases": [case]}


def locations_in(document, loc=()):
    """Every place in ``document`` (a value of an object or a list)."""
    items = document.items() if isinstance(document, dict) else enumerate(document)
    for key, value in items:
        yield (*loc, key)
        if isinstance(value, (dict, list)) and key not in ("reply", "context", "resume"):
            yield from locations_in(value, (*loc, key))


def test_no_pydantic_words_reach_the_author_of_a_test_file_whatever_is_wrong(folder):
    from llm_fsm.testing.conversation_tests import TestFileError, read

    path = folder / "sweep.test.json"
    path.write_text(json.dumps(full_test_file()))
    read(path)  # the starting point is valid
    seen = 0
    for loc in list(locations_in(full_test_file())):
        variants = [(value, False) for value in TEST_FILE_WRONG_VALUES] + [(None, True)]
        for value, remove in variants:
            document: Any = full_test_file()
            parent = document
            for part in loc[:-1]:
                parent = parent[part]
            if remove:
                del parent[loc[-1]]
            else:
                parent[loc[-1]] = value
            if isinstance(parent, dict) and not remove:
                parent[f"{loc[-1]}_typo"] = 1  # an unknown field next to it, too
            path.write_text(json.dumps(document, indent=1))
            try:
                read(path)
            except TestFileError as exc:
                for problem in exc.problems:
                    seen += 1
                    words = f"{problem.path} {problem.message} {problem.hint or ''}"
                    assert not AUTHOR_NEVER_READS.search(words), (loc, value, str(problem))
                    assert ".0" not in problem.path, (loc, value, str(problem))
                    assert problem.line is not None or problem.code == "unreadable", (loc, value, str(problem))
    assert seen > 400


def test_paths_walks_async_handlers_on_the_async_api_and_the_file_runs(refund, monkeypatch):
    monkeypatch.chdir(refund)
    out = refund / "tests" / "async.test.json"
    args = ["paths", "defs/refund.json", "--hooks", "code/async_hooks.py:hooks", "--write-tests", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert written["hooks"] == "../code/async_hooks.py:hooks"
    assert written["cases"][0]["steps"][-1]["resume"] == {"approved": True}
    tested = runner.invoke(app, ["test", str(out)])
    assert tested.exit_code == 0, tested.output


def test_the_skeletons_schema_is_the_checkouts_seen_from_the_written_file_or_none(tmp_path, monkeypatch):
    import llm_fsm.cli.authoring as authoring
    from tests.conftest import ROOT

    (tmp_path / "signup.json").write_text(json.dumps(OPEN))
    out = tmp_path / "deep" / "er" / "signup.test.json"
    result = runner.invoke(app, ["paths", str(tmp_path / "signup.json"), "--write-tests", str(out)])
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert (out.parent / written["$schema"]).resolve() == ROOT / "schema" / "fsm-test.schema.json"
    monkeypatch.setattr(authoring, "_TEST_SCHEMA", tmp_path / "nowhere" / "fsm-test.schema.json")  # installed
    assert runner.invoke(app, ["paths", str(tmp_path / "signup.json"), "--write-tests", str(out)]).exit_code == 0
    assert "$schema" not in json.loads(out.read_text())


def test_test_hooks_are_loaded_only_for_the_files_that_name_none(refund, monkeypatch):
    monkeypatch.chdir(refund)
    named = refund_test(refund, "../code/refund_hooks.py:hooks")
    bad = ["--hooks", "code/nothere.py:hooks"]
    result = runner.invoke(app, ["test", str(named), *bad], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output  # every file names its own: --hooks is never loaded
    unnamed = refund_test(refund, name="unnamed.test.json")
    result = runner.invoke(app, ["test", str(named), str(unnamed), *bad], env={"COLUMNS": "300"})
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"PASS {named}: refund" in result.stdout and f"FAIL {unnamed}: refund" in result.stdout
    assert "hooks code/nothere.py:hooks: no such file" in result.stdout
    assert "(the runner's hooks, llm-fsm test --hooks: this file names none)" in result.stdout
    (outcome,) = run_files([unnamed], hooks="code/refund_hooks.py:hooks")  # the library takes a spec too
    assert outcome.passed, outcome.error


def test_a_failing_resume_step_is_labelled_resume(refund):
    steps = [*REFUND_STEPS[:2], {**REFUND_STEPS[2], "expect": {"state": "approval"}}]
    path = refund / "tests" / "resume.test.json"
    path.parent.mkdir(exist_ok=True)
    document = {"hooks": "../code/refund_hooks.py:hooks", "cases": [{"name": "r", "definition": "../defs/refund.json"}]}
    document["cases"][0]["steps"] = steps
    path.write_text(json.dumps(document))
    (outcome,) = run_files([path])
    assert failure_text(outcome) == "step 3 (resume): state: expected 'approval', got 'done'"
    assert "(resume)" in junit_xml([outcome])
