"""Issue 45 §5: the file store leaves nothing behind.

A save stopped between writing its temporary file and renaming it (SIGTERM, SIGKILL) leaves that file
only until the store is next opened, saved to or pruned; ``delete`` and ``prune`` remove a conversation's
temporary and lock files with it; none of this ever removes the file of a save under way in another
process, nor lets two processes hold a lock whose file was removed.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from llm_fsm.store import open_store
from llm_fsm.store.flocks import Flock
from tests.conftest import ROOT
from tests.store.test_store import snapshot_after

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock and signals")

# Saves c1 again (its version 2), paused between writing the temporary file and renaming it.
PAUSED_SAVE = """
import os, sys, time
sys.path.insert(0, {root!r})
from llm_fsm.store import open_store

store = open_store({url!r})
record = store.load("c1")
real = os.replace


def replace(source, target):
    if str(target).endswith("c1.json"):
        print("paused", flush=True)
        time.sleep(600)
    real(source, target)


os.replace = replace
store.save("c1", record.snapshot, expected_version=1)
"""


def temporaries(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


def paused_save(url: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSED_SAVE.format(root=str(ROOT), url=url)], stdout=subprocess.PIPE
    )
    assert child.stdout is not None and child.stdout.readline() == b"paused\n"
    return child


@pytest.mark.parametrize(
    "signal_number, then",
    [(signal.SIGKILL, "open"), (signal.SIGKILL, "save"), (signal.SIGKILL, "prune"), (signal.SIGTERM, "open")],
)
def test_a_save_killed_before_its_rename_leaves_no_temporary_file_and_loses_nothing(signal_number, then, tmp_path):
    folder = tmp_path / "conversations"
    url = f"file://{folder}"
    store = open_store(url)
    store.save("c1", snapshot_after(1))
    store.save("c2", snapshot_after(2))
    child = paused_save(url)
    try:
        assert len(temporaries(folder)) == 1, "the child is between writing and renaming"
        # another process opening and pruning the store meanwhile leaves the live save's file alone
        open_store(url).prune(timedelta(days=1))
        assert len(temporaries(folder)) == 1
    finally:
        child.send_signal(signal_number)
        child.wait(timeout=60)
    assert len(temporaries(folder)) == 1, "killed as systemd or docker kill, it left its temporary file"
    if then == "open":
        store = open_store(url)
    elif then == "save":
        assert store.save("c1", snapshot_after(3), expected_version=1) == 2  # the store opened before the kill
    else:
        assert store.prune(timedelta(days=1)) == 0
    assert temporaries(folder) == []
    assert {info.id: info.version for info in store.list()} == {"c1": 2 if then == "save" else 1, "c2": 1}
    assert [e.user for e in store.load("c2").snapshot.history] == ["message 0", "message 1"]


CLI_PAUSED_IN_ITS_SAVE = """
import os, sys, time
sys.path.insert(0, {root!r})
real = os.replace


def replace(source, target):
    if str(target).endswith(".json") and str(source).endswith(".tmp"):
        print("paused", flush=True)
        time.sleep(600)
    real(source, target)


os.replace = replace
sys.argv = ["llm-fsm", *{args!r}]
from llm_fsm.cli import entry_point

