"""The one reader of the files people name (llm_fsm/named_files.py): the size limit and how it is told."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.named_files import FileRefused, NotARegularFile, read_bytes, size_text
from tests.conftest import ROOT


def test_sizes_read_as_a_person_writes_them():
    sizes = [0, 1, 300, 1024, 1536, 64 * 2**20, 300 * 2**20 + 7, 3 * 2**30]
    assert [size_text(n) for n in sizes] == [
        "0 bytes", "1 byte", "300 bytes", "1 KiB", "1.5 KiB", "64 MiB", "300 MiB", "3 GiB",
    ]  # fmt: skip


def test_a_file_over_the_limit_is_refused_naming_its_size_the_limit_and_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_FSM_MAX_FILE_BYTES", "1024")
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 1536)
    with pytest.raises(FileRefused) as refused:
        read_bytes(path, "definition")
    assert refused.value.strerror == "it is 1.5 KiB, over the limit of 1 KiB for a definition (LLM_FSM_MAX_FILE_BYTES)"
    path.write_bytes(b" " * 1024)
    assert read_bytes(path, "definition") == b" " * 1024  # the limit itself is allowed


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="Linux's /proc")
def test_no_more_than_the_limit_is_read_whatever_the_file_said_its_size_was(monkeypatch):
    # as a file that grew after it was looked at: /proc's files say they hold 0 bytes, and hold text
    monkeypatch.setenv("LLM_FSM_MAX_FILE_BYTES", "10")
    with pytest.raises(FileRefused) as refused:
        read_bytes("/proc/self/status", "test file")
    assert refused.value.strerror == (
        "it is at least 11 bytes, over the limit of 10 bytes for a test file (LLM_FSM_MAX_FILE_BYTES)"
    )


def test_a_socket_is_not_a_regular_file(tmp_path):
    import socket

    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(NotARegularFile, match="it is a socket, not a regular file"):
            read_bytes(path, "cassette")


@pytest.mark.parametrize("value", ["64M", "-1", "0", "lots"])
def test_a_limit_that_is_no_number_of_bytes_is_one_error_line(value):
    definition = str(ROOT / "fsm_definitions" / "small_talk.json")
    result = CliRunner().invoke(app, ["validate", definition], env={"LLM_FSM_MAX_FILE_BYTES": value})
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: cannot read {definition}: LLM_FSM_MAX_FILE_BYTES must be a whole number of bytes, not {value!r}"
    ]
