"""The one file ``llm-fsm edit`` edits, and its layout side file: read, and saved only as the author meant.

A save writes the text :func:`llm_fsm.editor.json_edit.render` makes of the edited value over the text on disk,
atomically (a temporary file in the same folder, fsync, ``os.replace``), keeping the file's mode. It is refused
(:class:`Conflict`) when the bytes on disk no longer hash to the sha the page read: someone else changed the file
since, and writing would lose their change unless the author says so (``force``). When the bytes to write equal
the disk's, nothing is written (``unchanged``): opening and saving an example leaves it as it was, its time too.

Positions the author dragged nodes to live in ``<stem>.layout`` beside the definition (``order_flow.layout``),
``{"version": 1, "direction": "auto", "positions": {"<state id>": {"x": 12.5, "y": 40}}}``: not in the definition,
whose bytes then change only when its meaning does, and not ``.json``, which ``validate DIR`` and the examples'
globs read. ``direction`` is the way the automatic layout runs, as the author chose it (``TB`` top to bottom,
``LR`` left to right, ``auto`` the page's choice); a side file written before it existed reads as ``auto``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_fsm.editor.json_edit import render
from llm_fsm.named_files import read_bytes

LAYOUT_VERSION = 1
LAYOUT_SUFFIX = ".layout"
DIRECTIONS = ("auto", "TB", "LR")
_KEEP: Any = object()  # write_layout's direction when the request does not give one: the side file's stays


class EditorFileError(Exception):
    """The file (or its folder) cannot be read or written; the message names it and why."""


class LayoutError(ValueError):
    """Positions that are not ``{state id: {"x": number, "y": number}}``; the message names the first bad one."""


@dataclass(frozen=True)
class Snapshot:
    """The file as it is on disk now. ``text`` is None when the file does not exist or is not UTF-8 text
    (``problem`` then says why); ``sha`` is the sha256 of its bytes ("" when it does not exist)."""

    text: str | None
    sha: str
    exists: bool
    problem: str | None = None


@dataclass(frozen=True)
class Layout:
    """The side file as read: the positions the author dragged nodes to, the layout's direction, and, when the
    file is there but (part of it) cannot be used, why (what cannot be used is ignored: positions laid out
    afresh, the direction ``auto``)."""

    positions: dict[str, dict[str, float]]
    direction: str = "auto"
    problem: str | None = None


@dataclass(frozen=True)
class Saved:
    """A save that succeeded: the file's new sha and text; ``unchanged`` when nothing needed writing."""

    sha: str
    text: str
    unchanged: bool


@dataclass(frozen=True)
class Conflict:
    """A save refused: the disk's bytes (sha ``sha``; "" when the file is gone) are not those the page read.
    ``missing``: the file was there when the page read it and is gone now (moved or deleted), which the author
    is told apart from a change: reloading it would give an empty definition."""

    sha: str
    missing: bool = False


def sha_of(data: bytes | None) -> str:
    """The sha256 hex of a file's bytes; "" for a file that does not exist."""
    return "" if data is None else hashlib.sha256(data).hexdigest()


