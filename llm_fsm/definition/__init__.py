"""Definitions: the JSON format as pydantic models (``models``), read from files with every problem named
(``loader``), checked, and asked what they allow (``conditions``, ``reply_schema``, ``graph``). Nothing here runs a
conversation; everything above reads it."""
