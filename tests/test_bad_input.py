"""Bad input to the API: each entry point raises the library's own error, naming what is wrong, in one line."""

from __future__ import annotations

import pytest

from llm_fsm.errors import StoreError
from llm_fsm.store import open_store


@pytest.mark.parametrize(
    "url",
    ["redis://localhost:notaport/0", "redis://localhost:99999/0", "redis://", "redis://host/db0", "unix://",
     "file://relative/dir", "sqlite://rel.db", "sqlite:", "file:", "memory:x", "nosuch://x", "x.db", "",
     "sqlite:///tmp/x.db?mode=ro", "redis://localhost:6379/0?nosuch=1"],
)  # fmt: skip
def test_open_store_refuses_a_bad_url_with_a_store_error(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError) as info:
        open_store(url)
    assert repr(url) in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == [], "nothing was created"


def test_a_relative_store_path_is_relative_to_the_current_folder_and_three_slashes_are_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert open_store("sqlite:rel.db").url == f"sqlite://{tmp_path / 'rel.db'}"
    assert open_store("file:rel/dir").url == f"file://{tmp_path / 'rel' / 'dir'}"
    assert open_store(f"sqlite://{tmp_path / 'abs.db'}").url == f"sqlite://{tmp_path / 'abs.db'}"
    assert open_store(f"sqlite://{tmp_path / 'with%20space.db'}").url == f"sqlite://{tmp_path / 'with space.db'}"
    with pytest.raises(StoreError) as info:
        open_store("file://relative/dir")
    assert "file:relative/dir" in str(info.value) and f"file://{tmp_path / 'relative' / 'dir'}" in str(info.value)


def test_the_default_store_url_is_absolute_even_when_llm_fsm_home_is_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLM_FSM_HOME", "my home")
    assert open_store().url == f"sqlite://{tmp_path / 'my home' / 'conversations.db'}"
