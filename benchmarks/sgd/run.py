"""Replay SGD dialogues through the public API and score every user turn as SGD scores a dialogue-state tracker.

    python -m benchmarks.sgd.run                                    # the oracle on the dev subset
    python -m benchmarks.sgd.run --all                              # ... on the whole dev split
    python -m benchmarks.sgd.run -m openai/smollm2 --api-base URL --api-key none --guided --json out.json
    python -m benchmarks.sgd.run ... --guided --without dates --without times   # ablations (--without list)

Each dialogue is a new ``Conversation`` of its service's definition (``benchmarks.sgd.convert``); each user turn
is ``send``; the context's slots after it are the tracker's state, and the conversation's state its active intent
(``start`` and ``done`` are SGD's ``NONE``). ``--mode teacher-forced`` (the default, the standard setting for a
tracker) records SGD's own system turn over our bot's reply before the next user turn (``Conversation.record``);
``--mode own`` leaves our bot's messages in the history. A conversation that ends stops taking turns: the turns
after it are scored on where it ended.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import llm_fsm
from benchmarks.sgd.ablation import FAMILIES, listing, without
from benchmarks.sgd.convert import definition, state_id
from benchmarks.sgd.data import DATA, Dialogue, load_dialogues, load_schemas, subset
from benchmarks.sgd.oracle import Oracle, gold_reply
from benchmarks.sgd.score import score_turn
from llm_fsm.errors import FSMError

# a first reply refused for one of these is not valid (llm_fsm.testing.scorecard counts valid first replies so)
INVALID_FIRST = ("format", "truncated", "target", "condition", "context_value")


@dataclass
class TurnRecord:
    dialogue: str
    service: str
    seen: bool
    index: int
    user: str
    gold_intent: str
    intent: str
    gold: dict[str, list[str]]
    predicted: dict[str, Any]
    joint: float
    average: float | None
    intent_right: bool
    invented: list[str]
    missed: list[str]
    wrong: list[str]
    sent: bool  # False: the conversation had ended before this turn
    first_valid: bool = True
    calls: int = 0
    seconds: float = 0.0
    error: str | None = None
    rejected: list[str] = field(default_factory=list)
    message: str = ""
    fits: bool | None = None  # the oracle: the first request's strict schema admitted the annotated reply


def play(dialogue: Dialogue, service: dict[str, Any], llm: Any, *, teacher_forced: bool) -> list[TurnRecord]:
    """One dialogue, turn by turn: what the conversation tracked after each user turn, scored."""
    made = llm_fsm.load(definition(service))
    intents = {state_id(intent["name"]): intent["name"] for intent in service["intents"]}
    slots = [slot["name"] for slot in service["slots"] if slot["name"] in made.context_schema]
    conversation = llm_fsm.Conversation(made, llm)
    conversation.start()
    records = []
    for index, turn in enumerate(dialogue.turns):
        before = {key: value for key, value in conversation.context.items() if key in slots}
        record: dict[str, Any] = {"sent": not conversation.ended}
        if record["sent"]:
            if isinstance(llm, Oracle):
                llm.answer, llm.fits = gold_reply(turn, before, conversation.state, slots), None
            started = time.perf_counter()
            try:
                result = conversation.send(turn.user)
            except FSMError as exc:  # a model that failed (a timeout...): the turn is scored where it was
                record.update(error=f"{type(exc).__name__}: {exc}", first_valid=False)
            else:
                first = [r for r in result.rejected if r.attempt == 1 and r.kind in INVALID_FIRST]
                record.update(
                    first_valid=not first, calls=result.llm_calls, message=result.message,
                    rejected=[f"{r.kind}: {r.reason}" for r in result.rejected],
                )  # fmt: skip
            record["seconds"] = time.perf_counter() - started
            if isinstance(llm, Oracle):
                record["fits"] = llm.fits
            # SGD's system turn answers this user turn: recorded over our reply, never over an earlier one
            if teacher_forced and turn.system and not record.get("error") and not conversation.ended:
                conversation.record(turn.system, replace=True)
        predicted = {key: value for key, value in conversation.context.items() if key in slots}
        intent = intents.get(conversation.state, "NONE")
        scored = score_turn(service, turn.slots, predicted, turn.intent, intent)
        records.append(
            TurnRecord(
                dialogue.id, dialogue.service, dialogue.seen, index, turn.user, turn.intent, intent, turn.slots,
                predicted, scored.joint, scored.average, scored.intent, list(scored.invented), list(scored.missed),
                list(scored.wrong), **record,
            )
        )  # fmt: skip
    return records


def summary(records: list[TurnRecord]) -> dict[str, Any]:
    """The figures of a set of turns: SGD's (JGA, average goal accuracy, active intent) and ours."""
    if not records:
        return {"turns": 0}
    sent = [r for r in records if r.sent]
    averaged = [r.average for r in records if r.average is not None]
    asked = [r for r in records if r.fits is not None]
    return {
        "dialogues": len({r.dialogue for r in records}),
        "turns": len(records),
        "joint_goal_accuracy": sum(r.joint for r in records) / len(records),
        "average_goal_accuracy": sum(averaged) / len(averaged) if averaged else None,
        "active_intent_accuracy": sum(r.intent_right for r in records) / len(records),
        "invented_turns": sum(bool(r.invented) for r in records) / len(records),
        "first_valid": sum(r.first_valid for r in sent) / len(sent) if sent else None,
        "calls_per_turn": sum(r.calls for r in sent) / len(sent) if sent else None,
        "seconds_per_turn": sum(r.seconds for r in sent) / len(sent) if sent else None,
        "errors": sum(r.error is not None for r in records),
        "refused_turns": sum(bool(r.rejected) for r in records),
        "admitted": sum(bool(r.fits) for r in asked) / len(asked) if asked else None,
    }


