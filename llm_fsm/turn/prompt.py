"""Compile the current state, context and history into the messages of one model call.

Templates live in ``prompts/`` and render in a sandboxed, immutable Jinja environment with
``StrictUndefined`` and autoescaping: every value that comes from a user or a model is escaped, so
it can never open or close a prompt element. A user template directory overrides single templates.

The system prompt runs from the most stable part to the least: what depends only on the definition, then
the current state, then the context and the history, which change every turn. Two orders place the reply
rules (:data:`PromptOrder`): ``"recency"`` right after the state, where a small model follows them, and
``"cache"`` before anything that depends on the state, with a map of the states, so that a change of state
keeps most of the prompt as a provider's prompt cache saw it; there (but in a guided prompt) they open the
prompt, before the task's line that names the definition, so that a call of another definition (a
sub-conversation's) keeps them too. The user's message is sent once, as the user turn.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from llm_fsm.definition.models import RETURN
from llm_fsm.definition.parts import GlobalTransition, Transition
from llm_fsm.definition.reply_schema import writable_keys
from llm_fsm.definition.texts import language_name
from llm_fsm.errors import PromptError
from llm_fsm.llm.protocol import PromptText  # the protocol alone: llm_fsm.llm loads the litellm client module too
from llm_fsm.turn.prompt_calls import CallPrompts, Message

if TYPE_CHECKING:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from llm_fsm.definition.models import FSMDefinition
    from llm_fsm.snapshot import Snapshot
    from llm_fsm.tools.calling import BoundTool

_MAX_KEY_CHARS = 100  # context key names are model-written too: bounded like values
_CACHE_SIZE = 512  # definition-wide, state and tools parts kept
_RECENT_SIZE = 64  # pieces of the turn's part kept (exchanges, history windows, contexts): a few turns' worth

OPENING_REQUEST = "(The conversation begins. Open it as the current state asks.)"

# Where the reply rules go (see the module's docstring): "recency" for models without a prompt cache, small
# local ones above all; "cache" for providers that bill a cached prompt prefix cheaper. A model client says
# which it wants in its ``prompt_order`` (LiteLLMClient chooses by provider); "recency" when it says nothing.
PromptOrder = Literal["recency", "cache"]
PROMPT_ORDERS: tuple[PromptOrder, ...] = ("recency", "cache")


def _templates_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # llm_fsm/
    packaged = package / "prompts"  # inside an installed wheel
    return packaged if packaged.is_dir() else package.parent / "prompts"  # in a source checkout


@cache
def _sandbox() -> type[ImmutableSandboxedEnvironment]:
    """Jinja's immutable sandbox, with two costs of every render taken out (the sandbox stays as strict):

    - a template's globals are a plain dict, not a ChainMap over the environment's: each render copies
      them into its context, and a ChainMap is slow to copy (the environment's never change after start);
    - reading ``user`` or ``assistant`` of a :class:`Said` (our own value: two strings) skips the checks
      that guard attributes of arbitrary objects (several isinstance checks against abstract classes for
      each of them, which a history window makes dozens of times a turn).
    """
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Sandbox(ImmutableSandboxedEnvironment):
        def make_globals(self, d: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
            return {**self.globals, **(d or {})}

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            if type(obj) is Said and attr in Said.__slots__:
                return True
            return bool(super().is_safe_attribute(obj, attr, value))

    return Sandbox


def _escape(value: Any) -> str:
    """Escape what could open or close an element. Quotes stay readable: they cannot break text."""
    if hasattr(value, "__html__"):  # markupsafe.Markup: a fragment a template marked as trusted
        return str(value)
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


class Said:
    """One exchange as a template reads it: ``h.user`` (None in an opening) and ``h.assistant``, or
    ``h["user"]``. Attributes, not a dict: the sandbox reads a dict's ``h.user`` only after a failed
    attribute lookup, which costs an exception per value."""

    __slots__ = ("assistant", "user")

    def __init__(self, user: str | None, assistant: str) -> None:
        self.user = user
        self.assistant = assistant

    def __getitem__(self, key: str) -> str | None:
        if key not in self.__slots__:
            raise KeyError(key)
        value: str | None = getattr(self, key)
        return value

    def as_dict(self) -> dict[str, str | None]:
        return {"user": self.user, "assistant": self.assistant}


@dataclass(frozen=True)
class PromptSettings:
    """How much of the conversation a prompt carries. Every bound keeps prompts flat over time."""

    history_window: int = 6
    max_message_chars: int = 1000
    max_value_chars: int = 500


class PromptBuilder(CallPrompts):
    """Renders prompts; keep one per runtime, since its Jinja environment caches compiled templates."""

    def __init__(
        self, template_dirs: Sequence[str | os.PathLike[str]] = (), settings: PromptSettings | None = None
    ) -> None:
        import jinja2  # imported with the first prompt builder, not with the package
        import markupsafe  # jinja2's

        self.settings = settings or PromptSettings()
        loaders: list[jinja2.BaseLoader] = [jinja2.FileSystemLoader([str(d) for d in template_dirs])]
        loaders.append(jinja2.FileSystemLoader(str(_templates_dir())))
        self.env = _sandbox()(
            loader=jinja2.ChoiceLoader(loaders),
            # Every {{ expression }} goes through _escape (instead of autoescape, which would
            # also turn each quote of the JSON we show the model into &#34;).
            finalize=_escape,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            auto_reload=False,  # templates do not change while a process runs: skip a stat() per render
        )
        self.env.filters["tojson"] = _to_json
        self._template_error = jinja2.TemplateError
        # a piece already rendered (and escaped): the template that puts the pieces together shows it as it is
        self._markup = markupsafe.Markup
        # whether a user template puts the turn's pieces together (else they are joined as the packaged one does)
        self._composer_overridden = any((Path(d) / "system_conversation.xml.j2").is_file() for d in template_dirs)
        self._cache: dict[tuple[Any, ...], str] = {}  # the definition-wide, state and tools parts
        self._recent: dict[tuple[Any, ...], Any] = {}  # pieces of the conversation part, by content
        self._contexts: dict[tuple[str, int], tuple[dict[str, Any], dict[str, Any], Any]] = {}
        self._lock = threading.Lock()

    def messages(
        self,
        definition: FSMDefinition,
        snapshot: Snapshot,
        user_text: str | None,
        *,
        tools: Sequence[BoundTool] = (),
        tool_mode: str = "native",
        guided: bool = False,
        order: PromptOrder = "recency",
    ) -> list[Message]:
        """The messages of a turn: the system prompt, then the user's text (or the opening request).
        ``guided``: the reply is held to a guided schema (see ``llm_fsm.guided.schema``), whose key order it states;
        ``order``: where the reply rules go (:data:`PromptOrder`)."""
        system = self.system_prompt(definition, snapshot, tools=tools, tool_mode=tool_mode, guided=guided, order=order)
        return [{"role": "system", "content": system}, {"role": "user", "content": user_text or OPENING_REQUEST}]

    def system_prompt(
        self,
        definition: FSMDefinition,
        snapshot: Snapshot,
        *,
        tools: Sequence[BoundTool] = (),
        tool_mode: str = "native",
        guided: bool = False,
        order: PromptOrder = "recency",
    ) -> str:
        """The definition-wide part, the state's part (with the reply rules, in the ``"recency"`` order), the
        state's tools, then the conversation part (memory, context, history): a
        :class:`~llm_fsm.llm.PromptText` that knows where its stable parts end."""
        back_to = definition.return_target(snapshot.state, snapshot.came_from)
        # from the most stable to the least, so that consecutive calls share the longest prefix a provider's
        # prompt cache can bill cheaper: a change of state keeps the definition-wide part
        wide = self.stable_prefix(definition, guided=guided, order=order)
        head = wide + self._state_part(definition, snapshot.state, guided, back_to, order)
        if order == "recency":  # the rules right after the state: a small model follows best what it read last
            head += self._rules_part(definition, snapshot.state, guided)
        if tools:
            head += self._tools_part(tools, tool_mode)
        # the text knows where its stable parts end: a client whose provider wants the cached prefix marked
        # (Anthropic) marks it there
        return PromptText(head + self._conversation_part(definition, snapshot), (len(wide), len(head)))

    def stable_prefix(self, definition: FSMDefinition, *, guided: bool = False, order: PromptOrder = "recency") -> str:
        """The part of every system prompt of ``definition`` that is the same in every state: the prefix a
        provider that needs a marker (Anthropic) is told to cache. In the ``"cache"`` order it holds the reply
        rules and the map of the states too, and (but guided) opens with what names no definition: the rules,
        then the task, whose line that names the definition closes it."""
        key = ("definition", definition.content_hash, guided, order)
        text = self._cache.get(key)
        if text is None:
            variables = definition_variables(definition, guided, order)
            text = self._keep(key, self._render("system_definition.xml.j2", variables))
        return text

    def definition_part(
        self, definition: FSMDefinition, state_id: str, *, guided: bool = False, back_to: str | None = None,
        order: PromptOrder = "recency",
    ) -> str:  # fmt: skip
        """Everything that depends only on the definition and the state (and, in a state with a
        ``"$return"`` move, where it goes back to: ``back_to``): the definition-wide part, rendered once per
        definition, then the state's part, rendered once per state (in a prompt the reply rules, in the
        ``"recency"`` order, and the state's tools follow it)."""
        wide = self.stable_prefix(definition, guided=guided, order=order)
        return wide + self._state_part(definition, state_id, guided, back_to, order)

    def _state_part(
        self, definition: FSMDefinition, state_id: str, guided: bool, back_to: str | None, order: PromptOrder
    ) -> str:
        # keyed by content, not by object: two loads of one definition share a rendering, and an edited
        # definition never meets a stale one
        key = ("state", definition.content_hash, state_id, guided, back_to, order)
        text = self._cache.get(key)
        if text is None:
            state = definition.states[state_id]
            moves = listed_moves(definition, state_id, back_to, "cache" if guided else order)
            variables = {
                "fsm": definition,
                "state": state,
                "transitions": moves,
                "collect": writable_keys(state, definition.code_only_keys, definition.moves(state_id, RETURN)),
                "valid_states": [state.id, *dict.fromkeys(t.target_state for t in moves)],
                "guided": guided,
                "order": order,  # "cache": the transitions' conditions are in the state map, not repeated here
            }
            text = self._keep(key, self._render("system_state.xml.j2", variables))
        return text

    def _rules_part(self, definition: FSMDefinition, state_id: str, guided: bool) -> str:
        # the packaged rules vary only with the state's id (the way to stay) and the reply's key order; a
        # template that overrides them may read the definition too
        key = ("rules", definition.content_hash, state_id, guided)
        text = self._cache.get(key)
        if text is None:
            variables = {"fsm": definition, "state_id": state_id, "guided": guided}
            text = self._keep(key, self._render("system_rules.xml.j2", variables))
        return text

    def _tools_part(self, tools: Sequence[BoundTool], mode: str) -> str:
        # a state's tools are the same from turn to turn: their names, descriptions and parameters key the text
        key = ("tools", mode, *((t.name, t.description, _to_json(t.parameters)) for t in tools))
        text = self._cache.get(key)
        if text is None:
            text = self._keep(key, self._render("tools.xml.j2", {"tools": list(tools), "mode": mode}))
        return text

    def _conversation_part(self, definition: FSMDefinition, snapshot: Snapshot) -> str:
        """Memory, context and history: what changes from turn to turn. Each piece renders apart and is
        reused while its content stays (the context across turns that add nothing, all of them across a
        turn's retries and tool rounds); ``system_conversation.xml.j2`` puts the pieces together."""
        from llm_fsm import memory
        from llm_fsm.memory import summaries

        window = summaries.visible(
            definition, snapshot.history, snapshot.summary, self.settings.history_window, start=snapshot.history_start
        )
        history = self._window(window)
        opening = not snapshot.history_len
        notes = {
            **memory.sections(definition, snapshot),
            "summary": snapshot.summary.text[: summaries.spec(definition).max_chars],
        }
        context, context_part = self._context_part(definition, snapshot.context)
        memory_part = self._piece("memory.xml.j2", notes) if any(notes.values()) else self._markup("")
        exchanges = [
            self._piece("exchange.xml.j2", {"user": h.user, "assistant": h.assistant}, (h.user, h.assistant))
            for h in history
        ]
        history_part = self._piece(
            "conversation_history.xml.j2",
            {"history": history, "exchanges": exchanges, "opening": opening},
            key=(opening, *((h.user, h.assistant) for h in history)),
        )
        if not self._composer_overridden:  # the packaged composer only joins the pieces: no render for that
            return f"{memory_part}{context_part}{history_part}</fsm>\n"
        variables = {
            "context": context,
            "history": history,
            "opening": opening,
            **notes,
            # the pieces, rendered: a template that overrides this one may use them or render the rest itself
            "memory_part": memory_part,
            "context_part": context_part,
            "history_part": history_part,
        }
        return self._render("system_conversation.xml.j2", variables)

    def _context_part(self, definition: FSMDefinition, context: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """The context as the prompt shows it (masked, bounded, internal keys left out) and its rendering.
        Kept for the last context seen per definition: a snapshot's context is never changed in place (a turn
        that updates it makes a new one), so the same object means the same text."""
        key = (definition.content_hash, id(context))
        kept = self._contexts.get(key)
        if kept is not None and kept[0] is context:  # holding the object: its id cannot be reused meanwhile
            return kept[1], kept[2]
        shown = self._visible_context(definition.masked(context))
        text = self._markup(self._render("current_context.xml.j2", {"context": shown}))
        with self._lock:
            if len(self._contexts) >= _RECENT_SIZE:
                self._contexts.pop(next(iter(self._contexts)))
            self._contexts[key] = (context, shown, text)
        return shown, text

    def _piece(self, name: str, variables: dict[str, Any], key: tuple[Any, ...] | None = None) -> Any:
        """``name`` rendered with ``variables``, as markup for the template that puts the pieces together;
        from a small cache when ``key`` (which must say everything the variables hold) was seen lately."""
        full = (name, *(key if key is not None else (_to_json(variables),)))
        text = self._recent.get(full)
        if text is None:
            text = self._markup(self._render(name, variables))
            with self._lock:
                if len(self._recent) >= _RECENT_SIZE:
                    self._recent.pop(next(iter(self._recent)))
                self._recent[full] = text
        return text

    def _keep(self, key: tuple[Any, ...], text: str) -> str:
        # a builder is shared between conversations, threads too: only the cache's change is locked (two
        # threads that miss together both render, and the second write is the same text)
        with self._lock:
            if len(self._cache) >= _CACHE_SIZE:
                # the oldest rendering goes first (a dict keeps insertion order)
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = text
        return text

    def _render(self, name: str, variables: dict[str, Any]) -> str:
        try:
            return self.env.get_template(name).render(variables)
        except self._template_error as exc:
            raise PromptError(f"template {name!r} failed: {exc}") from exc

    def _visible_context(self, context: dict[str, Any]) -> dict[str, Any]:
        # the runtime's "_" keys are not shown; "_extra" is the model's own (reply_schema.EXTRA_KEY)
        visible = {k: v for k, v in context.items() if not k.startswith("_") or k == "_extra"}
        return {_truncate(k, _MAX_KEY_CHARS): self._bounded(v) for k, v in visible.items()}

    def _bounded(self, value: Any) -> Any:
        if isinstance(value, str):
            return _truncate(value, self.settings.max_value_chars)
        if isinstance(value, dict):
            limit = _MAX_KEY_CHARS
            return {_truncate(str(k), limit): self._bounded(v) for k, v in value.items() if not str(k).startswith("_")}
        if isinstance(value, list):
            # the first 50 items: like text, a list in the context must not grow the prompt without bound
            return [self._bounded(v) for v in value[:50]]
        return value

    def _window(self, recent: Sequence[Any]) -> list[Said]:
        """The exchanges shown (see ``summaries.visible``: the last ``history_window`` by default), cut to size."""
        limit = self.settings.max_message_chars
        return [
            Said(None if h.user is None else _truncate(h.user, limit), _truncate(h.assistant, limit)) for h in recent
        ]


def definition_variables(definition: FSMDefinition, guided: bool, order: PromptOrder) -> dict[str, Any]:
    """What ``system_definition.xml.j2`` reads: the definition, its language's name, its memory rules and,
    in the cache order, the map of its states (the reply rules render there too: no state is named)."""
    variables = {"fsm": definition, "guided": guided, "order": order, "state_id": None, **memory_rules(definition)}
    variables["language"] = language_name(definition.language) if definition.language else ""
    return variables | state_map(definition) if order == "cache" else variables


def state_map(definition: FSMDefinition) -> dict[str, Any]:
    """The map of the states the cache order's definition-wide part shows: each state with what it is for and
    its transitions (where, when, priority), and the moves open from any state: the transitions in full, once
    for every state, so that a state's part only names the ones open in it. Plain dicts and strings: cheap for
    the sandbox to read."""
    states = [
        {
            "id": state.id,
            "terminal": state.terminal,
            "about": state.purpose or state.description,
            "moves": [_move(t) for t in state.transitions],
        }
        for state in definition.states.values()
    ]
    anywhere = [{**_move(g), "except": ", ".join(g.except_states)} for g in definition.global_transitions]
    return {"states": states, "anywhere": anywhere}


def _move(transition: Any) -> dict[str, Any]:
    back = "(the state the conversation came from)"
    return {
        "target": back if transition.target_state == RETURN else transition.target_state,
        "description": transition.description,
        "priority": transition.priority,
        "when": [_condition(c) for c in transition.conditions],
    }


def _condition(condition: Any) -> str:
    """A condition as the map shows it: what ``transitions.xml.j2`` says of it, on one line."""
    needs = f" (needs: {', '.join(condition.requires_context_keys)})" if condition.requires_context_keys else ""
    rule = f" (rule: {_to_json(condition.logic)})" if condition.logic is not None else ""
    return f"{condition.description or ''}{needs}{rule}".strip()


def memory_rules(definition: FSMDefinition) -> dict[str, Any]:
    """What the definition part says about working memory and summaries (nothing when it has neither)."""
    from llm_fsm.memory.summaries import enabled
    from llm_fsm.memory.working import rules

    return {"memory_rules": rules(definition), "summarized": any(enabled(definition))}


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[truncated {len(text) - limit} chars]"


def listed_moves(definition: FSMDefinition, state_id: str, back_to: str | None, order: PromptOrder) -> list[Transition]:
    """The moves of ``state_id`` as its prompt lists them: the global ones included, ``"$return"`` resolved; the
    state's own (its flow) first, then those from anywhere (a hand-over, help), each by priority. A small model
    takes the first move listed, and a hand-over of priority 5 listed first was taken on the first answer ("my
    policy is HM-204518"). The ``"cache"`` order lists them by priority alone, as its state map does, and so does
    a guided prompt: its grammar already holds the moves, and the own-first order lost lead_qualification four
    turns there (benchmarks/REAL_MODEL.md, issue 28, fifth round)."""
    moves = definition.moves(state_id, back_to)
    return list(moves) if order == "cache" else sorted(moves, key=lambda t: isinstance(t, GlobalTransition))
