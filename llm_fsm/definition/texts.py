"""The words the runtime itself says to a conversation's users, in the definition's language.

Most of what a user reads is the model's message. Four texts are the runtime's own: the **fallback** (a turn found
no valid reply), the **pause** (a handler paused the turn without a message of its own), the **approval** (a tool
call waits for a person) and **step_failed**, the fallback of a state that acts on its own (nobody is there to ask
for more: the run stops at it, see :mod:`llm_fsm.running`). A definition sets its ``language`` and, optionally,
its own ``texts``; each text is the definition's own, else the built-in one in its language (English, Spanish,
German, French, Italian, Portuguese, Dutch), else the English one. ``language`` also goes into the prompt, which
asks the model to write its messages in it. The built-in languages' yes and no (:func:`yes_or_no`) are what a
person may answer ``chat``'s approval of a tool call with, besides English's.
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from llm_fsm.definition.models import FSMDefinition

TextName = Literal["fallback", "pause", "approval", "step_failed"]
TEXT_NAMES: tuple[TextName, ...] = ("fallback", "pause", "approval", "step_failed")

# the built-in texts, by the language's two-letter code
BUILT_IN: dict[str, dict[TextName, str]] = {
    "en": {
        "fallback": "Sorry, I couldn't take that step yet. Could you tell me a bit more?",
        "pause": "One moment, please: this needs to be checked before we continue.",
        "approval": "One moment, please: a person has to approve this step before I can go on.",
        "step_failed": "This step could not be finished: no valid answer came within its retries. It can be run again.",
    },
    "es": {
        "fallback": "Lo siento, todavía no he podido dar ese paso. ¿Podría contarme un poco más?",
        "pause": "Un momento, por favor: hay que comprobar esto antes de continuar.",
        "approval": "Un momento, por favor: una persona tiene que aprobar este paso antes de que pueda seguir.",
        "step_failed": (
            "Este paso no se ha podido terminar: "
            "no llegó una respuesta válida dentro de sus reintentos. Se puede volver a ejecutar."
        ),
    },
    "de": {
        "fallback": "Entschuldigung, diesen Schritt konnte ich noch nicht machen. Können Sie mir etwas mehr sagen?",
        "pause": "Einen Moment bitte: Das muss geprüft werden, bevor wir weitermachen.",
        "approval": "Einen Moment bitte: Eine Person muss diesen Schritt freigeben, bevor ich weitermachen kann.",
        "step_failed": (
            "Dieser Schritt konnte nicht abgeschlossen werden: "
            "Innerhalb seiner Versuche kam keine gültige Antwort. Er kann erneut ausgeführt werden."
        ),
    },
    "fr": {
        "fallback": "Désolé, je n'ai pas encore pu franchir cette étape. Pourriez-vous m'en dire un peu plus ?",
        "pause": "Un instant, s'il vous plaît : cela doit être vérifié avant de continuer.",
        "approval": "Un instant, s'il vous plaît : une personne doit approuver cette étape avant que je continue.",
        "step_failed": (
            "Cette étape n'a pas pu être terminée : "
            "aucune réponse valide n'est venue dans ses essais. Elle peut être relancée."
        ),
    },
    "it": {
        "fallback": "Mi dispiace, non sono ancora riuscito a fare questo passo. Può dirmi qualcosa in più?",
        "pause": "Un momento, per favore: questo va verificato prima di continuare.",
        "approval": "Un momento, per favore: una persona deve approvare questo passo prima che io possa proseguire.",
        "step_failed": (
            "Questo passo non è stato completato: "
            "nessuna risposta valida è arrivata entro i suoi tentativi. Si può eseguire di nuovo."
        ),
    },
    "pt": {
        "fallback": "Desculpe, ainda não consegui dar esse passo. Pode contar-me um pouco mais?",
        "pause": "Um momento, por favor: isto precisa de ser verificado antes de continuarmos.",
        "approval": "Um momento, por favor: uma pessoa tem de aprovar este passo antes de eu poder continuar.",
        "step_failed": (
            "Este passo não pôde ser concluído: "
            "não chegou uma resposta válida dentro das suas tentativas. Pode ser executado de novo."
        ),
    },
    "nl": {
        "fallback": "Sorry, die stap kon ik nog niet zetten. Kunt u me iets meer vertellen?",
        "pause": "Een moment alstublieft: dit moet worden gecontroleerd voordat we verdergaan.",
        "approval": "Een moment alstublieft: iemand moet deze stap goedkeuren voordat ik verder kan.",
        "step_failed": (
            "Deze stap kon niet worden afgerond: "
            "binnen de pogingen kwam er geen geldig antwoord. Hij kan opnieuw worden uitgevoerd."
        ),
    },
}

# the languages' names, in English (as the prompt names them) and in themselves (as authors may write them)
NAMES: dict[str, tuple[str, ...]] = {
    "en": ("English", "eng"),
    "es": ("Spanish", "español", "espanol", "castellano", "spa"),
    "de": ("German", "Deutsch", "deu", "ger"),
    "fr": ("French", "français", "francais", "fra", "fre"),
    "it": ("Italian", "italiano", "ita"),
    "pt": ("Portuguese", "português", "portugues", "por"),
    "nl": ("Dutch", "Nederlands", "Vlaams", "nld", "dut"),
}
_BY_NAME = {name.casefold(): code for code, names in NAMES.items() for name in names}

# the words a person answers a yes-or-no question with (a tool call's approval in ``chat``), the full ones
# first; the English ones are taken in every language, and accents may be left out ("si", "nao")
ANSWERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "en": (("yes", "y"), ("no", "n")),
    "es": (("sí", "s"), ("no",)),
    "de": (("ja", "j"), ("nein",)),
    "fr": (("oui", "o"), ("non",)),
    "it": (("sì", "s"), ("no",)),
    "pt": (("sim", "s"), ("não",)),
    "nl": (("ja", "j"), ("nee",)),
}


def language_code(language: str) -> str | None:
    """The built-in language ``language`` names: a tag (``"es"``, ``"de-CH"``, ``"pt_BR"``, ``"deu"``) or a
    name (``"Spanish"``, ``"Deutsch"``, ``"Dutch (Belgium)"``), in any case; None for any other."""
    text = language.split("(")[0].strip()  # "Dutch (Belgium)": the language before the region
    code = text.replace("_", "-").split("-")[0].casefold()
    if code in BUILT_IN:
        return code
    return _BY_NAME.get(text.casefold())


def language_name(language: str) -> str:
    """How the prompt names ``language``: the English name of a built-in one, with the region the author
    gave (``"Portuguese (pt-BR)"``, ``"German (Schweiz)"``), else the author's words."""
    text = language.strip()
    code = language_code(text)
    if code is None:
        return text
    name, base = NAMES[code][0], text.split("(")[0].strip()
    if base.casefold() in (code, *(n.casefold() for n in NAMES[code])):  # "Deutsch (Schweiz)": "German (Schweiz)"
        return f"{name} {text[len(base) :].strip()}".strip()
    return f"{name} ({text})"  # a regional tag: "German (de-CH)"


