"""The screenshots of ``llm-fsm edit`` in docs/editor.md, taken of the real page in Debian's Chromium.

``python scripts/editor_screenshots.py`` opens ``fsm_definitions/order_flow.json`` and
``fsm_definitions/insurance_claim.json`` (copies, in a temporary folder: nothing of the checkout is written but
the pictures) in the editor (``llm-fsm edit FILE --no-browser``, in a child process), and writes
``docs/images/editor-order_flow.png`` and ``docs/images/editor-insurance_claim.png``. It needs playwright (the
``test`` extra) and ``chromium`` (``$LLM_FSM_CHROMIUM`` names another). ``tests/editor/test_editor_page.py``
checks that no two labels overlap on these two graphs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
# Each example, and the state selected in its picture (its form beside the graph).
SHOTS = {"order_flow": "review", "insurance_claim": "identity"}


def main() -> int:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("LLM_FSM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium is not installed (apt install chromium, or set LLM_FSM_CHROMIUM)", file=sys.stderr)
        return 2
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        shutil.copytree(ROOT / "fsm_definitions", Path(scratch) / "fsm_definitions")
        browser = playwright.chromium.launch(executable_path=chromium)
        for name, state in SHOTS.items():
            # the page names the file as given: fsm_definitions/NAME.json, as the docs do
            child, url = edit(f"fsm_definitions/{name}.json", cwd=scratch)
            try:
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                tab = context.new_page()
                tab.goto(url)
                tab.wait_for_function("() => window.editor && window.editor.cy && window.editor.idle()")
                tab.evaluate("state => window.editor.select('state', state)", state)
                tab.wait_for_timeout(200)
                out = IMAGES / f"editor-{name}.png"
                tab.screenshot(path=str(out))
                print(f"wrote {out.relative_to(ROOT)}")
                context.close()
            finally:
                child.terminate()
                child.wait(15)
        browser.close()
    return 0


def edit(path: str, cwd: str) -> tuple[subprocess.Popen[str], str]:
    """``llm-fsm edit PATH --no-browser`` in a child process, and the address it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "from llm_fsm.cli import entry_point; entry_point()"
    child = subprocess.Popen(
        [sys.executable, "-c", code, "edit", path, "--no-browser"], cwd=cwd, env=env, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    printed = child.stdout.readline()
    found = re.search(r" at (http://127\.0\.0\.1:\d+/\?token=\S+)", printed)
    if found is None:
        child.kill()
        raise SystemExit(f"llm-fsm edit printed no address: {printed!r}")
    return child, found[1]


if __name__ == "__main__":
    sys.exit(main())
