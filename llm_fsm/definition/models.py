"""Pydantic models of the definition format.

This module holds the whole (:class:`FSMDefinition`: its states, hashes and outline); the parts it is
built from (transitions, checks, tools...) are in :mod:`llm_fsm.definition.parts`; what its hashes
and outline are made of (its canonical form, its prose apart from its structure) in
:mod:`llm_fsm.definition.outline`; the JSON Schema the models generate in :mod:`llm_fsm.definition.json_schema`.

The models validate field types and shapes. Checks that span the whole file (targets exist,
a terminal state is reachable, JsonLogic operators are allowed) live in :mod:`llm_fsm.definition.file_checks`;
the loader reports them together with the field errors.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from functools import cached_property
from typing import Any, Literal, TypeVar

from pydantic import Field, StrictBool, field_validator

from llm_fsm.definition.memory import MemorySpec, StateSummaries, SummarySpec
from llm_fsm.definition.opening import MAX_CHARS as MAX_OPENING_CHARS
from llm_fsm.definition.opening import compile_opening, is_template
from llm_fsm.definition.outline import (
    GLOBAL_PART,
    STATE_PARTS,
    STATE_PARTS_BEFORE_PROSE,
    STATE_PROSE,
    STATE_PROSE_PART,
    TOP_PARTS,
    TOP_PARTS_BEFORE_PROSE,
    TOP_PROSE,
    TOP_PROSE_PART,
    TOP_PROSE_PARTS,
    TOP_STRUCTURE,
    TRANSITION_PROSE,
    canonical_dump,
    canonical_state,
    canonical_transitions,
    changed_parts,
    digest,
    memory_prose,
)
from llm_fsm.definition.parts import (
    RETURN,
    AnyValue,
    Approval,
    Check,
    CheckPart,
    Condition,
    ContextKeys,
    Example,
    Frozen,
    GlobalTransition,
    JSONLogic,
    JudgeCheck,
    MaxLengthCheck,
    MCPServerSpec,
    PythonCheck,
    RegexCheck,
    RequiredKeysCheck,
    RuntimeTexts,
    SchemaCheck,
    Subflow,
    Tool,
    ToolErrorDetail,
    Transition,
)
from llm_fsm.secrets import mask  # every prompt masks the context: imported once, not per call
from llm_fsm.values import blank

__all__ = [  # the parts are defined in llm_fsm.definition.parts and imported from here
    "RETURN",
    "SCHEMA_DRAFT",
    "SCHEMA_ID",
    "Approval",
    "Check",
    "Condition",
    "Example",
    "FSMDefinition",
    "GlobalTransition",
    "JSONLogic",
    "JudgeCheck",
    "MCPServerSpec",
    "MaxLengthCheck",
    "PythonCheck",
    "RegexCheck",
    "RequiredKeysCheck",
    "RuntimeTexts",
    "SchemaCheck",
    "State",
    "Subflow",
    "Tool",
    "ToolErrorDetail",
    "Transition",
    "CheckPart",
]

T = TypeVar("T")
# what "corrections" holds: every collected key (true), none (false), or the keys named
# (see llm_fsm.definition.corrections)
Corrections = StrictBool | tuple[str, ...]


class State(Frozen):
    id: str = Field(description="Unique identifier: letters, digits and underscores.")
    description: str = Field("", description="A short summary of the state, shown to the model.")
    purpose: str = Field("", description="What this state is for, shown to the model.")
    instructions: str = Field("", description="How the model should behave in this state.")
    required_context_keys: tuple[str, ...] = Field(
        (), description="Information the model should collect in this state."
    )
    extraction_instructions: str = Field("", description="How to extract the keys to collect.")
    response_instructions: str = Field("", description="How to phrase the reply.")
    example_dialogue: tuple[Example, ...] = Field((), description="Example exchanges.")
    handlers: tuple[str, ...] = Field((), description="Names of handlers (registered in code) that run in this state.")
    writable_keys: tuple[str, ...] | None = Field(
        None,
        description="Context keys the model may write here. Default: required_context_keys, the keys the "
        "conditions of its moves read (global moves included), and _extra.",
    )
    corrections: Corrections | None = Field(
        None, description="The keys the model may correct here once collected, over the definition's corrections."
    )
    clearable_keys: ContextKeys = Field(
        (),
        description="Keys the model may remove here by writing null for them (the user takes a value back): keys "
        "this state may write. Null for any other key means not learned, and changes nothing.",
    )
    checks: tuple[Check, ...] = Field((), description="Acceptance checks on each proposed turn (refinement).")
    tools: tuple[str, ...] = Field((), description="Names of the tools the model may call in this state.")
    max_tool_rounds: int | None = Field(
        None, ge=0, le=20, strict=True, description="Rounds of tool calls per turn here (default: the definition's)."
    )
    max_retries: int = Field(2, ge=0, le=10, strict=True, description="Retries with feedback when checks fail.")
    on_exhausted: Literal["stay", "fallback_state", "raise"] = Field(
        "stay", description="When checks still fail: stay, go to fallback_state, or raise an error."
    )
    fallback_state: str | None = Field(None, description='The state to go to when on_exhausted is "fallback_state".')
    transitions: tuple[Transition, ...] = Field(
        (), description="Where the conversation may go next. No transitions: a terminal state."
    )
    summaries: StateSummaries | None = Field(
        None, description="This state's summary triggers (on_overflow, on_leave), over the definition's."
    )
    subflow: Subflow | None = Field(
        None, description="Run another definition as a sub-conversation on entering this state (llm_fsm.subflows)."
    )
    acts: bool = Field(
        False,
        strict=True,
        description="The state works on its own: entering it runs a turn with no person's message (its purpose, "
        "instructions and tools over the context); its message is a report, and its checks are its key results.",
    )
    opening: str | None = Field(
        None,
        description="The first message of a conversation that opens in this state, written without a model "
        "call: a text, or a Jinja template over the context ({{ name }}; sandboxed, a missing key is an error).",
    )

    @field_validator("opening")
    @classmethod
    def _opening_compiles(cls, value: str | None) -> str | None:
        # compiled at load time, so a template that cannot work is a problem of the file, not of a turn
        if value is None:
            return value
        if blank(value):
            raise ValueError("the opening has no visible text: the user would read nothing")
        if is_template(value):
            compile_opening(value)
        elif len(value) > MAX_OPENING_CHARS:
            raise ValueError(f"the opening is {len(value)} characters long; one chat message holds {MAX_OPENING_CHARS}")
        return value

    @field_validator("example_dialogue", mode="before")
    @classmethod
    def _flatten_examples(cls, value: Any) -> Any:
        # llm-fsm writes each example line as a one-key object: {"user": "..."}.
        if not isinstance(value, list):
            return value
        return [line for item in value for line in _example_lines(item)]

    @property
    def terminal(self) -> bool:
        return not self.transitions

    def tool_rounds(self, definition: FSMDefinition) -> int:
        return definition.max_tool_rounds if self.max_tool_rounds is None else self.max_tool_rounds

    def transitions_by_priority(self) -> tuple[Transition, ...]:
        return tuple(sorted(self.transitions, key=lambda t: t.priority))

    def asked_keys(self, protected: Collection[str] = (), moves: Sequence[Transition] | None = None) -> list[str]:
        """What ``reply_schema.writable_keys`` says (here so that :attr:`FSMDefinition.collected_keys` can ask it)."""
        from llm_fsm.logic.rules import keys_read

        if self.writable_keys is not None:  # said outright: exactly what the engine lets the model write
            return [k for k in self.writable_keys if not k.startswith("_") and k not in protected]
        keys = dict.fromkeys(self.required_context_keys)
        for condition in (c for t in (self.transitions if moves is None else moves) for c in t.conditions):
            keys.update(dict.fromkeys(condition.requires_context_keys))
            if condition.logic is not None:  # a condition that reads "a.b" needs the model to write the object "a"
                keys.update(dict.fromkeys(sorted(k.split(".")[0] for k in keys_read(condition.logic))))
        return [k for k in keys if not k.startswith("_") and k not in protected]


def _example_lines(item: Any) -> list[Any]:
    if isinstance(item, dict) and "role" not in item:
        return [{"role": role, "content": content} for role, content in item.items()]
    return [item]


class FSMDefinition(Frozen):
    """A validated, immutable conversation definition. Build it with :func:`llm_fsm.load`."""

    schema_: str | None = Field(None, alias="$schema", description="Path or URL of this schema.")
    name: str = Field(description="Name of the conversation.")
    description: str = Field("", description="What the conversation is for, shown to the model.")
    version: str = Field("1.0", description="Version of this definition, for your own bookkeeping.")
    initial_state: str = Field(description="Id of the state the conversation starts in.")
    persona: str = Field("", description="Who the assistant is and how it speaks.")
    language: str = Field(
        "",
        max_length=64,
        description='The language the assistant speaks with its users: a name ("Spanish") or a tag ("es", "de-CH"). '
        "The prompt asks the model to write its messages in it, and the runtime's own texts default to it.",
    )
    texts: RuntimeTexts | None = Field(
        None,
        description="What the runtime itself says to users (fallback, pause, approval), in the definition's words.",
    )
    states: dict[str, State] = Field(description="States keyed by id (a list of states also loads).")
    global_transitions: tuple[GlobalTransition, ...] = Field(
        (),
        description="Moves from anywhere (cancel, help, talk to a human): each applies in every non-terminal "
        "state except those in its except_states and its own target, with the state's own transitions.",
    )
    handler_only_keys: tuple[str, ...] = Field((), description="Context keys the model may never write.")
    any_value: AnyValue | None = Field(
        None,
        min_length=1,
        description='A value every key the model writes takes besides its declared type or enum ("dontcare"): the '
        "user said any value will do. The prompt says what it means; it counts as present.",
    )
    corrections: Corrections = Field(
        False,
        description="Keys the model may correct in any state once they are in the context (a person changing what "
        "they said): true for every key a state collects, or a list of them. Default false: none.",
    )
    mask_secrets: bool = Field(
        True,
        strict=True,
        description="Mask secret-looking context values (password, token, card number...) in prompts and displays.",
    )
    secret_keys: tuple[str, ...] = Field((), description="More context keys to mask (names or globs such as member_*).")
    context_schema: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="A JSON Schema per context key; a model update with a value that does not match is rejected.",
    )
    tools: dict[str, Tool] = Field(default_factory=dict, description="Tools keyed by name; states list them by name.")
    mcp_servers: dict[str, MCPServerSpec] = Field(
        default_factory=dict, description="MCP servers keyed by name, whose tools states may list."
    )
    tool_error_detail: ToolErrorDetail = Field(
        "message",
        description='What the model reads when a tool raises: "message" (the exception\'s type and first line, '
        'secret-looking values masked, bounded) or "type" (its type only). A tool\'s error_detail overrides it.',
    )
    max_tool_rounds: int = Field(
        3, ge=0, le=20, strict=True, description="Rounds of tool calls the model may make per turn."
    )
    max_tool_calls: int = Field(
        8, ge=1, le=100, strict=True, description="Tool calls the model may ask for at once (in one round)."
    )
    max_run_steps: int = Field(
        20,
        ge=1,
        le=1000,
        strict=True,
        description="Steps a run may take on its own (acting states and automatic moves) before it stops with an "
        "error naming this limit: the bound on a workflow's loops.",
    )
    memory: MemorySpec | None = Field(
        None, description="Working memory: named text slots (background, slots) the model and code keep up to date."
    )
    summaries: SummarySpec | None = Field(
        None, description="Running summaries of what leaves the history window, or of a state's exchanges."
    )

    @cached_property
    def code_only_keys(self) -> tuple[str, ...]:
        """The keys the model may never write: ``handler_only_keys`` and the tools' result keys."""
        results = (tool.result_key for tool in self.tools.values() if tool.result_key)
        return tuple(dict.fromkeys([*self.handler_only_keys, *results]))

    @cached_property
    def collected_keys(self) -> tuple[str, ...]:
        """The keys some state asks the model for (``reply_schema.writable_keys``): what ``corrections`` may name."""
        every = (s.asked_keys(self.code_only_keys, self.moves(sid, RETURN)) for sid, s in self.states.items())
        return tuple(dict.fromkeys(key for keys in every for key in keys))

    def correctable_keys(self, state_id: str) -> tuple[str, ...]:
        """The keys the model may correct in ``state_id`` once they are in the context: its ``corrections``, else
        the definition's (true: :attr:`collected_keys`); never code's keys
        (see :mod:`llm_fsm.definition.corrections`)."""
        known: tuple[str, ...] | None = self._derived.get(("correctable_keys", state_id))
        if known is not None:  # asked several times a reply: no closure made once it is known
            return known

        def compute(state: State) -> tuple[str, ...]:
            setting = self.corrections if state.corrections is None else state.corrections
            named = self.collected_keys if setting is True else setting or ()
            return tuple(k for k in named if k in self.collected_keys)  # load refuses the others: kept out anyway

        return self.derived("correctable_keys", state_id, compute)

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 of the canonical JSON of the definition (identifies what a snapshot ran on)."""
        return digest(canonical_dump(self.model_dump(mode="json", exclude={"schema_"})))

    def state(self, state_id: str) -> State:
        return self.states[state_id]

    def global_moves(self, state_id: str) -> tuple[GlobalTransition, ...]:
        """The global transitions that apply in ``state_id``: none in a terminal state; else each one
        whose ``except_states`` and target are not this state."""
        # cached like the indices: the turn asks for them several times per reply
        return self.derived(
            "global_moves", state_id, lambda _: tuple(self.global_transitions[j] for j in self.global_indices(state_id))
        )

    def global_indices(self, state_id: str) -> tuple[int, ...]:
        """The positions in ``global_transitions`` of those that apply in ``state_id`` (see :meth:`global_moves`)."""

        def compute(state: State) -> tuple[int, ...]:
            if state.terminal:
                return ()
            moves = enumerate(self.global_transitions)
            return tuple(j for j, g in moves if state_id not in g.except_states and g.target_state != state_id)

        return self.derived("global_indices", state_id, compute)

    def moves(self, state_id: str, back_to: str | None = None) -> tuple[Transition, ...]:
        """Every move of ``state_id`` by priority: its own transitions and the global ones that apply
        (on equal priorities its own first). ``"$return"`` targets become ``back_to``, the state the
        conversation came from (see :meth:`return_target`); without one, those moves are left out."""
        kind = f"moves:{back_to or ''}"
        known: tuple[Transition, ...] | None = self._derived.get((kind, state_id))
        if known is not None:
            return known

        def compute(state: State) -> tuple[Transition, ...]:
            every = sorted((*state.transitions, *self.global_moves(state_id)), key=lambda t: t.priority)
            if back_to is None:
                return tuple(t for t in every if t.target_state != RETURN)
            return tuple(
                t.model_copy(update={"target_state": back_to}) if t.target_state == RETURN else t for t in every
            )

        return self.derived(kind, state_id, compute)

    @cached_property
    def is_workflow(self) -> bool:
        """Whether some state acts on its own or some move is automatic: a person's turn may then go on into
        steps nobody types for (a run, see :mod:`llm_fsm.running`)."""
        moves = (*(t for s in self.states.values() for t in s.transitions), *self.global_transitions)
        return any(s.acts for s in self.states.values()) or any(t.automatic for t in moves)

    def automatic_in(self, state_id: str) -> bool:
        """Whether ``state_id`` has an automatic move (its own or a global one that applies there)."""
        state = self.states[state_id]
        return any(t.automatic for t in state.transitions) or any(t.automatic for t in self.global_moves(state_id))

    def return_target(self, state_id: str, came_from: Sequence[str]) -> str | None:
        """Where a ``"$return"`` move of ``state_id`` goes: the state the conversation came from (the last
        of ``came_from``, see ``Snapshot.came_from``); None when there is none, or ``state_id`` has no such move."""
        if not came_from or came_from[-1] not in self.states or not self.returns(state_id):
            return None
        return came_from[-1]

    def returns(self, state_id: str) -> bool:
        """Whether ``state_id`` has a ``"$return"`` move (its own or a global one)."""
        known: bool | None = self._derived.get(("returns", state_id))
        if known is not None:
            return known

        def compute(state: State) -> bool:
            return any(t.target_state == RETURN for t in (*state.transitions, *self.global_moves(state_id)))

        return self.derived("returns", state_id, compute)  # asked on every reply (see return_target)

    @cached_property
    def outline(self) -> dict[str, str]:
        """Short hashes of the parts of the definition, to name what changed between two versions.

        Each part's structure (states, transitions, conditions, keys, checks) is hashed apart from its
        prose (descriptions, persona, purpose, instructions, examples), so a text edit can be told apart.
        """
        top_prose: dict[str, Any] = dict.fromkeys(TOP_PROSE, True)
        # words for the users (set: hashed with the prose; unset: left out, so that older outlines still match)
        top_prose |= {name: True for name in ("language", "texts") if getattr(self, name)}
        tool_prose = {"tools": {"__all__": {"description": True}}} if self.tools else {}
        tool_prose |= memory_prose(self)
        global_prose = {"global_transitions": {"__all__": TRANSITION_PROSE}} if self.global_transitions else {}
        structure = {"schema_": True, "states": True, "global_transitions": True, **top_prose, **tool_prose}
        parts: dict[str, Any] = {
            TOP_STRUCTURE: canonical_dump(self.model_dump(mode="json", exclude=structure)),
            TOP_PROSE_PART: self.model_dump(mode="json", include={**top_prose, **tool_prose, **global_prose}),
        }
        if self.global_transitions:  # absent when there are none: outlines from before they existed still match
            parts[GLOBAL_PART] = canonical_transitions(
                [g.model_dump(mode="json", exclude=TRANSITION_PROSE) for g in self.global_transitions]
            )
        for sid, state in self.states.items():
            parts[f"{sid}.transitions"] = canonical_transitions(
                [t.model_dump(mode="json", exclude=TRANSITION_PROSE) for t in state.transitions]
            )
            parts[f"{sid}.structure"] = canonical_state(
                state.model_dump(mode="json", exclude={**STATE_PROSE, "transitions": True})
            )
            # an unset opening is left out: outlines from before the field existed still match
            parts[f"{sid}.prose"] = canonical_state(state.model_dump(mode="json", include=STATE_PROSE))
        return {name: digest(value)[:16] for name, value in parts.items()}

    def changes_since(self, outline: dict[str, str], *, prose: bool = True) -> list[str]:
        """What differs between this definition and the one ``outline`` describes, in words.

        ``prose=False`` leaves out edits to prose fields. An outline written before prose was hashed
        apart (or none at all) cannot tell them apart: each of its changes counts as structure.
        """
        if not outline:
            return ["its content changed"]
        if TOP_STRUCTURE not in outline:
            return changed_parts(outline, self._outline_before_prose, STATE_PARTS_BEFORE_PROSE, TOP_PARTS_BEFORE_PROSE)
        if prose:
            return changed_parts(
                outline, self.outline, {**STATE_PARTS, **STATE_PROSE_PART}, {**TOP_PARTS, **TOP_PROSE_PARTS}
            )
        return changed_parts(outline, self.outline, STATE_PARTS, TOP_PARTS)

    @cached_property
    def _outline_before_prose(self) -> dict[str, str]:
        """The outline as snapshots recorded it before structure and prose were hashed apart."""
        parts: dict[str, Any] = {"fsm": canonical_dump(self.model_dump(mode="json", exclude={"schema_", "states"}))}
        for sid, state in self.states.items():
            parts[f"{sid}.transitions"] = canonical_transitions([t.model_dump(mode="json") for t in state.transitions])
            parts[f"{sid}.text"] = canonical_state(state.model_dump(mode="json", exclude={"transitions"}))
        return {name: digest(value)[:16] for name, value in parts.items()}

    def blocking_changes(
        self, definition_hash: str, outline: dict[str, str], *, strict: bool = False, name: str | None = None
    ) -> list[str]:
        """The changes that stop a snapshot taken on the definition (``definition_hash``, ``outline``,
        ``name``) from restoring onto this one: none when it is this very definition; one, "saved with
        another definition", when ``name`` is another's (its parts are not this one's edited); with
        ``strict``, every change; else only changes to the structure (an edit to prose does not block)."""
        if definition_hash == self.content_hash:
            return []
        if name is not None and name != self.name:
            return [f"it was saved with another definition ('{name}')"]
        return self.changes_since(outline, prose=strict)

    @cached_property
    def subflow_definitions(self) -> dict[str, FSMDefinition]:
        """The definitions its states' ``subflow`` name, by reference, as the loader attached them."""
        return {}

    @cached_property
    def _derived(self) -> dict[tuple[str, str], Any]:
        return {}

    def masked(self, context: dict[str, Any]) -> dict[str, Any]:
        """``context`` with secret-looking values masked (unless this definition turns masking off)."""
        if not self.mask_secrets:
            return context
        masked: dict[str, Any] = mask(context, self.secret_keys)
        return masked

    def known(self, kind: str, state_id: str) -> Any:
        """What :meth:`derived` keeps for ``kind`` and ``state_id``, or None before it is computed: a caller asked
        several times a turn looks first, and builds the ``compute`` it would pass only when it is not known."""
        return self._derived.get((kind, state_id))

    def derived(self, kind: str, state_id: str, compute: Callable[[State], T]) -> T:
        """``compute(state)``, computed once per definition, state and ``kind`` (the definition is immutable)."""
        key = (kind, state_id)
        try:  # asked several times per turn: one lookup when it is known
            found: T = self._derived[key]
        except KeyError:
            found = self._derived[key] = compute(self.states[state_id])
        return found


SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "urn:llm-fsm-runtime:schema:fsm-definition"