class EditedFile:
    """The definition file at ``path`` (as the user gave it: messages name it so), which need not exist yet."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.shown = str(path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def layout_path(self) -> Path:
        """``order_flow.json`` → ``order_flow.layout``, in the same folder."""
        return self.path.with_name(self.path.stem + LAYOUT_SUFFIX)

    # -- reading -----------------------------------------------------------------------------------

    def _bytes(self) -> bytes | None:
        """The file's bytes, None when it does not exist; :class:`EditorFileError` when it cannot be read."""
        try:
            return read_bytes(self.path, "definition")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise EditorFileError(f"cannot read {self.shown}: {exc.strerror or exc}") from None

    def read(self) -> Snapshot:
        """The file now. Its text keeps a byte order mark (as a character) and its line ends: the writer
        copies what did not change from it, byte for byte."""
        data = self._bytes()
        if data is None:
            return Snapshot(None, "", False)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = f"{self.shown} is not UTF-8 text (byte {exc.start}): a definition file is UTF-8"
            return Snapshot(None, sha_of(data), True, problem)
        return Snapshot(text, sha_of(data), True)

    # -- saving ------------------------------------------------------------------------------------

    def render(self, value: Any, original: str | None) -> str:
        """The text a save of ``value`` writes over ``original`` (the file's text, None for a new file)."""
        return render(original, value)

    def save(self, value: Any, base_sha: str, force: bool = False, base_text: str | None = None) -> Saved | Conflict:
        """Write ``value`` (rendered over the text on disk) unless the disk changed since the page read
        ``base_sha`` (then :class:`Conflict`, unless ``force``). :class:`EditorFileError` if it cannot be written.
        ``base_text`` is the text the page read: a file gone since is written anew in its format, not a fresh one."""
        data = self._bytes()
        disk_sha = sha_of(data)
        if disk_sha != base_sha and not force:
            return Conflict(disk_sha, missing=data is None)
        try:
            original = data.decode("utf-8") if data is not None else base_text
        except UnicodeDecodeError:
            original = None  # not text: forced over, it is written fresh
        text = self.render(value, original)
        encoded = text.encode("utf-8")
        if encoded == data:
            return Saved(disk_sha, text, True)
        write_atomically(self.path, encoded, self.shown)
        return Saved(sha_of(encoded), text, False)

    # -- layout ------------------------------------------------------------------------------------

    def read_layout(self) -> Layout:
        """The side file's positions and direction (none there: no positions, ``auto``); a file that cannot
        be used is ignored with the reason in ``problem``."""
        where = self.layout_path
        try:
            data = read_bytes(where, "layout")
        except FileNotFoundError:
            return Layout({})
        except OSError as exc:
            return Layout({}, problem=f"cannot read {where}: {exc.strerror or exc}; its positions are ignored")
        try:
            document = json.loads(data.decode("utf-8-sig"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            return Layout({}, problem=f"{where} is not JSON ({exc}); its positions are ignored")
        if not isinstance(document, dict) or document.get("version") != LAYOUT_VERSION:
            shape = '{"version": 1, "direction": ..., "positions": {...}}'
            return Layout({}, problem=f"{where} is not a layout file ({shape}); its positions are ignored")
        direction = "auto"
        problem: str | None = None
        try:
            direction = checked_direction(document.get("direction", "auto"), f"{where}: direction")
        except LayoutError as exc:
            problem = f"{exc}; the direction is ignored"
        try:
            positions = checked_positions(document.get("positions", {}), f"{where}: positions")
        except LayoutError as exc:
            return Layout({}, direction, f"{exc}; its positions are ignored")
        return Layout(positions, direction, problem)

    def write_layout(self, positions: Any, direction: Any = _KEEP) -> Layout:
        """Write ``positions`` and ``direction`` (each checked first: :class:`LayoutError`) to the side file,
        atomically. Without a ``direction``, the one the side file holds is kept."""
        checked = checked_positions(positions)
        kept = self.read_layout().direction if direction is _KEEP else checked_direction(direction)
        document = {"version": LAYOUT_VERSION, "direction": kept, "positions": checked}
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        write_atomically(self.layout_path, text.encode("utf-8"), str(self.layout_path))
        return Layout(checked, kept)


def checked_direction(direction: Any, where: str = "direction") -> str:
    """One of :data:`DIRECTIONS`, or :class:`LayoutError` saying which are."""
    if not isinstance(direction, str) or direction not in DIRECTIONS:
        choices = ", ".join(f'"{d}"' for d in DIRECTIONS)
        raise LayoutError(f"{where} must be one of {choices}, not {json.dumps(direction)}")
    return direction


def checked_positions(positions: Any, where: str = "positions") -> dict[str, dict[str, float]]:
    """``{state id: {"x": x, "y": y}}`` with finite numbers (not booleans), or :class:`LayoutError` naming the
    first entry that is not."""
    if not isinstance(positions, Mapping):
        raise LayoutError(f"{where} must be an object of state ids, not {type(positions).__name__}")
    checked: dict[str, dict[str, float]] = {}
    for state, position in positions.items():
        if not isinstance(state, str) or not state:
            raise LayoutError(f"{where}: a state id must be a non-empty string")
        if not isinstance(position, Mapping) or set(position) != {"x", "y"}:
            raise LayoutError(f'{where}.{state} must be {{"x": number, "y": number}}')
        for axis in ("x", "y"):
            number = position[axis]
            if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
                raise LayoutError(f"{where}.{state}.{axis} must be a finite number, not {json.dumps(number)}")
        checked[state] = {"x": position["x"], "y": position["y"]}
    return checked


def write_atomically(path: Path, data: bytes, shown: str) -> None:
    """Replace the file at ``path`` (a link's target) with ``data``: a temporary file in the same folder,
    flushed to disk, then renamed over it, so a crash leaves the old file or the new, never half of one.
    The file keeps its mode; a new file gets the mode the umask gives. :class:`EditorFileError` naming ``shown``."""
    target = Path(os.path.realpath(path))
    folder = target.parent
    if not folder.is_dir():
        raise EditorFileError(f"cannot write {shown}: the folder {folder} does not exist")
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    except OSError as exc:
        raise EditorFileError(f"cannot write {shown}: {exc.strerror or exc}") from None
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
        temporary = None
        _sync_folder(folder)
    except OSError as exc:
        raise EditorFileError(f"cannot write {shown}: {exc.strerror or exc}") from None
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _sync_folder(folder: Path) -> None:
    """Flush the folder's entry for the renamed file (POSIX; elsewhere opening a folder fails: skipped)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
