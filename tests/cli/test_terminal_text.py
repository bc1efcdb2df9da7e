"""Text from a model, a user or a store is shown as text: ``chat``, ``run`` and ``conversations show`` never
write its control characters to the terminal, nor read its rich markup (issue 45). The real terminal's side
(the screen not cleared, the title not set) is tests/cli/test_chat_tmux.py's."""

from __future__ import annotations

import json
import re

import pytest
from rich.text import Text
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.cli.shown import as_text, in_markup, json_text, shown
from tests.cli.test_chat import OPEN, chat
from tests.conftest import reply

runner = CliRunner()

# (what the case is, the text, how it is shown). A sequence's introducer is escaped: the rest is plain text.
CASES = [
    ("NUL and BEL", "a\x00b\x07c", "a\\x00b\\x07c"),
    ("backspaces over text", "paid\x08\x08\x08\x08owed", "paid\\x08\\x08\\x08\\x08owed"),
    ("vertical tab and form feed", "a\x0bb\x0cc", "a\\x0bb\\x0cc"),
    ("DEL", "a\x7fb", "a\\x7fb"),
    ("CSI: clear the screen, cursor home", "\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
    ("CSI: a colour", "\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("OSC 0 title ended by BEL", "\x1b]0;HACKED\x07", "\\x1b]0;HACKED\\x07"),
    ("OSC 2 title ended by ST", "\x1b]2;HACKED\x1b\\", "\\x1b]2;HACKED\\x1b\\"),
    (
        "OSC 8 hyperlink",
        "\x1b]8;;https://e.test\x1b\\x\x1b]8;;\x1b\\",
        "\\x1b]8;;https://e.test\\x1b\\x\\x1b]8;;\\x1b\\",
    ),
    ("OSC 52 clipboard", "\x1b]52;c;cm0gLXJm\x07", "\\x1b]52;c;cm0gLXJm\\x07"),
    ("DCS", "\x1bP1$r\x1b\\", "\\x1bP1$r\\x1b\\"),
    ("single ESC sequences: reset, save, restore", "\x1bc\x1b7\x1b8", "\\x1bc\\x1b7\\x1b8"),
    ("a lone ESC at the end", "bye\x1b", "bye\\x1b"),
    ("C1 CSI (8-bit)", "\x9b2J", "\\x9b2J"),
    ("C1 OSC, ST, NEL, DCS", "\x9d0;t\x9c\x85\x90", "\\x9d0;t\\x9c\\x85\\x90"),
    ("a carriage return overwriting the line", "refused\rAPPROVED", "refused\\rAPPROVED"),
    ("a CRLF line end is a newline", "one\r\ntwo", "one\ntwo"),
    ("newlines and tabs kept", "a\n\tb\n\n", "a\n\tb\n\n"),
    ("bidi override", "invoice\u202efdp.exe", "invoice\\u202efdp.exe"),
    (
        "bidi embeddings and isolates",
        "\u202ax\u202c\u2066y\u2069\u2067z\u2068",
        "\\u202ax\\u202c\\u2066y\\u2069\\u2067z\\u2068",
    ),
    ("a lone surrogate (UTF-8 cannot write it)", "a\ud800b", "a\\ud800b"),
    ("accented letters", "naïve café Øre", "naïve café Øre"),
    ("CJK", "日本語の文", "日本語の文"),
    ("right-to-left scripts", "שלום مرحبا", "שלום مرحبا"),
    ("emoji with ZWJ and variation selectors", "👩‍💻 👨‍👩‍👧 ❤️ 🏳️‍🌈", "👩‍💻 👨‍👩‍👧 ❤️ 🏳️‍🌈"),
    ("a flag of tag characters", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"),
    (
        "rich markup is text",
        "[bold]x[/bold] [link=https://e.test]y[/link] [/]",
        "[bold]x[/bold] [link=https://e.test]y[/link] [/]",
    ),
    ("backslashes and brackets", "C:\\path\\ [x] \\[y]", "C:\\path\\ [x] \\[y]"),
]

# what a terminal could act on (a newline and a tab excepted): the test's own statement of it
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_text_is_shown_as_text(text, expected):
    assert shown(text) == expected
    assert as_text(text).plain == expected  # a rich Text: never markup, nothing stripped by rich
    # escaped inside a markup string (a tag after it, as where it is used: rich's escape doubles a last backslash)
    assert Text.from_markup(f"[dim]{in_markup(text)}[/]").plain == expected
    written = json_text({"message": text})
    assert not CONTROL.search(written) and json.loads(written) == {"message": text}  # the same JSON value


# -- every place the commands print such text -----------------------------------------------------------------

MESSAGE = "Hi\x1b[2J\x1b]0;HACKED\x07 [bold]loud[/bold] [link=https://e.test]click[/link] \x9b2J \u202eevil\rend"
NAME = "Ann\x1b]2;HACKED\x1b\\[red]x\x85"
DEFINITION_NAME = "approval [bold]x[/bold]\x1b]0;HACKED\x07"  # a name is any text: it is shown too
LINK = "see [the docs](https://e.test/docs)"  # Markdown: a terminal's hyperlink would hide where it goes
USER = "I am \x1b[2J\u202eAnn\x9b"

HOOKS = """
from llm_fsm import Break, Hooks

hooks = Hooks()


@hooks.handler("ask_staff", on="state_enter")
def ask_staff(*, context):
    raise Break("approve " + context["name"], {"name": context["name"]})
"""


@pytest.fixture
def hostile(tmp_path):
    """A definition pausing for a person, the pause's reason and payload holding the name the model gave."""
    data = json.loads(json.dumps(OPEN))
    data["states"]["ask_email"]["handlers"] = ["ask_staff"]
    data["name"] = DEFINITION_NAME
    path = tmp_path / "approval.json"
    path.write_text(json.dumps(data))
    (tmp_path / "hooks.py").write_text(HOOKS)
    return path


def assert_no_controls(out: str) -> None:
    assert not CONTROL.search(out), f"a control character reached the terminal: {out!r}"


def test_chat_shows_replies_messages_context_pauses_and_errors_as_text(hostile, tmp_path):
    replies = [reply("ask_name", f"{MESSAGE} {LINK}"), reply("ask_email", MESSAGE, name=NAME)]
    lines = [USER, "/history", "/context", "/why", "/nosuch\x1b[2J"]
    result = chat(hostile, tmp_path, replies, "\n".join(lines) + "\n", "--hooks", f"{tmp_path / 'hooks.py'}:hooks")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert_no_controls(out)
    assert_no_controls(result.stderr)
    assert "Hi\\x1b[2J\\x1b]0;HACKED\\x07 [bold]loud[/bold] [link=https://e.test]click[/link]" in out  # the reply
    assert "\\x9b2J \\u202eevil\\rend see the docs (https://e.test/docs)" in out
    assert out.startswith("approval [bold]x[/bold]\\x1b]0;HACKED\\x07 · scripted:")  # the banner
    assert "you> I am \\x1b[2J\\u202eAnn\\x9b" in out  # /history: the user's message
    assert "paused: approve Ann\\x1b]2;HACKED\\x1b\\[red]x\\x85" in out  # the pause's reason
    assert '"name": "Ann\\u001b]2;HACKED\\u001b\\\\[red]x\\u0085"' in out  # its payload, and /context: JSON
    assert "error: unknown command /nosuch\\x1b[2J" in result.stderr


def test_run_and_conversations_show_write_the_same_values_as_text(hostile, tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([reply("ask_name", MESSAGE), reply("ask_email", MESSAGE, name=NAME)]))
    store = f"sqlite://{tmp_path / 'c.db'}"
    args = ["run", str(hostile), "-m", f"scripted:{script}", "--hooks", f"{tmp_path / 'hooks.py'}:hooks"]
    result = runner.invoke(app, [*args, "--store", store, "-c", "c1"], input=USER + "\n")
    assert result.exit_code == 3, result.output  # left paused
    assert_no_controls(result.stdout)
    assert_no_controls(result.stderr)
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert [turn["message"] for turn in turns] == [MESSAGE, MESSAGE] and turns[1]["context"]["name"] == NAME
    assert "paused: approve Ann\\x1b]2;HACKED\\x1b\\[red]x\\x85 (to continue" in result.stderr

    shown_conversation = runner.invoke(app, ["conversations", "show", "c1", "--store", store])
    assert shown_conversation.exit_code == 0, shown_conversation.output
    assert_no_controls(shown_conversation.stdout)
    document = json.loads(shown_conversation.stdout)
    assert [(e["user"], e["assistant"]) for e in document["history"]] == [(None, MESSAGE), (USER, MESSAGE)]
    assert document["pending"]["reason"] == "approve " + NAME

    listed = runner.invoke(app, ["conversations", "list", "--store", store], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert_no_controls(listed.stdout)
    assert "approval [bold]x[/bold]\\x1b]0;HACKED\\x07" in listed.stdout


def test_an_error_line_quoting_what_was_typed_shows_it_as_text(tmp_path):
    path = tmp_path / "signup.json"
    path.write_text(json.dumps(OPEN))
    result = runner.invoke(app, ["chat", str(path), "--model", "simulated", "--state", "x\x1b]0;HACKED\x07"])
    assert result.exit_code == 2
    assert_no_controls(result.stderr)
    assert "error: unknown state 'x\\x1b]0;HACKED\\x07'" in result.stderr


def test_test_shows_a_case_s_name_and_failure_as_text(tmp_path):
    (tmp_path / "signup.json").write_text(json.dumps(OPEN))
    steps = [{"user": None, "reply": reply("ask_name", MESSAGE), "expect": {"state": "done"}}]
    case = {"name": DEFINITION_NAME, "definition": "signup.json", "steps": steps}
    (tmp_path / "t.test.json").write_text(json.dumps({"cases": [case]}))
    result = runner.invoke(app, ["test", str(tmp_path / "t.test.json"), "--coverage"], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert_no_controls(result.stdout)
    assert "t.test.json: approval [bold]x[/bold]\\x1b]0;HACKED\\x07" in result.stdout


def test_eval_shows_a_course_s_name_and_why_it_stopped_as_text(monkeypatch, capsys):
    from io import StringIO

    from rich.console import Console

    from llm_fsm.cli import evaluate
    from llm_fsm.testing.scorecard import CourseScore, TurnScore

    turn = TurnScore("hi", "ask_name", None, False, False, 1, 10, 5, 0.1, [], error="the model wrote " + MESSAGE)
    score = CourseScore(DEFINITION_NAME, [turn], "done", None, course_turns=3)
    err = StringIO()
    monkeypatch.setattr(evaluate, "progress", Console(file=err, width=400))
    evaluate._progress(1, score)
    evaluate._print([[score]])  # not a terminal: the table at its whole width, on stdout
    out = capsys.readouterr().out
    assert_no_controls(out)
    assert_no_controls(err.getvalue())
    assert (
        "run 1: approval [bold]x[/bold]\\x1b]0;HACKED\\x07: 0/3 turns reached (stopped: the model wrote Hi"
        in err.getvalue()
    )
    assert "│ approval [bold]x[/bold]\\x1b]0;HACKED\\x07 │" in out


REPLIES_AS_WRITTEN = [  # (a reply with Markdown in it, the lines the terminal must show, in order)
    (
        "Here's your profile:\nName: Maya Chen\nAge: 34\n\nIs everything **correct**?",
        ["Here's your profile:", "Name: Maya Chen", "Age: 34", "Is everything correct?"],
    ),
    (
        " ".join(f"w{i:02d}" for i in range(24)) + " ![the map](http://x/map.png) and more",
        [" ".join(f"w{i:02d}" for i in range(24)) + " ![the map](http://x/map.png) and more"],
    ),
    ("- one\n- two", ["• one", "• two"]),
    ("Use <b>bold</b> here", ["Use <b>bold</b> here"]),
    ("<div>\nthe text in a block\n</div>\n\nafter", ["<div>", "the text in a block", "</div>", "after"]),
    ("```\n<b>x</b> ![i](u)\n```", ["<b>x</b> ![i](u)"]),  # code is shown as written, no escape added
]


@pytest.mark.parametrize(
    ("message", "lines"), REPLIES_AS_WRITTEN, ids=["line breaks", "image", "list", "html", "html block", "code"]
)
def test_a_markdown_reply_keeps_its_line_breaks_and_every_word(message, lines):
    from rich.console import Console

    from llm_fsm.cli.chat_views import rendered

    console = Console(width=200, record=True, force_terminal=False)
    console.print(rendered(message))
    shown_lines = [line.strip() for line in console.export_text().splitlines() if line.strip()]
    assert shown_lines == lines