def missing_texts(definition: FSMDefinition) -> list[TextName]:
    """The texts a definition in a language without built-in texts leaves in English (none when its
    language is built in, or English, or unset)."""
    if not definition.language.strip() or language_code(definition.language) is not None:
        return []
    own = definition.texts
    acting = any(state.acts for state in definition.states.values())  # only a state that acts says step_failed
    used = [name for name in TEXT_NAMES if acting or name != "step_failed"]
    return [name for name in used if own is None or getattr(own, name) is None]


def runtime_text(definition: FSMDefinition, name: TextName) -> str:
    """The text ``name`` as ``definition``'s users read it: its own, else the built-in one in its language,
    else the English one."""
    own = definition.texts
    if own is not None and getattr(own, name) is not None:
        text: str = getattr(own, name)
        return text
    return BUILT_IN[_built_in_language(definition)][name]


def yes_no_choices(definition: FSMDefinition) -> str:
    """The answers a yes-or-no question offers in ``definition``'s language: ``"y/n"``, and the language's
    own words after them when it has others (``"y/n, sì/no"``)."""
    yes, no = ANSWERS[_built_in_language(definition)]
    return "y/n" if yes == ANSWERS["en"][0] else f"y/n, {yes[0]}/{no[0]}"


def yes_or_no(definition: FSMDefinition, answer: str) -> bool | None:
    """Whether ``answer`` says yes (True) or no (False), in English or ``definition``'s language, in any
    case and with or without accents; None for any other answer."""
    word = _plain(answer)
    for said, words in ((True, 0), (False, 1)):
        accepted = {*ANSWERS["en"][words], *ANSWERS[_built_in_language(definition)][words]}
        if word in {_plain(known) for known in accepted}:
            return said
    return None


def _built_in_language(definition: FSMDefinition) -> str:
    """The built-in language whose words ``definition``'s users read: its language's, else English."""
    return (language_code(definition.language) if definition.language else None) or "en"


def _plain(text: str) -> str:
    """``text`` trimmed, casefolded and without its accents ("Sì" is "si")."""
    decomposed = unicodedata.normalize("NFKD", text.strip().casefold())
    return "".join(char for char in decomposed if not unicodedata.combining(char))
