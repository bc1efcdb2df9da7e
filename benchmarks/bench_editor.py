"""What a change in `llm-fsm edit` costs before the page shows its problems: is it live?

    python benchmarks/bench_editor.py [--runs 15] [--examples order_flow insurance_claim restaurant_booking]

For each example (copied to a temporary folder with its sub-definitions): `render` of the unchanged value
(the file's own text back) and of a value with one description changed (the writer scans and rewrites), then
`POST /api/check` of that edited value to the editor's real app (`create_editor_app` on uvicorn on 127.0.0.1,
one kept-alive httpx connection: the request the page sends), which renders, runs `validate --strict` on the
text and places each problem. The baseline, measured in the same run, is
`analyze` (what `llm-fsm validate --strict` runs) on the file itself: the check's ratio to it is what the editor
adds around the same analysis. Medians of `--runs` runs, in milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXAMPLES = ("order_flow", "insurance_claim", "restaurant_booking")


def median_ms(work: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` on uvicorn on a free loopback port, in a thread: its base URL."""
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as llm-fsm edit's socket
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def measure(name: str, folder: Path, runs: int) -> dict[str, float]:
    import httpx

    from llm_fsm.authoring.analysis import analyze
    from llm_fsm.editor.app import create_editor_app
    from llm_fsm.editor.document import EditedFile
    from llm_fsm.editor.json_edit import render

    path = folder / f"{name}.json"
    shutil.copy(ROOT / "fsm_definitions" / f"{name}.json", path)
    text = path.read_text(encoding="utf-8")
    value = json.loads(text)
    edited = json.loads(text)
    edited["description"] = "An edited description."
    app = create_editor_app(EditedFile(path), "token", port=None)
    with serving(app) as base, httpx.Client(base_url=base, headers={"Authorization": "Bearer token"}) as client:
        client.get("/api/file")  # the page reads the file first; its text is what edits render over
        checked = client.post("/api/check", json={"value": edited})
        assert checked.status_code == 200, checked.text
        check_ms = median_ms(lambda: client.post("/api/check", json={"value": edited}), runs)
    return {
        "bytes": len(text.encode("utf-8")),
        "render unchanged": median_ms(lambda: render(text, value), runs),
        "render one edit": median_ms(lambda: render(text, edited), runs),
        "check (API)": check_ms,
        "analyze (validate)": median_ms(lambda: analyze(path, strict=True), runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--examples", nargs="+", default=list(EXAMPLES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        shutil.copytree(ROOT / "fsm_definitions" / "subflows", folder / "subflows")
        rows = [(name, measure(name, folder, args.runs)) for name in args.examples]
    print(f"medians of {args.runs} runs, ms")
    columns = ("render unchanged", "render one edit", "check (API)", "analyze (validate)")
    print("| example | bytes | " + " | ".join(columns) + " | check / analyze |")
    print("|---|---|---|---|---|---|---|")
    for name, row in rows:
        ratio = row["check (API)"] / row["analyze (validate)"]
        cells = [f"{row[key]:.2f}" for key in columns]
        print(f"| {name} | {row['bytes']:.0f} | " + " | ".join(cells) + f" | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
