"""``llm-fsm eval`` and the scorecard: turns reaching the expected state, valid first replies, costs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.errors import FSMError, LLMUnavailableError
from llm_fsm.testing import ScriptedLLM
from llm_fsm.testing.scorecard import course, score, summary
from tests.conftest import ROOT

EXAMPLES = ROOT / "fsm_definitions"
runner = CliRunner()


def replies(name: str) -> list:
    return json.loads((EXAMPLES / "scripts" / f"{name}.json").read_text())["replies"]


def test_a_course_is_the_scripted_runs_states_and_the_scripted_model_scores_full_marks():
    quiz = course(EXAMPLES / "quiz.json")
    assert quiz.expected[0] == "intro" and quiz.expected[-1] == "passed" and len(quiz.expected) == len(quiz.lines) + 1
    card = score(quiz, ScriptedLLM(replies("quiz")))
    figures = summary([card])
    assert card.finished and figures["reached_rate"] == 1.0 and figures["first_valid_rate"] == 1.0
    assert figures["calls_per_turn"] == 1.0 and figures["prompt_tokens_per_turn"] > 0


def test_a_model_that_never_moves_reaches_only_the_opening_and_its_refusals_are_counted():
    quiz = course(EXAMPLES / "quiz.json")
    stay = {"transition": {"target_state": "intro", "context_update": {}}, "message": "Hmm."}
    nowhere = {"transition": {"target_state": "nowhere", "context_update": {}}, "message": "?"}
    card = score(quiz, ScriptedLLM([stay, *[nowhere, stay] * 10]))
    figures = summary([card])
    assert figures["reached"] == 1 and not card.finished and card.end == "intro"
    # quiz writes its own opening (no call, not counted): only the first line's reply was valid at once
    assert figures["model_turns"] == figures["turns"] - 1
    assert figures["first_valid_rate"] == pytest.approx(1 / figures["model_turns"])
    assert figures["rejected"] == {"target": figures["model_turns"] - 1} and figures["calls_per_turn"] > 1


def test_turns_a_course_never_played_count_as_missed(tmp_path):
    # the model says goodbye at the first line: the three turns after it were never played, and are missed
    talk = course(EXAMPLES / "small_talk.json")
    bye = {"transition": {"target_state": "farewell", "context_update": {"user_said_goodbye": True}}, "message": "Bye!"}
    card = score(talk, ScriptedLLM([bye]))  # small_talk writes its own opening: no reply for it
    figures = summary([card])
    assert card.end == "farewell" and figures["turns"] == 2 and figures["course_turns"] == len(talk.expected) == 5
    assert figures["reached"] == 1 and figures["reached_rate"] == pytest.approx(1 / 5)
    script = tmp_path / "bye.json"
    script.write_text(json.dumps({"replies": [bye]}))
    result = runner.invoke(
        app, ["eval", str(EXAMPLES / "small_talk.json"), "-m", f"scripted:{script}"], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    assert "small_talk: 1/5 turns reached (the conversation ended in farewell after 2 turns)" in result.stderr
    assert "1.0/5 (20%)" in result.stdout


def test_a_course_that_pauses_early_says_it_paused_and_not_that_it_ended(tmp_path):
    # a breaking hook on the way into farewell: the model says goodbye at the first line, and the conversation
    # waits there (for a person) with three lines still to play
    folder = tmp_path / "talk"
    (folder / "scripts").mkdir(parents=True)
    (folder / "hooks").mkdir()
    for name in ("small_talk.json", "scripts/small_talk.txt", "scripts/small_talk.json"):
        (folder / name).write_text((EXAMPLES / name).read_text())
    (folder / "hooks" / "small_talk.py").write_text(
        "from llm_fsm import Hooks\nfrom llm_fsm.hooks import Break\nhooks = Hooks()\n\n"
        "@hooks.on('after_transition', targets='farewell')\ndef wait(**_):\n    raise Break('a person signs off')\n"
    )
    bye = {"transition": {"target_state": "farewell", "context_update": {"user_said_goodbye": True}}, "message": "Bye!"}
    card = score(course(folder / "small_talk.json"), ScriptedLLM([bye]))
    assert card.paused and card.end == "farewell" and len(card.turns) == 2
    script = tmp_path / "bye.json"
    script.write_text(json.dumps({"replies": [bye]}))
    out = tmp_path / "card.json"
    result = runner.invoke(
        app, ["eval", str(folder / "small_talk.json"), "-m", f"scripted:{script}", "--json", str(out)],
        env={"COLUMNS": "250"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "small_talk: 1/5 turns reached (the conversation paused in farewell after 2 turns)" in result.stderr
    played = json.loads(out.read_text())["runs"][0]["courses"][0]
    assert played["paused"] is True and played["end"] == "farewell"


def test_a_failing_model_stops_the_course_with_the_reason():
    card = score(course(EXAMPLES / "quiz.json"), ScriptedLLM([LLMUnavailableError("down")]))  # quiz opens by itself
    assert len(card.turns) == 2 and card.turns[1].error == "down" and summary([card])["errors"] == 1


def test_a_definition_without_a_script_has_no_course(tmp_path):
    (tmp_path / "x.json").write_text((EXAMPLES / "quiz.json").read_text())
    with pytest.raises(FSMError, match="x.json: no course"):
        course(tmp_path / "x.json")


def test_eval_prints_the_card_and_writes_json(tmp_path):
    out = tmp_path / "card.json"
    model = f"scripted:{EXAMPLES / 'scripts' / 'quiz.json'}"
    result = runner.invoke(
        app, ["eval", str(EXAMPLES / "quiz.json"), "-m", model, "--json", str(out), "--repeat", "2"],
        env={"COLUMNS": "250"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "run 2: quiz: 5/5 turns reached" in result.stderr and "5.0/5 (100%)" in result.stdout
    card = json.loads(out.read_text())
    assert len(card["runs"]) == 2 and card["runs"][0]["overall"]["reached_rate"] == 1.0
    assert card["runs"][1]["courses"][0]["turns"][0]["expected"] == "intro"
    assert "values overwritten" in result.stdout and card["runs"][0]["overall"]["overwritten_values"] == 0


def test_eval_with_a_tool_example_uses_its_hooks_and_reports_failures_in_one_line(tmp_path):
    model = f"scripted:{EXAMPLES / 'scripts' / 'restaurant_booking.json'}"
    result = runner.invoke(
        app, ["eval", str(EXAMPLES / "restaurant_booking.json"), "-m", model], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    assert "turns reached" in result.stdout and "Traceback" not in result.output
    bare = runner.invoke(app, ["eval", str(EXAMPLES / "quiz.json")], env={"LLM_FSM_MODEL": ""})
    assert bare.exit_code == 2 and "eval needs a model" in bare.stderr


def course_dir(tmp_path, lines: bytes | str, replies_json: object):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "quiz.json").write_text((EXAMPLES / "quiz.json").read_text())
    target = tmp_path / "scripts" / "quiz.txt"
    target.write_bytes(lines) if isinstance(lines, bytes) else target.write_text(lines)
    (tmp_path / "scripts" / "quiz.json").write_text(json.dumps(replies_json))
    return tmp_path / "quiz.json"


@pytest.mark.parametrize(
    ("lines", "replies_of", "says"),
    [
        (b"caf\xe9\n", "quiz", "cannot read the user's lines"),
        ("\n\n", "quiz", "no user lines"),
        ("Sure, let's go!\nSydney?\n", "few", "the replies end before quiz.txt does"),
        # the reply at fault is named, with what was refused of it
        ("Sure, let's go!\n", "refused", "the scripted reply to line 1 of quiz.txt, in state 'intro', is refused"),
        # blank lines are skipped, and the line named is the file's; an editor's byte order mark is no text
        ("\ufeff\n\nSure, let's go!\n", "refused", "the scripted reply to line 3 of quiz.txt"),
        (b"caf\xe9\n", "quiz", "byte 0xE9 at 1:4"),
        (b"\xef\xbb\xbfok\n\nbad \xff\n", "quiz", "byte 0xFF at 3:5"),  # placed in the file, its mark counted
        ("Sure, let's go!\n", "broken", "is not a reply script"),
    ],
)
def test_a_course_that_cannot_be_trusted_is_an_error_naming_its_file(tmp_path, lines, replies_of, says):
    nowhere = {"transition": {"target_state": "nowhere", "context_update": {}}, "message": "?"}
    script = {
        "quiz": replies("quiz"),
        # quiz writes its own opening: the scripts hold no reply for it
        "few": replies("quiz")[:1],
        "refused": [nowhere, nowhere, nowhere],
        "broken": None,
    }[replies_of]
    path = course_dir(tmp_path, lines, {"replies": script})
    if script is None:
        (tmp_path / "scripts" / "quiz.json").write_text("{not json")
    result = runner.invoke(app, ["eval", str(path), "-m", f"scripted:{EXAMPLES / 'scripts' / 'quiz.json'}"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert says in result.stderr and "quiz" in result.stderr


def test_eval_exits_1_when_a_model_call_failed_after_printing_the_card():
    result = runner.invoke(
        app, ["eval", str(EXAMPLES / "quiz.json"), "-m", "openai/x", "--api-base", "http://127.0.0.1:9/v1",
              "--api-key", "none", "--max-retries", "0", "--timeout", "5"],
        env={"COLUMNS": "250"},
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "model call failed: 1" in result.stdout and "1 model call(s) failed" in result.stderr


def test_the_card_counts_messages_a_person_could_not_use():
    quiz = course(EXAMPLES / "quiz.json")
    scripted = replies("quiz")
    clean = summary([score(quiz, ScriptedLLM(scripted))])
    assert (clean["repeated_messages"], clean["looping_messages"], clean["copied_messages"]) == (0, 0, 0)
    bad = [dict(r) for r in scripted]
    bad[1]["message"] = bad[0]["message"].upper() + "!!"  # the same words again
    bad[2]["message"] = "I'm a simple AI. I'm a simple AI. I'm a simple AI. I'm a simple AI."
    # the runtime's rules, from the prompt: not the definition's words for the user (its instructions are)
    bad[3]["message"] = "Sure. Collect the information this state needs; ask for what is missing, one by one."
    card = score(quiz, ScriptedLLM(bad))
    figures = summary([card])
    assert (figures["repeated_messages"], figures["looping_messages"], figures["copied_messages"]) == (1, 1, 1)
    # and each turn says what was wrong with its message
    assert [t.unusable for t in card.turns[2:5]] == [["repeated"], ["looping"], ["copied"]]


def test_the_card_counts_collected_values_the_model_overwrote_where_the_script_kept_them():
    bike = course(ROOT / "benchmarks" / "unseen4" / "bike_repair_booking.json")
    scripted = json.loads((ROOT / "benchmarks" / "unseen4" / "scripts" / "bike_repair_booking.json").read_text())
    # the script's own correction (the date moved to Friday the 13th) is the course's, not an overwrite
    assert bike.changed[6] == {"service_date"}
    assert summary([score(bike, ScriptedLLM(scripted))])["overwritten_values"] == 0
    rewrote = [json.loads(json.dumps(reply)) for reply in scripted]
    rewrote[6]["transition"]["context_update"]["vehicle_model"] = "thats"  # a span of "yep thats all correct"
    card = score(bike, ScriptedLLM(rewrote))
    assert [t.overwrote for t in card.turns] == [[]] * 7 + [["vehicle_model"]]
    assert summary([card])["overwritten_values"] == 1


TABLE = {
    "name": "table", "description": "Book a table.", "initial_state": "collect",
    "states": {
        "collect": {
            "purpose": "Get the name and the day.", "opening": "Hi! Your name and the day?",
            "required_context_keys": ["name", "day"],
            "transitions": [{"target_state": "confirm", "description": "both known",
                             "conditions": [{"description": "known", "requires_context_keys": ["name", "day"]}]}],
        },
        "confirm": {
            "purpose": "Read back and confirm.", "required_context_keys": ["confirmed"],
            "transitions": [{"target_state": "done", "description": "confirmed",
                             "conditions": [{"description": "yes", "logic": {"==": [{"var": "confirmed"}, True]}}]}],
        },
        "done": {"purpose": "Say goodbye."},
    },
}  # fmt: skip


def table_reply(target: str, message: str = "Ok.", **update: object) -> dict:
    return {"transition": {"target_state": target, "context_update": update}, "message": message}


def table_course(folder, **changes: object):
    (folder / "scripts").mkdir(parents=True)
    (folder / "table.json").write_text(json.dumps({**TABLE, **changes}))
    (folder / "scripts" / "table.txt").write_text("I'm Ann\nthursday please\nyep thats all correct\n")
    script = [
        table_reply("collect", name="Ann"),
        table_reply("confirm", day="thursday"),
        table_reply("done", confirmed=True),
    ]
    (folder / "scripts" / "table.json").write_text(json.dumps(script))
    return course(folder / "table.json"), script


def test_an_overwrite_counts_without_corrections_and_a_value_the_script_sets_there_does_not(tmp_path):
    # no `corrections`: "collect" may write the name it asks for, and a model that rewrites it is counted all
    # the same
    table, script = table_course(tmp_path / "plain")
    rewrote = [script[0], table_reply("confirm", day="thursday", name="thursday"), script[2]]
    assert [t.overwrote for t in score(table, ScriptedLLM(rewrote)).turns] == [[], [], ["name"], []]
    # a day the model guessed a turn early and corrected once the user gave it: the turn where the script sets it
    table, script = table_course(tmp_path / "fixable", corrections=True)
    guessed = [table_reply("collect", name="Ann", day="monday"), *script[1:]]
    card = score(table, ScriptedLLM(guessed))
    assert card.turns[2].state == "confirm" and card.turns[2].rejected == [] and card.finished
    assert [t.overwrote for t in card.turns] == [[]] * 4


def test_loops_and_copies_need_a_real_run_of_words():
    from llm_fsm.testing.message_quality import counts, loops

    assert loops("no no no") and loops("ok, I see. ok, I see. ok, I see.") and not loops("one two one two three")
    prose = frozenset({tuple(["ask", "the", "user", "for", "their", "full", "name", "and"])})
    said = ["Please ask the user for their full name and then stop", "ask the user for their name"]
    assert counts(said, prose) == {
        "repeated_messages": 0, "looping_messages": 0, "copied_messages": 1, "echoed_messages": 0,
    }  # fmt: skip


def test_a_message_that_says_the_users_message_back_is_echoed_and_a_read_back_is_not():
    from llm_fsm.testing.message_quality import counts, echoes

    user = "hallo, hatte gestern so nen zettel im briefkasten, die nummer is pf 4471 9902 de"
    assert echoes("nen zettel im briefkasten, die nummer is pf 4471 9902 de", user)
    assert echoes("Tuesday 5.45 is fine!", "yes tuesday 5.45 is fine")
    assert echoes("Yes, book it!", "yes, book it")  # short, but nothing of its own
    # quoting the values with a word of its own: a read-back, a person can use it
    assert not echoes("Thanks! So the number is PF 4471 9902 DE. When should we come again?", user)
    assert not echoes("PF 4471 9902 DE, correct?", user)
    assert not echoes("Noted: ana.torres@example.com.", "ana.torres@example.com")
    table = "I'd like a table for four people on Friday at 8 pm"
    assert not echoes("Table for four people on Friday at 8 pm, correct?", table)
    assert not echoes("Sydney?", "Sydney?")  # one word: too short to tell
    said = ["Got it. Which day?", "yes tuesday 5.45 is fine"]
    assert counts(said, frozenset(), [None, "yes tuesday 5.45 is fine"])["echoed_messages"] == 1
    assert counts(said, frozenset(), ["yes tuesday 5.45 is fine", None])["echoed_messages"] == 0


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.json")))
def test_the_hand_written_conversations_have_no_unusable_message(name):
    # no false alarm: a quiz's questions, a read-back of what the user said, are the definition's words to say
    figures = summary([score(course(EXAMPLES / f"{name}.json"), ScriptedLLM(replies(name)))])
    assert (figures["repeated_messages"], figures["looping_messages"], figures["copied_messages"]) == (0, 0, 0)
    assert figures["echoed_messages"] == 0


def test_eval_with_the_bare_scripted_model_plays_each_course_with_its_own_replies(tmp_path):
    # a folder checked offline: each course's scripts/NAME.json, not one file for all
    for name in ("quiz", "small_talk"):
        (tmp_path / f"{name}.json").write_text((EXAMPLES / f"{name}.json").read_text())
    (tmp_path / "scripts").mkdir()
    for name, ext in [(n, e) for n in ("quiz", "small_talk") for e in ("txt", "json")]:
        (tmp_path / "scripts" / f"{name}.{ext}").write_text((EXAMPLES / "scripts" / f"{name}.{ext}").read_text())
    result = runner.invoke(app, ["eval", str(tmp_path), "-m", "scripted"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "quiz: 5/5 turns reached" in result.stderr and "small_talk: 5/5 turns reached" in result.stderr


def test_the_bare_scripted_model_outside_eval_asks_for_its_file():
    for model in ("scripted", "scripted:"):
        result = runner.invoke(app, ["run", str(EXAMPLES / "quiz.json"), "-m", model])
        assert result.exit_code == 2 and "--model scripted needs its replies: scripted:FILE" in result.output


def test_each_turn_of_the_card_says_why_its_replies_were_refused():
    quiz = course(EXAMPLES / "quiz.json")
    nowhere = {"transition": {"target_state": "nowhere", "context_update": {}}, "message": "?"}
    card = score(quiz, ScriptedLLM([nowhere, *replies("quiz")]))  # quiz opens by itself: the first line refused once
    turn = card.turns[1]
    assert turn.rejected == ["target"] and len(turn.reasons) == 1 and "nowhere" in turn.reasons[0]


@pytest.mark.parametrize(
    "path", sorted(ROOT.glob("benchmarks/unseen*/*.json")), ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_every_measured_definitions_course_plays_offline_with_its_own_replies(path):
    # the real-model figures of benchmarks/REAL_MODEL.md are over these courses: each one must be playable
    played = course(path)
    card = score(played, played.scripted())
    assert summary([card])["reached_rate"] == 1.0 and card.finished


def test_eval_offers_no_simulated_model_and_says_where_a_course_s_tools_were_looked_for(tmp_path):
    help_text = runner.invoke(app, ["eval", "--help"], env={"COLUMNS": "250"}).stdout
    assert "scripted:FILE" in help_text and "simulated" not in help_text  # eval refuses it: not offered
    (tmp_path / "scripts").mkdir()
    (tmp_path / "restaurant_booking.json").write_text((EXAMPLES / "restaurant_booking.json").read_text())
    for ext in ("txt", "json"):
        script = EXAMPLES / "scripts" / f"restaurant_booking.{ext}"
        (tmp_path / "scripts" / script.name).write_text(script.read_text())
    module = tmp_path / "hooks" / "restaurant_booking.py"
    result = runner.invoke(app, ["eval", str(tmp_path), "-m", "scripted"], env={"COLUMNS": "250"})
    assert result.exit_code == 2 and f"no {module}" in result.stderr and "check_availability" in result.stderr
    module.parent.mkdir()
    module.write_text("from llm_fsm import Hooks\nhooks = Hooks()\n")
    result = runner.invoke(app, ["eval", str(tmp_path), "-m", "scripted"], env={"COLUMNS": "250"})
    assert result.exit_code == 2 and f"{module}, which registers none of that name" in result.stderr


def test_eval_keeps_what_it_reads_and_says_what_it_passes_over(tmp_path, monkeypatch):
    from llm_fsm.cli import evaluate

    folder = tmp_path / "defs"
    (folder / "scripts").mkdir(parents=True)
    for name in ("quiz", "small_talk"):
        (folder / f"{name}.json").write_text((EXAMPLES / f"{name}.json").read_text())
        for ext in ("txt", "json"):
            (folder / "scripts" / f"{name}.{ext}").write_text((EXAMPLES / "scripts" / f"{name}.{ext}").read_text())
    lines = folder / "scripts" / "small_talk.txt"
    lines.write_text(lines.read_text() + "Still there?\n\nHello?\n")  # after the farewell: never played
    # no file the courses are made of is replaced, however it is reached (a hard link, a subflow, replies)
    linked = tmp_path / "linked.json"
    linked.hardlink_to(folder / "scripts" / "quiz.json")
    for own in (folder / "quiz.json", folder / "scripts" / "small_talk.json", linked):
        before = own.read_text()
        result = runner.invoke(app, ["eval", str(folder), "-m", "scripted", "--json", str(own)])
        assert result.exit_code == 2 and "is not a scorecard eval wrote" in result.stderr and own.read_text() == before
    card = folder / "card.json"  # a scorecard saved beside the definitions is no definition on the next run
    for _ in range(2):
        result = runner.invoke(app, ["eval", str(folder), "-m", "scripted", "--json", str(card)])
        assert result.exit_code == 0, result.output
    assert "card.json: no course" in result.stderr and "passed over" in result.stderr
    assert "lines 5, 7 of small_talk.txt are never played (the scripted run ended in 'farewell')" in result.stderr
    # named on its own, a file must be a course, wherever it comes among the paths
    result = runner.invoke(app, ["eval", str(folder), str(card), "-m", "scripted"])
    assert result.exit_code == 2 and "card.json" in result.stderr and "passed over" not in result.stderr
    result = runner.invoke(app, ["eval", str(folder / "quiz.json"), "-m", "scripted:"])
    assert result.exit_code == 2 and "or scripted alone for each course's own" in result.stderr
    # every broken course is named at once, not one per run
    for name in ("broken_a", "broken_b"):
        (folder / f"{name}.json").write_text('{"name": ')
        for ext in ("txt", "json"):
            (folder / "scripts" / f"{name}.{ext}").write_text((EXAMPLES / "scripts" / f"quiz.{ext}").read_text())
    result = runner.invoke(app, ["eval", str(folder), "-m", "scripted"])
    assert result.exit_code == 2 and "broken_a.json" in result.stderr and "broken_b.json" in result.stderr
    for name in ("broken_a", "broken_b"):
        (folder / f"{name}.json").unlink()
    # the card's file is written before the table, which may go to a pipe that closes early
    monkeypatch.setattr(evaluate, "_print", lambda runs: (_ for _ in ()).throw(BrokenPipeError()))
    out = tmp_path / "new" / "card.json"
    runner.invoke(app, ["eval", str(folder), "-m", "scripted", "--json", str(out)])
    assert json.loads(out.read_text())["runs"][0]["overall"]["reached"] > 0
    result = runner.invoke(app, ["eval", str(folder), "-m", "scripted", "--scripts", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such folder" in result.stderr
