"""Issue 12 §6: every file a store writes that holds conversation data is 0600, its new folders 0700."""

from __future__ import annotations

import os
import stat

import pytest

import llm_fsm
from llm_fsm.store import open_store
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def a_snapshot(signup):
    conversation = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_name", "Your name?")]))
    conversation.start()
    return conversation.snapshot()


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_store_files_are_private_and_their_new_folders_too(kind, tmp_path, signup):
    old = os.umask(0o022)  # the usual umask, under which files are 0644 unless created private
    try:
        where = tmp_path / "new" / "deeper"
        url = f"sqlite://{where}/c.db" if kind == "sqlite" else f"file://{where}"
        store = open_store(url)
        store.save("c1", a_snapshot(signup))
        with store.lock("c1"):
            pass
        store.close()
    finally:
        os.umask(old)
    assert mode(tmp_path / "new") == mode(where) == 0o700
    files = [p for p in where.iterdir() if p.is_file()]
    assert files, "the store wrote something"
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}


def test_the_default_store_folder_is_private(tmp_path, monkeypatch, signup):
    home = tmp_path / "home"
    monkeypatch.setenv("LLM_FSM_HOME", str(home))
    store = open_store()
    store.save("c1", a_snapshot(signup))
    store.close()
    assert mode(home) == 0o700 and mode(home / "conversations.db") == 0o600


def test_file_store_lock_files_of_two_ids_never_coincide(tmp_path, signup):
    store = open_store(f"file://{tmp_path}/files")
    with store.lock("alice.write", timeout=1):  # a turn of one conversation...
        store.save("alice", a_snapshot(signup))  # ...does not hold up another one's save
        with store.lock("alice", timeout=0.5):
            pass
    names = {p.name for p in (tmp_path / "files").iterdir() if p.name.endswith(".lock")}
    assert len(names) == len({n.lower() for n in names}) and ".alice.write.lock" in names


def test_a_file_store_writes_through_a_hidden_temporary_file_named_after_its_conversation(
    tmp_path, signup, monkeypatch
):
    # What a process killed mid-write leaves: a hidden ".<id>~save.tmp" beside the conversations, never
    # listed and telling whose it was (the next save writes over it), and never a half-written "<id>.json".
    store = open_store(f"file://{tmp_path}")
    written = []
    real = os.replace

    def replace(source, target):
        written.append((os.path.basename(source), os.path.basename(target)))
        real(source, target)

    monkeypatch.setattr(os, "replace", replace)
    store.save("c1", a_snapshot(signup))
    [(temporary, target)] = written
    assert (temporary, target) == (".c1~save.tmp", "c1.json")
    assert [name for name in os.listdir(tmp_path) if name.endswith(".tmp")] == []  # renamed into place
