"""JSON Schema checks of context values (``context_schema`` and ``schema`` checks), with jsonschema.

Imported only when a definition uses a schema: jsonschema takes ~50 ms to import. Formats are checked with
jsonschema's checkers, but an email (``email``, ``idn-email``) with email-validator's syntax check (no DNS):
jsonschema's takes any text with an "@" (``a@b``, ``x@@y.com``).
"""

from __future__ import annotations

import copy
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
    return cls(schema, format_checker=_formats(cls.FORMAT_CHECKER))


@lru_cache(maxsize=8)
def _formats(checker: jsonschema.FormatChecker) -> jsonschema.FormatChecker:
    """``checker`` (a draft's), with email-validator checking the two email formats."""
    from email_validator import EmailNotValidError, validate_email  # imported with the first check

    def is_email(value: object) -> bool:
        if not isinstance(value, str):
            return True  # a format checks strings only; the type is another keyword's
        try:
            validate_email(value, check_deliverability=False)
        except EmailNotValidError:
            return False
        return True

    formats = copy.copy(checker)
    formats.checkers = dict(checker.checkers)  # the draft's own checker is left as it is
    for name in ("email", "idn-email"):
        formats.checks(name)(is_email)
    return formats


def _frozen(schema: dict[str, Any]) -> str:
    import json

    return json.dumps(schema, sort_keys=True)
