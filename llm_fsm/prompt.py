"""Compile the current state, context and history into the messages of one model call.

Templates live in ``prompts/`` and render in a sandboxed, immutable Jinja environment with
``StrictUndefined`` and autoescaping: every value that comes from a user or a model is escaped, so
it can never open or close a prompt element. A user template directory overrides single templates.

The system prompt is ordered for prompt caching: everything that depends only on the definition
and the current state comes first; the context and the history, which change every turn, come last.
The user's message is sent once, as the user turn.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_fsm.contract import writable_keys
from llm_fsm.definition import RETURN
from llm_fsm.errors import PromptError

if TYPE_CHECKING:
    from llm_fsm.checks import Proposal
    from llm_fsm.definition import FSMDefinition
    from llm_fsm.engine import Rejection, Snapshot
    from llm_fsm.tools.calling import BoundTool, ToolRun

Message = dict[str, Any]

_MAX_KEY_CHARS = 100  # context key names are model-written too: bounded like values
_CACHE_SIZE = 512  # definition parts kept: (definition, state) pairs

OPENING_REQUEST = "(The conversation begins. Open it as the current state asks.)"


def _templates_dir() -> Path:
    here = Path(__file__).resolve().parent
    packaged = here / "prompts"  # inside an installed wheel
    return packaged if packaged.is_dir() else here.parent / "prompts"  # in a source checkout


def _escape(value: Any) -> str:
    """Escape what could open or close an element. Quotes stay readable: they cannot break text."""
    if hasattr(value, "__html__"):  # markupsafe.Markup: a fragment a template marked as trusted
        return str(value)
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


@dataclass(frozen=True)
class PromptSettings:
    """How much of the conversation a prompt carries. Every bound keeps prompts flat over time."""

    history_window: int = 6
    max_message_chars: int = 1000
    max_value_chars: int = 500


class PromptBuilder:
    """Renders prompts; keep one per runtime, since its Jinja environment caches compiled templates."""

    def __init__(
        self,
        template_dirs: Sequence[str | os.PathLike[str]] = (),
        settings: PromptSettings | None = None,
    ) -> None:
        import jinja2  # imported with the first prompt builder, not with the package
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.settings = settings or PromptSettings()
        loaders: list[jinja2.BaseLoader] = [jinja2.FileSystemLoader([str(d) for d in template_dirs])]
        loaders.append(jinja2.FileSystemLoader(str(_templates_dir())))
        self.env = ImmutableSandboxedEnvironment(
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
        self._cache: dict[tuple[str, str, bool, str | None], str] = {}
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
    ) -> list[Message]:
        """The messages of a turn: the system prompt, then the user's text (or the opening request).
        ``guided``: the reply is held to a guided schema (see ``llm_fsm.guided``), whose key order it states."""
        system = self.system_prompt(definition, snapshot, tools=tools, tool_mode=tool_mode, guided=guided)
        return [{"role": "system", "content": system}, {"role": "user", "content": user_text or OPENING_REQUEST}]

    def resume_note(self, reason: str, result: Mapping[str, Any]) -> str:
        """The user-turn text of the call that follows a resume."""
        return self._render("resume.xml.j2", {"reason": reason, "result": result})

    def approval_note(self, tool: str, decision: Mapping[str, Any]) -> str:
        """The user-turn text of the call that follows a person's decision about a tool call."""
        return self._render("approval.xml.j2", {"tool": tool, "decision": dict(decision)})

    def tool_results(self, runs: Sequence[ToolRun]) -> str:
        """The user-turn text that gives the model its tool calls' results (the JSON form of tool calling)."""
        from llm_fsm.tools.calling import result_text

        return self._render("tool_results.xml.j2", {"runs": list(runs), "text": result_text})

    def system_prompt(
        self,
        definition: FSMDefinition,
        snapshot: Snapshot,
        *,
        tools: Sequence[BoundTool] = (),
        tool_mode: str = "native",
        guided: bool = False,
    ) -> str:
        """The definition part (cached per state), the state's tools, then the conversation part."""
        from llm_fsm import memory
        from llm_fsm.memory import summaries

        window = summaries.visible(
            definition, snapshot.history, snapshot.summary, self.settings.history_window, start=snapshot.history_start
        )
        conversation = {
            # masked: a secret-looking value is not sent to the model (unless the definition turns masking off)
            "context": self._visible_context(definition.masked(snapshot.context)),
            "history": self._window(window),
            "opening": not snapshot.history,
            **memory.sections(definition, snapshot),
            "summary": snapshot.summary.text[: summaries.spec(definition).max_chars],
        }
        volatile = self._render("system_conversation.xml.j2", conversation)
        listed = self._render("tools.xml.j2", {"tools": list(tools), "mode": tool_mode}) if tools else ""
        back_to = definition.return_target(snapshot.state, snapshot.came_from)
        # what changes every turn goes last, so that a provider's prompt cache keeps the longest prefix
        return self.definition_part(definition, snapshot.state, guided=guided, back_to=back_to) + listed + volatile

    def definition_part(
        self, definition: FSMDefinition, state_id: str, *, guided: bool = False, back_to: str | None = None
    ) -> str:
        """Everything that depends only on the definition and the state (and, in a state with a
        ``"$return"`` move, where it goes back to: ``back_to``): rendered once, then reused."""
        # keyed by content, not by object: two loads of one definition share a rendering, and an edited
        # definition never meets a stale one
        key = (definition.content_hash, state_id, guided, back_to)
        text = self._cache.get(key)
        if text is None:
            state = definition.states[state_id]
            moves = definition.moves(state_id, back_to)  # the global moves included, "$return" resolved
            variables = {
                "fsm": definition,
                "state": state,
                "transitions": moves,
                "collect": writable_keys(state, definition.code_only_keys, definition.moves(state_id, RETURN)),
                "valid_states": [state.id, *dict.fromkeys(t.target_state for t in moves)],
                "guided": guided,
                **memory_rules(definition),
            }
            text = self._render("system_definition.xml.j2", variables)
            # a builder is shared between conversations, threads too: only the cache's change is locked (two
            # threads that miss together both render, and the second write is the same text)
            with self._lock:
                if len(self._cache) >= _CACHE_SIZE:
                    # the oldest rendering goes first (a dict keeps insertion order)
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = text
        return text

    def correction(self, rejections: Iterable[Rejection], state: str) -> str:
        """The user-turn text of a corrective call: exactly what was wrong with the last reply."""
        return self._render("correction.xml.j2", {"rejections": list(rejections), "state": state})

    def judge_messages(self, definition: FSMDefinition, rubric: str, proposal: Proposal) -> list[Message]:
        """The messages of a judge call: the rubric, the user's message and the proposed reply."""
        variables = {
            "rubric": rubric,
            "state": definition.states[proposal.state],
            "user": proposal.user,
            "message": proposal.message,
        }
        system = self._render("judge.xml.j2", variables)
        return [{"role": "system", "content": system}, {"role": "user", "content": "Grade the proposed reply."}]

    def _render(self, name: str, variables: dict[str, Any]) -> str:
        try:
            return self.env.get_template(name).render(variables)
        except self._template_error as exc:
            raise PromptError(f"template {name!r} failed: {exc}") from exc

    def _visible_context(self, context: dict[str, Any]) -> dict[str, Any]:
        # the runtime's "_" keys are not shown; "_extra" is the model's own (engine.EXTRA_KEY)
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

    def _window(self, recent: Sequence[Any]) -> list[dict[str, Any]]:
        """The exchanges shown (see ``summaries.visible``: the last ``history_window`` by default), cut to size."""
        limit = self.settings.max_message_chars
        return [
            {"user": None if h.user is None else _truncate(h.user, limit), "assistant": _truncate(h.assistant, limit)}
            for h in recent
        ]

    def summary_messages(
        self, definition: FSMDefinition, previous: str, exchanges: Sequence[Any], bounds: Any, *, left: str | None
    ) -> list[Message]:
        """The messages of a summary call: the previous summary and the exchanges to fold into it."""
        variables = {
            "fsm": definition,
            "previous": previous,
            "exchanges": [{**self._window([e])[0], "state": e.state} for e in exchanges],
            "max_chars": bounds.max_chars,
            "instructions": bounds.instructions,
            "left": left,
        }
        system = self._render("summary.xml.j2", variables)
        return [{"role": "system", "content": system}, {"role": "user", "content": "Write the updated summary."}]


def memory_rules(definition: FSMDefinition) -> dict[str, Any]:
    """What the definition part says about working memory and summaries (nothing when it has neither)."""
    from llm_fsm.memory.summaries import enabled
    from llm_fsm.memory.working import rules

    return {"memory_rules": rules(definition), "summarized": any(enabled(definition))}


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[truncated {len(text) - limit} chars]"