def report(records: list[TurnRecord]) -> dict[str, Any]:
    """All turns, seen and unseen services apart, and each service."""
    services = sorted({r.service for r in records})
    return {
        "all": summary(records),
        "seen": summary([r for r in records if r.seen]),
        "unseen": summary([r for r in records if not r.seen]),
        "services": {name: summary([r for r in records if r.service == name]) for name in services},
    }


def client(args: argparse.Namespace) -> Any:
    if args.model == "oracle":
        return Oracle(guided=args.guided)
    options: dict[str, Any] = {"max_tokens": args.max_tokens} if args.max_tokens else {}
    return llm_fsm.LiteLLMClient(
        args.model, api_base=args.api_base, api_key=args.api_key, temperature=args.temperature,
        timeout=args.timeout, response_format=args.response_format, guided=args.guided, **options,
    )  # fmt: skip


def _line(name: str, figures: dict[str, Any]) -> str:
    if not figures.get("turns"):
        return f"{name:<14} no turns"

    def pct(key: str) -> str:
        value = figures.get(key)
        return "   -  " if value is None else f"{100 * value:5.1f}%"

    calls, seconds = figures["calls_per_turn"], figures["seconds_per_turn"]
    return (
        f"{name:<14} {figures['dialogues']:>3} dlg {figures['turns']:>4} turns  JGA {pct('joint_goal_accuracy')}"
        f"  avg goal {pct('average_goal_accuracy')}  intent {pct('active_intent_accuracy')}"
        f"  invented {pct('invented_turns')}  valid first {pct('first_valid')}"
        f"  calls/turn {calls or 0:.2f}  s/turn {seconds or 0:.1f}  errors {figures['errors']}"
        + (f"  admitted {pct('admitted')}" if figures.get("admitted") is not None else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default="oracle", help='"oracle" (the annotation) or a litellm model name')
    parser.add_argument("--api-base")
    parser.add_argument("--api-key")
    parser.add_argument("--guided", action="store_true", help="guided reply schemas (a small model)")
    parser.add_argument("--response-format", default="auto")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--mode", choices=("teacher-forced", "own"), default="teacher-forced")
    parser.add_argument("--all", action="store_true", help="every dialogue of the split, not the dev subset")
    parser.add_argument("--service", action="append", help="only these services (repeat)")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--json", type=Path, help="write the figures and every turn's trace here")
    parser.add_argument(
        "--without", action="append", default=[], choices=[*FAMILIES, "list"], metavar="FAMILY",
        help="a family of guided rules off for the run (repeat; 'list' names them: benchmarks/sgd/ablation.py)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if "list" in args.without:
        print(listing())
        return 0
    if args.without and not args.guided:
        parser.error("--without turns off rules of guided mode: add --guided")
    schemas = load_schemas(args.data)
    dialogues = load_dialogues(args.data)
    dialogues = dialogues if args.all else subset(dialogues)
    if args.service:
        unknown = sorted(set(args.service) - set(schemas))
        if unknown:
            parser.error(
                f"--service: no service {', '.join(unknown)} in {args.data}; the services: {', '.join(schemas)}"
            )
        dialogues = [d for d in dialogues if d.service in args.service]
    if args.json and not args.json.parent.is_dir():
        parser.error(f"--json: {args.json.parent} is not a folder")
    llm = client(args)
    records: list[TurnRecord] = []
    started = time.perf_counter()
    with without(*args.without):
        for number, dialogue in enumerate(dialogues, 1):
            records += play(dialogue, schemas[dialogue.service], llm, teacher_forced=args.mode == "teacher-forced")
            if args.model != "oracle" or number % 100 == 0:
                print(_line(f"{number}/{len(dialogues)}", summary(records)), file=sys.stderr, flush=True)
            if args.json:  # after every dialogue: a run stopped half-way leaves the traces of what it played
                _write(args, records, time.perf_counter() - started)
    figures = _write(args, records, time.perf_counter() - started)
    for name in ("all", "seen", "unseen"):
        print(_line(name, figures[name]))
    return 0


def _write(args: argparse.Namespace, records: list[TurnRecord], seconds: float) -> dict[str, Any]:
    figures = report(records)
    figures["seconds"] = round(seconds, 1)
    figures["setup"] = {
        k: v if k == "without" else str(v) for k, v in vars(args).items() if k not in ("api_key", "json")
    }
    if args.json:
        args.json.write_text(json.dumps({**figures, "turns": [asdict(r) for r in records]}, indent=1) + "\n")
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
