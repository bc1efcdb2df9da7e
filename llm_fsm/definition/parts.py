"""The parts a definition is built from: transitions and their conditions, acceptance checks, tools
and MCP servers, sub-conversations, example lines; and the frozen base model they share, which reads
``null`` as a field's default. :mod:`llm_fsm.definition.models` puts them together (and exports them all)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache, cached_property
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from llm_fsm.values import blank

JSONLogic = dict[str, Any] | StrictBool  # strict: the text "yes" is not a rule that always holds


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        """``null`` in a field that has a default means that default: llm-fsm writes every optional
        field, as ``null`` when it is unset. (Fields whose default is ``None`` get ``None`` either way.)"""
        if not isinstance(data, dict) or None not in data.values():
            return data
        optional = _optional_fields(cls)
        return {key: value for key, value in data.items() if value is not None or key not in optional}


@cache
def _optional_fields(model: type[BaseModel]) -> frozenset[str]:
    """The names and aliases of the fields of ``model`` that have a default."""
    fields = [(name, field) for name, field in model.model_fields.items() if not field.is_required()]
    return frozenset(name for name, _ in fields) | frozenset(field.alias for _, field in fields if field.alias)


def _top_level_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    for key in keys:
        if not key or "." in key:
            raise ValueError(f"'{key}' is not a context key: a key's name, without dots (not a path into an object)")
    if len(set(keys)) < len(keys):
        twice = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"'{twice}' is listed twice")
    return keys


# context keys named whole (clear_keys, clearable_keys): top-level keys, each once
ContextKeys = Annotated[tuple[str, ...], AfterValidator(_top_level_keys)]


def _visible_value(value: str) -> str:
    if blank(value):
        raise ValueError("the value has nothing visible: the model could not tell it from no value")
    return value


# the definition's any_value ("dontcare")
AnyValue = Annotated[str, AfterValidator(_visible_value)]


class Condition(Frozen):
    """All of a condition's parts must hold for it to hold."""

    description: str = Field("", description="What the condition means, shown to the model.")
    requires_context_keys: tuple[str, ...] = Field(
        (), description="Keys that must be present and non-empty in the context."
    )
    logic: JSONLogic | None = Field(None, description="A JsonLogic rule evaluated on the context.")

    @cached_property
    def holds_on(self) -> Callable[[Mapping[str, object] | None], object]:
        """``logic`` compiled once (see :func:`llm_fsm.logic.rules.compile_rule`): conditions are evaluated on
        every reply, and the model is frozen, so its rule is read only the first time."""
        from llm_fsm.logic.rules import compile_rule  # the evaluator, only where conditions are evaluated

        return compile_rule(self.logic)


class Transition(Frozen):
    target_state: str = Field(
        description='Id of the state this transition leads to, or "$return": back to the state the '
        "conversation came from before it entered this one."
    )
    description: str = Field("", description="When to take this transition, shown to the model.")
    priority: int = Field(100, strict=True, description="Lower is preferred when several transitions apply.")
    conditions: tuple[Condition, ...] = Field((), description="All must hold for the move.")
    clear_keys: ContextKeys = Field(
        (),
        description="Context keys this move removes (with who set them), as it is taken: those the context "
        "held before the reply; a key the reply writes on the same turn stays. A fresh start in the same service.",
    )
    automatic: bool = Field(
        False,
        strict=True,
        description="The runtime takes this move on its own, with no model call, as soon as its conditions hold: "
        "on entering the state, after a turn or a tool's result, after a handler wrote a key (see Workflows).",
    )


RETURN = "$return"  # a target that goes back where the conversation came from ("$" is never in a state id)


class GlobalTransition(Transition):
    """A move that applies in every non-terminal state but those listed in ``except_states`` (and its
    own target): cancel, help, talk to a human. It joins each state's own transitions in one priority
    order; on equal priorities the state's own transitions come first."""

    except_states: tuple[str, ...] = Field((), description="States where this move does not apply.")


class CheckPart(Frozen):
    description: str = Field("", description="What the check ensures; named in the feedback when it fails.")
    on: Literal["turn", "leave"] = Field(
        "turn", description='"turn": every proposed turn in the state; "leave": only turns that leave it.'
    )


class RequiredKeysCheck(CheckPart):
    """The context after the proposed turn holds these keys (present and non-empty)."""

    kind: Literal["required_keys"] = Field(description="The kind of check.")
    keys: tuple[str, ...] = Field(min_length=1, description="Keys that must be present.")
    on: Literal["turn", "leave"] = Field("leave", description="By default only turns that leave the state.")


class SchemaCheck(CheckPart):
    """A context key, after the proposed turn, matches a JSON Schema (when present)."""

    kind: Literal["schema"] = Field(description="The kind of check.")
    key: str = Field(description="The context key to check.")
    json_schema: dict[str, Any] = Field(alias="schema", description="The JSON Schema the value must match.")


class RegexCheck(CheckPart):
    """The proposed message matches a regular expression (Python syntax, searched anywhere)."""

    kind: Literal["regex"] = Field(description="The kind of check.")
    pattern: str = Field(description="The regular expression.")
    must_match: bool = Field(True, strict=True, description="false: the message must NOT match.")
    ignore_case: bool = Field(False, strict=True, description="Match letters regardless of case.")


