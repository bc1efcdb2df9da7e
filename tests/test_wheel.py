"""The built wheel carries the templates and runs a turn outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

from tests.conftest import ROOT, reply

# litellm is left out on purpose: a scripted turn must not need it.
LIGHT_DEPENDENCIES = [
    "pydantic>=2.7",
    "jinja2>=3.1",
    "typer>=0.12",
    "rich>=13",
    "json-repair>=0.30",
]


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_virtualenv_and_runs_a_turn(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(
        ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__", "dist", "build")
    )
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(dist), str(source)], check=True, timeout=600)
    (wheel,) = dist.glob("llm_fsm_runtime-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    packaged = {name for name in names if name.startswith("llm_fsm/prompts/")}
    templates = {f"llm_fsm/prompts/{p.name}" for p in (ROOT / "prompts").glob("*.j2")}
    assert templates and packaged == templates
    assert "llm_fsm/py.typed" in names  # users' type checkers read the package's annotations
    page = {name for name in names if name.startswith("llm_fsm/server/static/")}  # the page of serve, Mermaid's license
    static = ROOT / "llm_fsm" / "server" / "static"
    files = {f"llm_fsm/server/static/{p.relative_to(static).as_posix()}" for p in static.rglob("*") if p.is_file()}
    assert "llm_fsm/server/static/vendor/mermaid/LICENSE" in files and page == files
    editor = {name for name in names if name.startswith("llm_fsm/editor/static/")}  # llm-fsm edit's page, its libraries
    static = ROOT / "llm_fsm" / "editor" / "static"
    files = {f"llm_fsm/editor/static/{p.relative_to(static).as_posix()}" for p in static.rglob("*") if p.is_file()}
    assert "llm_fsm/editor/static/vendor/cytoscape/LICENSE" in files and editor == files
    languages = {
        f"llm_fsm/guided/languages/{p.name}" for p in (ROOT / "llm_fsm" / "guided" / "languages").glob("*.json")
    }
    assert "llm_fsm/guided/languages/en.json" in languages and languages <= set(names)  # guided mode's words

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / "python"
    vpip = [str(python), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*vpip, "install", "--no-deps", str(wheel)], check=True, timeout=600)
    subprocess.run([*vpip, "install", *LIGHT_DEPENDENCIES], check=True, timeout=600)

    work = tmp_path / "elsewhere"
    work.mkdir()
    definition = work / "hello.json"
    definition.write_text(
        json.dumps(
            {
                "name": "hello",
                "initial_state": "greet",
                "states": {
                    "greet": {"purpose": "Greet", "transitions": [{"target_state": "bye"}]},
                    "bye": {"purpose": "Bye"},
                },
            }
        )
    )
    script = work / "script.json"
    script.write_text(json.dumps([reply("greet", "Hello!"), reply("bye", "Goodbye!")]))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(bindir / "llm-fsm"), "run", str(definition), "--model", f"scripted:{script}"],
        input="bye\n",
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    turns = [json.loads(line) for line in done.stdout.splitlines()]
    assert [t["state"] for t in turns] == ["greet", "bye"] and turns[-1]["message"] == "Goodbye!"
    where = subprocess.run(
        [str(python), "-c", "import llm_fsm; print(llm_fsm.__file__)"],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
    )
    assert str(env_dir) in where.stdout and str(ROOT) not in where.stdout
