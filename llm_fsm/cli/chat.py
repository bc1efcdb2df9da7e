"""The interactive chat command."""

from __future__ import annotations
