"""The JSON Schema of a definition file (Draft 2020-12), generated from the models of :mod:`llm_fsm.definition.models`,
for editors and other tools; ``schema/fsm.schema.json`` is a generated copy (``llm-fsm schema``)."""

from __future__ import annotations

from typing import Any

from llm_fsm.definition.models import SCHEMA_DRAFT, SCHEMA_ID, FSMDefinition

_STATE_ID_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"  # the loader's identifier rule


def json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of a definition file, for editors and other tools.

    It is generated from the models, with two shapes the loader accepts and the models do not show:
    ``states`` as a map keyed by id (``id`` optional inside) or as a list (``id`` required), and
    ``example_dialogue`` lines written llm-fsm style, ``{"user": "Hi"}``. It describes the canonical
    form: ``null`` in an optional field, which the models read as the default (llm-fsm's dumps write
    it), is left out. ``schema/fsm.schema.json`` is a generated copy: ``llm-fsm schema --output
    schema/fsm.schema.json`` refreshes it.
    """
    generated = FSMDefinition.model_json_schema(by_alias=True)
    defs = generated.pop("$defs")
    state = defs["State"]
    required = [key for key in state.pop("required", []) if key != "id"]  # the list form requires id, below
    if required:
        state["required"] = required
    state["properties"]["id"]["pattern"] = _STATE_ID_PATTERN
    examples = state["properties"]["example_dialogue"]
    examples["items"] = {"anyOf": [examples["items"], _llm_fsm_example_line()]}
    generated["properties"]["states"] = _states_schema(generated["properties"]["states"]["description"])
    return {
        "$schema": SCHEMA_DRAFT,
        "$id": SCHEMA_ID,
        "title": "llm-fsm definition",
        "description": "A conversational state machine driven by an LLM (llm_fsm). States are keyed by id; a "
        "state without transitions is terminal.",
        **{key: value for key, value in generated.items() if key not in ("title", "description")},
        "$defs": defs,
    }


def _states_schema(description: str) -> dict[str, Any]:
    state = {"$ref": "#/$defs/State"}
    return {
        "description": description,
        "anyOf": [
            {
                "type": "object",
                "minProperties": 1,
                "propertyNames": {"pattern": _STATE_ID_PATTERN},
                "additionalProperties": state,
            },
            {"type": "array", "minItems": 1, "items": {"allOf": [state, {"required": ["id"]}]}},
        ],
    }


def _llm_fsm_example_line() -> dict[str, Any]:
    return {
        "type": "object",
        "description": 'An llm-fsm style line: role -> content, e.g. {"user": "Hi"}.',
        "minProperties": 1,
        "additionalProperties": {"type": "string"},
    }
