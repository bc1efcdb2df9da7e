"""docs/ builds as a site (MkDocs, strict): a broken link or anchor, a page left out of the nav, or an object
of the API reference that cannot be found fails the build, and so this test. The README stays the short page
a newcomer reads first, and its map names every page of the guide."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    # NO_MKDOCS_2_WARNING: Material's notice about MkDocs 2 is not about our docs
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = build.stdout + build.stderr
    assert build.returncode == 0, output
    assert "WARNING" not in output, output
    return out


@pytest.mark.slow  # a subprocess: mkdocs build
def test_the_docs_build_in_strict_mode(site: Path):
    assert (site / "index.html").is_file()
    assert (site / "reference" / "conversation" / "index.html").is_file()


@pytest.mark.slow  # a subprocess: mkdocs build
def test_the_api_reference_has_every_public_name(site: Path):
    # mkdocstrings leaves out a member it cannot resolve without a warning: look for each name in the pages
    pages = "".join(path.read_text(encoding="utf-8") for path in (site / "reference").rglob("*.html"))
    missing = [name for name in llm_fsm.__all__ if name != "__version__" and f'id="llm_fsm.{name}"' not in pages]
    assert not missing, "not in the API reference (docs/reference/): " + ", ".join(missing)


def test_the_readme_opens_with_the_install_and_the_test_commands():
    # CI runs the README's second bash block as the test command
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks[0].startswith("pip install -e . && llm-fsm run ")
    assert blocks[1] == "pip install -e '.[test]' && python -m pytest -q\n"


def test_the_readme_maps_every_page_of_the_guide():
    readme = README.read_text(encoding="utf-8")
    pages = [path.name for path in (ROOT / "docs").glob("*.md") if path.name != "index.md"]
    assert not [page for page in pages if f"(docs/{page}" not in readme]


def test_the_readme_stays_a_page_read_in_five_minutes():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300, "move the detail into docs/"


def test_the_readme_definition_validates_without_a_warning(tmp_path: Path):
    readme = README.read_text(encoding="utf-8")
    (example,) = [block for block in re.findall(r"```json\n(.*?)```", readme, re.DOTALL) if "initial_state" in block]
    path = tmp_path / "signup.json"
    path.write_text(example, encoding="utf-8")
    checked = CliRunner().invoke(app, ["validate", str(path), "--strict"])  # --strict: a warning fails it
    assert checked.exit_code == 0, checked.output
