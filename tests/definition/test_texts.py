"""Bots in any language: a definition's ``language`` reaches the prompt, and the runtime's own words (the
fallback, a pause, an approval) are said in it, or in the definition's own ``texts``."""

from __future__ import annotations

import copy
import json
import warnings

import pytest

import llm_fsm
from llm_fsm import Hooks
from llm_fsm.definition.loader import DefinitionWarning
from llm_fsm.definition.texts import (
    ANSWERS,
    BUILT_IN,
    language_code,
    language_name,
    runtime_text,
    yes_no_choices,
    yes_or_no,
)
from llm_fsm.errors import DefinitionError
from llm_fsm.testing import ScriptedLLM, reply, tool_calls
from tests.conftest import ROOT
from tests.tools.test_tools import SUPPORT, make_hooks

CITA = {
    "name": "cita",
    "language": "es",
    "initial_state": "pedir_nombre",
    "states": {
        "pedir_nombre": {
            "purpose": "Pedir el nombre",
            "required_context_keys": ["nombre"],
            "transitions": [{"target_state": "fin", "conditions": [{"requires_context_keys": ["nombre"]}]}],
        },
        "fin": {"purpose": "Despedirse"},
    },
}
BAD = {"transition": {"target_state": "nowhere", "context_update": {}}, "message": "??"}


def load(data: dict, **changes) -> llm_fsm.FSMDefinition:
    return llm_fsm.load({**copy.deepcopy(data), **changes})


def test_the_prompt_asks_for_the_definitions_language():
    llm = ScriptedLLM([reply("pedir_nombre", "¿Cómo te llamas?")])
    llm_fsm.Conversation(load(CITA), llm).start()
    assert '<language>Write every "message" in Spanish.</language>' in llm.requests[0].messages[0]["content"]
    english = ScriptedLLM([reply("pedir_nombre", "Name?")])
    llm_fsm.Conversation(load(CITA, language=""), english).start()
    assert "<language>" not in english.requests[0].messages[0]["content"]


@pytest.mark.parametrize("order", ["recency", "cache"])
def test_a_regional_or_unknown_language_is_named_as_the_author_wrote_it(order):
    for language, said in (
        ("pt-BR", "Portuguese (pt-BR)"),
        ("Deutsch (Schweiz)", "German (Schweiz)"),
        ("Kiswahili", "Kiswahili"),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DefinitionWarning)
            definition = load(CITA, language=language)
        llm = ScriptedLLM([reply("pedir_nombre", "...")])
        llm_fsm.Conversation(definition, llm, prompt_order=order).start()
        assert f"in {said}.</language>" in llm.requests[0].messages[0]["content"]


def test_the_fallback_is_said_in_the_definitions_language():
    conversation = llm_fsm.Conversation(load(CITA), ScriptedLLM([BAD, BAD]))
    result = conversation.send("hola")
    assert result.fallback and result.message == BUILT_IN["es"]["fallback"]
    assert result.state == "pedir_nombre" and result.context == {}


def test_a_definitions_own_texts_win_and_the_callers_fallback_wins_over_both():
    own = load(CITA, texts={"fallback": "Perdona, ¿me lo repites?"})
    assert llm_fsm.Conversation(own, ScriptedLLM([BAD, BAD])).send("hola").message == "Perdona, ¿me lo repites?"
    caller = llm_fsm.Conversation(own, ScriptedLLM([BAD, BAD]), fallback_message="Otra vez, por favor.")
    assert caller.send("hola").message == "Otra vez, por favor."
    assert runtime_text(own, "pause") == BUILT_IN["es"]["pause"]  # the texts it does not set stay built in


def test_a_pause_without_a_message_of_its_own_is_said_in_the_definitions_language():
    hooks = Hooks()

    @hooks.on("before_transition", targets=["fin"])
    def review(**_):
        raise llm_fsm.Break("revisar")

    move = reply("fin", "¡Adiós, Ana!", nombre="Ana")
    conversation = llm_fsm.Conversation(load(CITA), ScriptedLLM([move, move]), hooks=hooks)
    paused = conversation.send("Soy Ana")
    assert paused.paused and paused.message == BUILT_IN["es"]["pause"]
    assert conversation.resume(paused.pending.token, {}).state == "fin"


def test_an_approval_is_asked_in_the_definitions_language():
    support = load(SUPPORT, language="de")
    script = [reply("ask", "Ihre Bestellnummer?"), tool_calls(("refund", {"order_id": "A-17"}))]
    conversation = llm_fsm.Conversation(support, ScriptedLLM(script), hooks=make_hooks())
    conversation.start()
    paused = conversation.send("Erstatten Sie A-17")
    assert paused.paused and paused.pending.kind == "tool_approval"
    assert paused.message == BUILT_IN["de"]["approval"]


