"""JSON Schema checks of context values (``context_schema`` and ``schema`` checks), with jsonschema.

Imported only when a definition uses a schema: jsonschema takes ~50 ms to import.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema, or None."""
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return str(exc.message)
    except RecursionError:
        return "the schema nests too deeply"
    return None


def violation(schema: dict[str, Any], value: Any) -> str | None:
    """Why ``value`` does not match ``schema`` (formats such as email are checked), or None."""
    try:
        error = best_match(_validator(_frozen(schema)).iter_errors(value))
    except RecursionError:
        return "the value nests too deeply to check"
    return None if error is None else str(error.message)


@lru_cache(maxsize=256)
def _validator(frozen: str) -> Any:
    import json

    schema = json.loads(frozen)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _frozen(schema: dict[str, Any]) -> str:
    import json

    return json.dumps(schema, sort_keys=True)
