"""Authoring commands: validate, graph, schema."""

from __future__ import annotations
