"""Every turn of the courses, one line each: where the small model went, what it wrote, what the user read.

    python benchmarks/trace_courses.py --url http://127.0.0.1:PORT/v1 [--folder fsm_definitions]
        [--only a,b] [--plain] [--extra '{"extra_body": {"dry_multiplier": 0}}']

``--url``: a running ``scripts/local-model start`` server. Plays each definition's course (``scripts/NAME.txt``,
the states a scripted run of ``scripts/NAME.json`` reaches) once, guided unless ``--plain``, at temperature 0
with 256 tokens, and prints per turn the state it left, the state it reached and the expected one, the update
and the message; then the turns reached and the unusable messages (``llm_fsm.testing.message_quality``).
``llm-fsm eval`` gives the figures over several runs; this is where issue 28 read which turns each change
bought (``REAL_MODEL.md``). ``--extra``: more keyword arguments for ``LiteLLMClient`` (a sampling setting).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def play(path: Path, url: str, guided: bool, extra: dict[str, Any]) -> tuple[int, int, dict[str, int]]:
    import llm_fsm
    from llm_fsm.testing import message_quality, scorecard

    course = scorecard.course(path)
    llm = llm_fsm.LiteLLMClient("openai/smollm2", api_base=url, api_key="none", temperature=0, timeout=120,
                                response_format="json_schema", max_tokens=256, guided=guided, **extra)  # fmt: skip
    conversation = llm_fsm.Conversation(course.definition, llm, hooks=course.hooks)
    print(f"=== {course.name}")
    reached, written = 0, []
    for index, expected in enumerate(course.expected):
        user = None if index == 0 else course.lines[index - 1]
        if conversation.ended or conversation.paused:
            print(f"  [{index}] not played: the conversation stopped in {conversation.state} (expected {expected})")
            continue
        before = conversation.state
        result = conversation.start() if user is None else conversation.send(user)
        reached += result.state == expected
        if result.llm_calls and not result.fallback:
            written.append(result.message)
        mark = "OK" if result.state == expected else "XX"
        kinds = [r.kind for r in result.rejected]
        print(f"  [{index}] {mark} {before} -> {result.state} (expected {expected}) calls={result.llm_calls} {kinds}")
        print(f"       user: {user!r}\n       update: {json.dumps(result.context_updates)[:300]}")
        print(f"       message: {result.message[:160]!r}")
    quality = message_quality.counts(written, message_quality.prose_runs(course.definition))
    print(f"   unusable: {quality}")
    return reached, len(course.expected), quality


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--folder", default=str(Path(__file__).resolve().parent.parent / "fsm_definitions"))
    parser.add_argument("--only", default="", help="definitions to play, by name (default: every one with a course)")
    parser.add_argument("--plain", action="store_true", help="the plain strict schema (default: guided)")
    parser.add_argument("--extra", default="{}", help="JSON: more keyword arguments for LiteLLMClient")
    args = parser.parse_args()
    names = {name for name in args.only.split(",") if name}
    reached = total = 0
    unusable: dict[str, int] = {}
    for path in sorted(Path(args.folder).glob("*.json")):
        if (names and path.stem not in names) or not (path.parent / "scripts" / f"{path.stem}.txt").is_file():
            continue
        got, turns, quality = play(path, args.url, not args.plain, json.loads(args.extra))
        reached, total = reached + got, total + turns
        unusable = {key: unusable.get(key, 0) + value for key, value in quality.items()}
    print(f"reached {reached}/{total}; unusable messages {unusable}")


if __name__ == "__main__":
    main()
