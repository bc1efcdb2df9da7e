"""``llm-fsm serve``: conversations over HTTP (``pip install 'llm-fsm-runtime[server]'``: FastAPI, uvicorn).

:func:`create_app` is the library entry point: an ASGI app serving one or more definitions. This
package and the editor's own server (``llm_fsm/editor/app.py``) alone import FastAPI and Starlette;
importing ``llm_fsm`` never loads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_fsm.server.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from llm_fsm.server.app import create_app

        return create_app
    raise AttributeError(f"module 'llm_fsm.server' has no attribute {name!r}")