class MaxLengthCheck(CheckPart):
    """The proposed message is at most ``max`` characters long."""

    kind: Literal["max_length"] = Field(description="The kind of check.")
    max: int = Field(gt=0, strict=True, description="Maximum number of characters.")


class PythonCheck(CheckPart):
    """A check function registered in code (``@hooks.check(name)``)."""

    kind: Literal["python"] = Field(description="The kind of check.")
    name: str = Field(description="The name the check function is registered under.")


class JudgeCheck(CheckPart):
    """An extra model call grades the proposed message against a rubric: ``{"pass", "reason"}``."""

    kind: Literal["judge"] = Field(description="The kind of check.")
    rubric: str = Field(description="What a passing message does, for the judge.")


Check = Annotated[
    RequiredKeysCheck | SchemaCheck | RegexCheck | MaxLengthCheck | PythonCheck | JudgeCheck,
    Field(discriminator="kind"),
]


class Example(Frozen):
    """One line of an example dialogue (llm-fsm's ``example_dialogue``)."""

    role: str = Field(description='Who speaks: "user" or "assistant".')
    content: str = Field(description="What they say.")


class RuntimeTexts(Frozen):
    """What the runtime itself says to users, in the definition's words (see :mod:`llm_fsm.definition.texts`);
    unset: the built-in text in the definition's ``language``, else in English. Plain text, shown as written (not
    a template, unlike a state's ``opening``)."""

    fallback: str | None = Field(
        None, min_length=1, description="The message of a turn that found no valid reply (nothing changed)."
    )
    pause: str | None = Field(
        None, min_length=1, description="The message of a turn a handler paused without a message of its own."
    )
    approval: str | None = Field(
        None, min_length=1, description="The message of a turn whose tool call waits for a person's approval."
    )
    step_failed: str | None = Field(
        None,
        min_length=1,
        description="The message of a step of a state that acts on its own that found no valid reply (the run stops).",
    )

    @field_validator("fallback", "pause", "approval", "step_failed")
    @classmethod
    def _visible(cls, value: str | None) -> str | None:
        if value is not None and blank(value):
            raise ValueError("the text has nothing visible: the user would read nothing")
        return value


class Approval(Frozen):
    """Ask a person before the call runs when ``when`` holds: JsonLogic on ``{"args": ..., "context": ...}``."""

    when: JSONLogic = Field(description='JsonLogic on {"args": the call\'s arguments, "context": the context}.')


ToolErrorDetail = Literal["message", "type"]


class Tool(Frozen):
    """A function the model may call in the states that list it; its code is registered with
    ``@hooks.tool(name)`` or served by an MCP server."""

    description: str = Field("", description="What the tool does and when to call it, shown to the model.")
    parameters: dict[str, Any] | None = Field(
        None,
        description="A JSON Schema (type object) of the arguments. Default: from the registered function's "
        "signature, or the MCP server's.",
    )
    timeout: float = Field(
        30.0, gt=0, le=3600, strict=True, description="Seconds a call may take before it counts as failed."
    )
    approval: Literal["none", "always"] | Approval = Field(
        "none", description='Pause for a person before each call: "none", "always", or {"when": JsonLogic}.'
    )
    result_key: str | None = Field(
        None, description="Context key the call's result is stored under (only tools write it: the model cannot)."
    )

    @field_validator("result_key")
    @classmethod
    def _plain_key(cls, value: str | None) -> str | None:
        if value is not None and (not value or value.startswith("_") or "." in value):
            raise ValueError(f"a result key is a context key without dots, not starting with '_' (not '{value}')")
        return value

    @field_validator("approval", mode="before")
    @classmethod
    def _approval_shape(cls, value: Any) -> Any:
        if value in ("none", "always") or isinstance(value, dict):
            return value
        raise ValueError(f'approval is "none", "always" or {{"when": JsonLogic}}, not {json.dumps(value)}')

    mcp_server: str | None = Field(None, description="Name of the MCP server (in mcp_servers) that serves it.")
    error_detail: ToolErrorDetail | None = Field(
        None,
        description='What the model reads when the tool raises: "message" (the exception\'s type and first line, '
        'secret-looking values masked, bounded) or "type" (its type only). Default: the definition\'s '
        "tool_error_detail.",
    )


class MCPServerSpec(Frozen):
    """An MCP server whose tools states may list: a stdio ``command`` or a ``url``."""

    command: tuple[str, ...] | None = Field(None, description="The command that starts it, as a list of words.")
    url: str | None = Field(None, description="The URL of a server reached over HTTP.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for the command.")
    cwd: str | None = Field(None, description="Working folder of the command (relative to the definition's).")


class Subflow(Frozen):
    """Another definition this state runs as a sub-conversation (see :mod:`llm_fsm.subflows`)."""

    definition: str = Field(
        description="The sub-definition: a path relative to this file, or a name (<name>.json in this file's folder)."
    )
    input: dict[str, str] = Field(
        default_factory=dict, description="Its initial context: its key -> our key (or dotted path) read from ours."
    )
    output: dict[str, str] = Field(
        default_factory=dict, description="On its end: our key -> its key (or dotted path) written into ours."
    )