def test_a_language_without_built_in_texts_warns_until_the_definition_says_them():
    with pytest.warns(DefinitionWarning, match=r"no built-in texts in 'Kiswahili'.*fallback, pause, approval"):
        load(CITA, language="Kiswahili")
    with pytest.warns(DefinitionWarning, match=r"'Kiswahili'.*approval message"):
        load(CITA, language="Kiswahili", texts={"fallback": "Samahani?", "pause": "Subiri kidogo."})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        texts = {"fallback": "Samahani?", "pause": "Subiri kidogo.", "approval": "Mtu anahitaji kuidhinisha."}
        definition = load(CITA, language="Kiswahili", texts=texts)
        load(CITA, language="Español")  # built in, named in itself
    assert runtime_text(definition, "approval") == "Mtu anahitaji kuidhinisha."


@pytest.mark.parametrize(
    ("texts", "where"),
    [({"falback": "x"}, "texts.falback"), ({"pause": ""}, "texts.pause"), ("hola", "texts")],
)
def test_bad_texts_are_refused_with_where_and_what(texts, where, tmp_path):
    path = tmp_path / "cita.json"
    path.write_text(json.dumps({**CITA, "texts": texts}, indent=1), encoding="utf-8")
    with pytest.raises(DefinitionError) as caught:
        llm_fsm.load(path)
    problem = next(p for p in caught.value.problems if p.path.startswith("texts"))
    assert problem.path == where and problem.line is not None  # file:line:col, as every problem of a file


def test_language_names_and_tags():
    assert [language_code(x) for x in ("es", "ES", "es-MX", "pt_BR", "Spanish", "français", "tlh")] == [
        "es", "es", "es", "pt", "es", "fr", None,
    ]  # fmt: skip
    assert (language_name("de"), language_name("German"), language_name("de-CH")) == (
        "German",
        "German",
        "German (de-CH)",
    )


def test_a_definition_without_a_language_keeps_its_hash_and_outline():
    # the two fields are left out of the hashes while unset: stored conversations keep matching their definition
    plain, spanish = load(CITA, language=""), load(CITA)
    assert plain.content_hash == llm_fsm.load({k: v for k, v in CITA.items() if k != "language"}).content_hash
    assert plain.content_hash != spanish.content_hash
    assert spanish.changes_since(plain.outline, prose=False) == []  # a language is words, not structure
    assert spanish.changes_since(plain.outline) != []


def test_blank_or_invisible_texts_are_refused(tmp_path):
    for text in ("   ", "\u200b", "\u00ad\n"):
        with pytest.raises(DefinitionError, match="nothing visible"):
            load(CITA, texts={"fallback": text})


def test_a_shared_sub_definition_speaks_the_language_of_the_conversation_that_runs_it(tmp_path):
    import shutil

    for part in ("insurance_claim.json", "subflows", "hooks"):
        source = ROOT / "fsm_definitions" / part
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / part)
    path = tmp_path / "insurance_claim.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**data, "language": "de", "texts": {"fallback": "Bitte noch einmal."}}), "utf-8")
    script = json.loads((ROOT / "fsm_definitions" / "scripts" / "insurance_claim.json").read_text())["replies"]
    lines = (ROOT / "fsm_definitions" / "scripts" / "insurance_claim.txt").read_text().splitlines()
    llm = ScriptedLLM([script[0], BAD, BAD])
    conversation = llm_fsm.Conversation(llm_fsm.load(path), llm, prompt_order="cache")
    conversation.start()
    assert conversation.send(lines[0]).state == "identity"  # the sub-conversation talks
    result = conversation.send("Warum?")
    assert result.fallback and result.message == "Bitte noch einmal."  # the parent's own text
    sub_prompt = llm.requests[-1].messages[0]["content"]
    assert '"identity_check"' in sub_prompt and "in German.</language>" in sub_prompt
    assert (
        runtime_text(conversation.definition.subflow_definitions["subflows/identity_check.json"], "fallback")
        == (
            BUILT_IN["en"]["fallback"]  # the shared file itself is unchanged
        )
    )


@pytest.mark.parametrize(
    ("language", "answer", "said"),
    [
        ("it", "sì", True), ("it", " Si ", True), ("it", "SÌ", True), ("it", "no", False),
        ("fr", "oui", True), ("fr", "o", True), ("fr", "Non", False),
        ("es", "sí", True), ("es", "si", True), ("es", "no", False),
        ("de", "ja", True), ("de", "j", True), ("de", "nein", False),
        ("pt", "sim", True), ("pt", "não", False), ("pt", "nao", False),
        ("nl", "ja", True), ("nl", "nee", False),
        ("Italiano", "sì", True), ("it", "yes", True), ("de", "n", False),  # English is taken in every language
        ("", "sì", None), ("en", "ja", None), ("de", "oui", None), ("it", "forse", None), ("it", "", None),
    ],
)  # fmt: skip
def test_a_yes_or_no_is_read_in_english_and_the_definitions_language(language: str, answer: str, said: bool | None):
    assert yes_or_no(load(CITA, language=language), answer) is said


def test_every_built_in_language_has_its_yes_and_no_and_the_prompt_offers_them():
    assert set(ANSWERS) == set(BUILT_IN)
    assert yes_no_choices(load(CITA, language="it")) == "y/n, sì/no"
    assert yes_no_choices(load(CITA, language="fr")) == "y/n, oui/non"
    assert yes_no_choices(load(CITA, language="English")) == yes_no_choices(load(CITA, language="")) == "y/n"
