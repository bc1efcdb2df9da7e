"""docs/authoring.md: its field tables are what the JSON Schema generates, and the README points at it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from llm_fsm.definition.json_schema import json_schema

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("authoring_guide", ROOT / "scripts" / "authoring_guide.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_field_tables_are_what_the_schema_generates():
    generator = _generator()
    text = (ROOT / "docs" / "authoring.md").read_text(encoding="utf-8")
    assert generator.current_section(text) == generator.generated_section(), (
        "docs/authoring.md is out of date: run python scripts/authoring_guide.py"
    )


def test_every_field_of_the_schema_has_a_row():
    tables = _generator().field_tables(json_schema())
    schema = json_schema()
    objects = [schema, *schema["$defs"].values()]
    for fields in (o["properties"] for o in objects):
        for field in fields:
            assert f"| `{field}` |" in tables


def test_the_readme_links_to_the_guide():
    assert "(docs/authoring.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
