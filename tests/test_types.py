"""The package's annotations hold: mypy, strict, reports nothing on ``llm_fsm`` (settings: pyproject's
``[tool.mypy]``), and the package ships ``py.typed`` so that its users' type checkers read them.

mypy's cache lives in ``$XDG_CACHE_HOME/llm-fsm-test-mypy`` (by default ``~/.cache/llm-fsm-test-mypy``),
one folder per checkout: a first run checks the package and what it imports (about a minute on two
cores), a run after it only what changed (a few seconds).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-fsm-test-mypy"
    # one per checkout: two checkouts (worktrees, a CI clone) checked at once never share a cache
    return base / hashlib.sha256(str(ROOT.resolve()).encode()).hexdigest()[:16]


def test_mypy_reports_nothing_on_the_package(monkeypatch):
    try:
        from mypy import api
    except ImportError:  # pragma: no cover
        pytest.fail("mypy is not installed: pip install -e '.[test]'")
    monkeypatch.chdir(ROOT)  # pyproject.toml is found, and the paths in mypy's messages are the checkout's
    # mypy sets this for the config file it reads; put back what was there after
    monkeypatch.setenv("MYPY_CONFIG_FILE_DIR", os.environ.get("MYPY_CONFIG_FILE_DIR", ""))
    out, err, status = api.run(["--cache-dir", str(_cache_dir()), "--show-error-codes", "llm_fsm"])
    assert status == 0, f"mypy llm_fsm (status {status}):\n{out}{err}"
    assert out.startswith("Success: no issues found"), out


def test_every_type_ignore_names_its_error_and_says_why():
    """An ignore without a code hides any error (mypy refuses it: ignore-without-code); one without a
    reason leaves the next reader to guess whether it still holds."""
    loose = []
    for path in sorted((ROOT / "llm_fsm").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "type: ignore" in line and not re.search(r"# type: ignore\[[a-z-]+(, ?[a-z-]+)*\]  # \S", line):
                loose.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not loose, "each `# type: ignore[code]` needs `  # why` after it:\n" + "\n".join(loose)


def test_the_package_says_it_is_typed():
    assert (ROOT / "llm_fsm" / "py.typed").is_file()
