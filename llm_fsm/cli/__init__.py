"""The ``llm-fsm`` command line: the only package that imports typer and rich.

This module only assembles it. :mod:`~llm_fsm.cli.main` holds the Typer app, :mod:`~llm_fsm.cli.options`
the options that commands share and what they build; importing a command module registers its
commands on the app: ``run``, ``authoring`` (validate, graph, schema, paths), ``chat``, ``run_tests``
(test), ``evaluate`` (eval), ``conversations``, ``serve``, ``edit`` (the browser editor) and ``new`` (a bot's
starting files). Pydantic models, Jinja and litellm load inside the commands that use them, so
``llm-fsm --help`` starts fast.
"""

from llm_fsm.cli.main import app, entry_point

# --help lists the commands in the order their modules are imported.
# isort: off
from llm_fsm.cli import run, authoring, chat, run_tests, evaluate, conversations, serve, edit, new  # noqa: F401
# isort: on

__all__ = ["app", "entry_point"]
