"""``llm-fsm conversations list|show|delete|unlock|prune``: look after stored conversations.

An id given takes the id ``llm-fsm serve`` answered with as well as the stored id (``CLIENT@ID``, as ``list``
shows it): see :func:`~llm_fsm.cli.conversation_factory.stored_id`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from llm_fsm.cli.conversation_factory import stored_id
from llm_fsm.cli.main import app, fail
from llm_fsm.cli.options import ShowSecretsOption, StoreOption
from llm_fsm.cli.shown import as_text, json_text
from llm_fsm.errors import StoreError

if TYPE_CHECKING:
    from llm_fsm.store import Store

group = typer.Typer(help="List, show, delete, unlock and prune stored conversations.", no_args_is_help=True)
app.add_typer(group, name="conversations")
console = Console(highlight=False)

IdArgument = Annotated[
    str,
    typer.Argument(
        metavar="ID",
        help="The conversation's id, as run, chat or llm-fsm serve gave it (CLIENT@ID: that client's, as list "
        "shows it).",
    ),
]
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``15m``, ``45s``, ``2w`` or plain seconds."""
    match = _DURATION.match(text)
    if not match:
        raise typer.BadParameter(f"{text!r} is not a duration such as 30d, 12h, 15m or 45s")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


@contextmanager
def _opened(url: str | None, conversation_id: str | None = None) -> Iterator[Store]:
    """The store named, closed afterwards. A bad URL or id exits 2; a store that fails while used, 1."""
    from llm_fsm.store import check_id, open_store

    try:
        if conversation_id is not None:
            check_id(conversation_id)
        store = open_store(url, create=url is None)  # a store named is looked at, never made by a typo
    except StoreError as exc:
        fail(str(exc), 2)
    try:
        yield store
    except StoreError as exc:  # unreadable data, a server gone
        fail(str(exc), 1)
    finally:
        store.close()


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@group.command("list")
def list_(
    store: StoreOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object per conversation.")] = False,
) -> None:
    """The stored conversations, most recent first."""
    with _opened(store) as opened:
        infos = opened.list()
    if json_output:
        for info in infos:
            typer.echo(json.dumps(info.__dict__))
        return
    from rich.table import Column, Table

    # the id whole, on one line, however narrow the terminal (or a pipe): it is what the other commands take
    widest = max((len(info.id) for info in infos), default=2)
    table = Table(Column("id", no_wrap=True, min_width=widest), "definition", "state", "status", "turns", "saved")
    for info in infos:
        cells = info.id, info.definition_name, info.state, info.status, str(info.turns), _when(info.updated_at)
        table.add_row(*map(as_text, cells))  # a str cell would be read as markup
    console.print(table if infos else "No stored conversations.")


@group.command()
def show(
    conversation_id: IdArgument,
    store: StoreOption = None,
    show_secrets: ShowSecretsOption = False,
) -> None:
    """One conversation as JSON: state, context, provenance, history, pending event, memory, summary."""
    from llm_fsm.store.history import whole

    with _opened(store, conversation_id) as opened:
        record = opened.load(stored_id(opened, conversation_id))
        # the whole history, read page by page: a load carries only its tail
        snapshot = whole(opened, record.id, record.snapshot) if record is not None else None
    if record is None or snapshot is None:
        fail(f"no conversation {conversation_id!r} in this store", 1)
    document = {"id": record.id, "version": record.version, "saved": _when(record.updated_at)}
    document |= snapshot.model_dump(mode="json")
    typer.echo(json_text(document if show_secrets else _masked(document), indent=2))


def _masked(document: dict[str, Any]) -> dict[str, Any]:
    """Secret-looking values of the context, the working memory and a pause's payload masked (with the
    default rules: the definition, and so its ``secret_keys``, is not at hand here)."""
    from llm_fsm.secrets import mask, mask_pending

    masked = {"context": mask(document["context"]), "pending": mask_pending(document["pending"], mask)}
    return {**document, **masked, "memory": mask(document.get("memory") or {})}


@group.command()
def delete(conversation_id: IdArgument, store: StoreOption = None) -> None:
    """Delete one conversation."""
    with _opened(store, conversation_id) as opened:
        deleted = opened.delete(found := stored_id(opened, conversation_id))
    if not deleted:
        fail(f"no conversation {conversation_id!r} in this store", 1)
    typer.echo(f"deleted {found}")


@group.command()
def unlock(conversation_id: IdArgument, store: StoreOption = None) -> None:
    """Release a conversation's turn lock by force (a lock whose holder died expires by itself within seconds)."""
    with _opened(store, conversation_id) as opened:
        released = opened.unlock(found := stored_id(opened, conversation_id))
    typer.echo(f"unlocked {found}" if released else f"{found} was not locked")


@group.command()
def prune(
    older_than: Annotated[
        timedelta, typer.Option("--older-than", parser=parse_duration, help="e.g. 30d, 12h, 15m, 45s.")
    ],
    store: StoreOption = None,
) -> None:
    """Delete conversations not saved for longer than --older-than."""
    with _opened(store) as opened:
        count = opened.prune(older_than)
    typer.echo(f"deleted {count} conversation{'s' if count != 1 else ''} not saved for {older_than}")