entry_point()
"""


def test_the_command_line_stopped_by_sigterm_in_a_save_removes_its_temporary_file_itself(tmp_path):
    folder = tmp_path / "conversations"
    inputs = tmp_path / "in.txt"
    inputs.write_text("hello\n", encoding="utf-8")
    args = ["run", str(ROOT / "fsm_definitions" / "small_talk.json"), "--model", "simulated"]
    args += ["--store", f"file://{folder}", "-c", "c1", "--input", str(inputs)]
    script = CLI_PAUSED_IN_ITS_SAVE.format(root=str(ROOT), args=args)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"paused\n"
        assert len(temporaries(folder)) == 1
    finally:
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM, stderr  # it ended as an exception would, not by the signal
    assert temporaries(folder) == [], "its finally blocks ran: the temporary file is gone before any other open"
    assert b"Traceback" not in stderr


def a_killed_first_save(folder: Path, conversation_id: str) -> None:
    """What a save killed before its rename leaves of a conversation never saved before, as it names its files."""
    (folder / f".{conversation_id}~write.lock").touch(mode=0o600)
    (folder / f".{conversation_id}~save.tmp").write_text("{", encoding="utf-8")


@pytest.mark.parametrize("how", ["delete", "prune"])
def test_delete_and_prune_leave_no_file_of_the_conversation(how, tmp_path, monkeypatch):
    folder = tmp_path / "conversations"
    store = open_store(f"file://{folder}")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 86400 * 30)  # c1 was last saved a month ago
    store.save("c1", snapshot_after(1))
    monkeypatch.setattr(time, "time", real)
    store.save("c2", snapshot_after(1))
    for conversation_id in ("c1", "c2"):
        with store.lock(conversation_id, timeout=1):
            pass
    (folder / ".c1~save.tmp").write_text("{", encoding="utf-8")  # a save of c1 killed before its rename
    if how == "delete":
        assert store.delete("c1") is True
    else:
        assert store.prune(timedelta(days=7)) == 1
    assert sorted(os.listdir(folder)) == [".c2.lock", ".c2~write.lock", "c2.json"]
    assert store.save("c1", snapshot_after(1), expected_version=0) == 1  # the id starts again


def test_opening_the_store_removes_what_dead_saves_and_turns_left_and_nothing_in_use(tmp_path):
    folder = tmp_path / "conversations"
    store = open_store(f"file://{folder}")
    store.save("kept", snapshot_after(1))
    (folder / ".kept.Ab3_x9zq.tmp").write_text("{", encoding="utf-8")  # as earlier versions named them
    a_killed_first_save(folder, "never")  # its first save was killed: no never.json
    with store.lock("never", timeout=1):  # and the turn that made it let go of its lock as it died
        pass
    a_killed_first_save(folder, "a.b")  # an id with a dot: its files are not "a"'s
    with store.lock("abandoned", timeout=1):  # a turn that failed before its first save
        pass
    (folder / ".note.tmp").write_text("not the store's", encoding="utf-8")  # no id's: left alone
    with store.lock("busy", timeout=1):  # a first turn under way in this process
        open_store(f"file://{folder}")
        assert ".busy.lock" in os.listdir(folder)
    assert sorted(os.listdir(folder)) == [".busy.lock", ".kept~write.lock", ".note.tmp", "kept.json"]
    assert open_store(f"file://{folder}").load("kept").version == 1


def test_a_lock_file_its_holder_removed_is_never_held_by_two(tmp_path, monkeypatch):
    # A waiter that opened the file before its holder removed it must not keep the lock of a file no one
    # opens any more while the next comer locks a new file at the same path.
    path = tmp_path / ".c~write.lock"
    holder, waiter, next_comer = Flock(path), Flock(path), Flock(path)
    assert holder.acquire(blocking=True)
    opened, locked = threading.Event(), threading.Event()
    real = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if threading.current_thread() is thread:
            opened.set()  # the waiter has the old file open, and waits for its lock
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    thread = threading.Thread(target=lambda: waiter.acquire(blocking=True) and locked.set())
    thread.start()
    assert opened.wait(30)
    holder.remove()
    holder.release()
    assert locked.wait(30)
    assert next_comer.acquire(blocking=False) is False, "the waiter holds the file at the path now"
    waiter.release()
    assert next_comer.acquire(blocking=True)
    next_comer.release()
    thread.join()


def test_a_delete_that_waited_for_a_killed_save_removes_what_the_save_left(tmp_path):
    folder = tmp_path / "conversations"
    store = open_store(f"file://{folder}")
    store.save("c1", snapshot_after(1))
    child = paused_save(f"file://{folder}")  # holds c1's write lock
    try:
        deleting = threading.Thread(target=store.delete, args=("c1",))
        deleting.start()  # waits for the child's save (or, if it starts late, finds its file)
    finally:
        child.kill()
        child.wait(timeout=60)
    deleting.join(timeout=60)
    assert not deleting.is_alive() and store.load("c1") is None
    assert store.save("c1", snapshot_after(2), expected_version=0) == 1
    assert temporaries(folder) == [] and sorted(os.listdir(folder)) == [".c1~write.lock", "c1.json"]
