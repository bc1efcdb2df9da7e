"""A scorecard for a model: how well it drives definitions through conversations whose course is known.

A *course* is a definition, the user's lines, and the state each turn should reach. The states come
from a scripted run (the model replies of ``scripts/<name>.json`` next to ``scripts/<name>.txt``,
played with :class:`~llm_fsm.testing.ScriptedLLM`), so any example with a script is a course. The
model under test then plays the same lines; each turn is scored: did it reach the expected state,
was its first reply valid, how many calls, tokens and seconds did it take, and what was refused.
``llm-fsm eval`` prints the card; :func:`score` and :func:`summary` are the library form.
"""

from __future__ import annotations

import codecs
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llm_fsm.conversation import Conversation
from llm_fsm.definition.json_problems import encoding_message
from llm_fsm.definition.loader import load
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import DefinitionError, FSMError, LLMError, ScriptExhausted
from llm_fsm.hooks import Hooks
from llm_fsm.llm import LLMClient
from llm_fsm.named_files import read_bytes
from llm_fsm.testing import message_quality
from llm_fsm.testing.scripted import ScriptedLLM
from llm_fsm.turn.runner import TurnResult

QUALITY = tuple(f"{kind}_messages" for kind in message_quality.KINDS)

# kinds of refusal that mean the model's first reply was not a valid move (a dropped key is not)
_INVALID_FIRST = ("format", "truncated", "target", "condition", "context_value")


@dataclass(frozen=True)
class Course:
    """A definition, the user's lines, and the state the opening and each line should reach."""

    name: str
    definition: FSMDefinition
    lines: tuple[str, ...]
    expected: tuple[str, ...]  # len(lines) + 1: the opening's state first
    hooks: Hooks = field(default_factory=Hooks)
    replies: Path | None = None  # the scripted replies that made ``expected``
    # the course file's lines the scripted run never reached (it ended or paused first), and the scripted replies
    # it never used: what the author wrote that the course does not play (``llm-fsm eval`` notes both)
    unplayed: tuple[int, ...] = ()
    unused_replies: int = 0
    # per turn of ``expected``: the keys whose value the scripted run set or changed there ("make it Friday")
    changed: tuple[frozenset[str], ...] = ()

    def scripted(self) -> LLMClient:
        """A fresh client of the course's own scripted replies: the course played offline, as it was made."""
        if self.replies is None:
            raise FSMError(f"{self.name}: the course has no scripted replies")
        return ScriptedLLM.from_file(self.replies)


@dataclass
class TurnScore:
    user: str | None
    expected: str
    state: str | None
    reached: bool
    first_valid: bool
    calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    rejected: list[str]
    error: str | None = None
    cached_tokens: int = 0  # of prompt_tokens: served from the provider's prompt cache
    message: str = ""  # what the user read
    written: bool = False  # the model wrote the message (not the definition's opening, not the fallback)
    reasons: list[str] = field(default_factory=list)  # each refusal's reason, in the order of ``rejected``
    unusable: list[str] = field(default_factory=list)  # why a person could not use its message (message_quality)
    # the collected keys the model changed where the scripted run kept them (a name rewritten "thats" on "yep")
    overwrote: list[str] = field(default_factory=list)


@dataclass
class CourseScore:
    name: str
    turns: list[TurnScore]
    expected_end: str
    end: str | None
    course_turns: int = 0  # the course's length: turns not played (it ended or paused early) count as missed
    # the model's messages a person could not use (see llm_fsm.testing.message_quality)
    quality: dict[str, int] = field(default_factory=dict)
    paused: bool = False  # it stopped at a pause (a breaking hook, a tool call waiting for approval), not an end

    @property
    def finished(self) -> bool:
        return self.end == self.expected_end


def _user_lines(lines_file: Path) -> list[tuple[int, str]]:
    """The user's lines of ``lines_file``, each with its number in the file (lines end as a text file's do,
    not at a form feed), blank lines skipped: an error names the line the author sees. FSMError if none."""
    try:
        raw = read_bytes(lines_file, "file of user lines")
        bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0  # an editor's mark, not the user's word
        text = raw[bom:].decode("utf-8")
    except OSError as exc:
        raise FSMError(f"{lines_file}: cannot read the user's lines: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        why = encoding_message(raw, bom + exc.start)
        raise FSMError(f"{lines_file}: cannot read the user's lines: {why}") from None
    split = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    numbered = [(number, line) for number, line in enumerate(split, 1) if line.strip()]
    if not numbered:
        raise FSMError(f"{lines_file}: no user lines (one per line)")
    return numbered


def course(path: str | Path, scripts: str | Path | None = None, hooks: Hooks | None = None) -> Course:
    """The course of the definition at ``path``: ``scripts/<name>.txt`` (user lines) and the states a
    scripted run of ``scripts/<name>.json`` reaches (``scripts`` defaults to the definition's folder's
    ``scripts``; ``hooks`` to ``hooks/<name>.py:hooks`` there, when it exists). FSMError if missing."""
    path = Path(path)
    folder = Path(scripts) if scripts is not None else path.parent / "scripts"
    definition = load(path)
    given, hooks = hooks, hooks if hooks is not None else _hooks_next_to(path)
    lines_file, replies_file = folder / f"{path.stem}.txt", folder / f"{path.stem}.json"
    # not is_file(): a FIFO or a folder there is read, and refused in words of its own
    missing = [str(file) for file in (lines_file, replies_file) if not file.exists()]
    if missing:
        raise FSMError(f"{path.name}: no course (needs {' and '.join(missing)})")
    numbered = _user_lines(lines_file)
    try:
        scripted = ScriptedLLM.from_file(replies_file)
        conversation = Conversation(definition, scripted, hooks=hooks)
        expected, changed = [conversation.start().state], [frozenset[str]()]
        for number, line in numbered:
            if conversation.ended or conversation.paused:
                break
            state, before = conversation.state, conversation.context
            result = conversation.send(line)
            if result.llm_calls and len({r.attempt for r in result.rejected}) >= result.llm_calls:
                raise FSMError(_refused(replies_file, f"line {number} of {lines_file.name}", state, result))
            expected.append(result.state)
            after = conversation.context
            changed.append(frozenset(key for key in {*before, *after} if before.get(key) != after.get(key)))
    except ScriptExhausted as exc:
        # the replies end early, or one was refused and its corrective call took the reply after it
        why = f"{exc}: the replies end before {lines_file.name} does, or one was refused and a corrective call took"
        raise FSMError(f"{replies_file}: {why} the reply after it (llm-fsm run shows which)") from None
    except LLMError as exc:  # not a script of replies (it names its file)
        raise FSMError(str(exc)) from None
    except DefinitionError as exc:  # code the definition names: say where it was looked for
        unbound = any(problem.code.startswith("unbound_") for problem in exc.problems)
        if not unbound or given is not None:
            raise
        module = path.parent / "hooks" / f"{path.stem}.py"
        where = "a course takes its tools, handlers and checks from the Hooks object named hooks in"
        found = (
            f"{where} {module}, which registers none of that name" if module.is_file() else f"no {module}: {where} it"
        )
        raise FSMError(f"{exc}\n  ({found})") from None
    played = len(expected) - 1
    return Course(
        path.stem, definition, tuple(line for _, line in numbered[:played]), tuple(expected), hooks, replies_file,
        unplayed=tuple(number for number, _ in numbered[played:]), unused_replies=scripted.remaining,
        changed=tuple(changed),
    )  # fmt: skip


def _refused(replies: Path, line: str, state: str, result: TurnResult) -> str:
    """Why a scripted reply cannot make a course: what was refused of the first reply to ``line`` (the script's
    mistake, to fix there: a corrective call took the reply after it, and every later line is off by one)."""
    first = [r for r in result.rejected if r.attempt == 1] or result.rejected[-1:]
    keys = [r for r in first if r.kind == "context_key" and r.key]
    # a key's reason reads "context key 'k' is not writable in this state (writable: ...)": said of the key
    why = [f"'{r.key}' {r.reason.removeprefix(f'context key {r.key!r} ')}" for r in keys]
    why = ([f"writes keys state '{state}' does not let the model write: {'; '.join(why)}"] if why else []) + [
        f"{r.kind}: {r.reason}" for r in first if r not in keys
    ]
    later = " (a corrective call took the reply after it)" if result.llm_calls > 1 else ""
    return f"{replies}: the scripted reply to {line}, in state '{state}', is refused{later}: {'; '.join(why)}"


def _hooks_next_to(path: Path) -> Hooks:
    module = path.parent / "hooks" / f"{path.stem}.py"
    return Hooks.load(f"{module}:hooks") if module.is_file() else Hooks()


def score(course: Course, llm: LLMClient, **options: Any) -> CourseScore:
    """Play ``course`` with ``llm``; a failed turn (the model call failed) ends the course there."""
    conversation = Conversation(course.definition, llm, hooks=course.hooks, **options)
    turns: list[TurnScore] = []
    for index, expected in enumerate(course.expected):
        user = None if index == 0 else course.lines[index - 1]
        if conversation.ended or conversation.paused:
            break
        started, before = time.perf_counter(), conversation.context
        try:
            result = conversation.start() if user is None else conversation.send(user)
        except FSMError as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            seconds = time.perf_counter() - started
            turns.append(TurnScore(user, expected, None, False, False, 0, 0, 0, seconds, [], text))
            break
        turns.append(_turn(user, expected, result, time.perf_counter() - started))
        turns[-1].overwrote = _overwrote(result, before, conversation.context, course, index)
    written = [t for t in turns if t.written]
    prose = message_quality.prose_runs(course.definition)
    found = message_quality.judged([t.message for t in written], prose, [t.user for t in written])
    for turn, kinds in zip(written, found, strict=True):
        turn.unusable = kinds
    quality = message_quality.tally(found)
    return CourseScore(
        course.name, turns, course.expected[-1], conversation.state, len(course.expected), quality, conversation.paused
    )


def _turn(user: str | None, expected: str, result: TurnResult, seconds: float) -> TurnScore:
    first = [r for r in result.rejected if r.attempt == 1 and r.kind in _INVALID_FIRST]
    return TurnScore(
        user, expected, result.state, result.state == expected, not first, result.llm_calls,
        result.usage.prompt_tokens, result.usage.completion_tokens, seconds, [r.kind for r in result.rejected],
        cached_tokens=result.usage.cached_tokens, message=result.message,
        written=bool(result.llm_calls) and not result.fallback, reasons=[r.reason for r in result.rejected],
    )  # fmt: skip


def _overwrote(
    result: TurnResult, before: dict[str, Any], after: dict[str, Any], course: Course, index: int
) -> list[str]:
    """The keys whose collected value the model's update changed (``before`` -> ``after``, and the corrections a
    sub-conversation reports) where the scripted run's turn ``index`` left them as they were."""
    changed = {key for key in result.context_updates if before.get(key) is not None and after.get(key) != before[key]}
    script = course.changed[index] if index < len(course.changed) else frozenset()
    return sorted((changed | set(result.corrections)) - script)


def summary(scores: Iterable[CourseScore]) -> dict[str, Any]:
    """The card's figures over ``scores``: rates, means per turn, and refusals by kind."""
    scores = list(scores)
    turns = [t for s in scores for t in s.turns]
    # the model's turns: a turn the definition wrote (a state's own opening) made no call, so it says
    # nothing about the model, and counting it would lower calls per turn for a call that never happened
    modelled = [t for t in turns if t.calls or t.error is not None]
    count = len(modelled) or 1
    course_turns = sum(max(s.course_turns, len(s.turns)) for s in scores)
    kinds = Counter(kind for t in turns for kind in t.rejected)
    return {
        "courses": len(scores),
        "course_turns": course_turns,
        "turns": len(turns),  # played
        "model_turns": len(modelled),  # played with a model call: the means per turn below are over these
        "reached": sum(t.reached for t in turns),
        "reached_rate": sum(t.reached for t in turns) / (course_turns or 1),
        "finished": sum(s.finished for s in scores),
        "first_valid_rate": sum(t.first_valid for t in modelled) / count,
        "calls_per_turn": sum(t.calls for t in modelled) / count,
        "prompt_tokens_per_turn": sum(t.prompt_tokens for t in modelled) / count,
        "cached_tokens_per_turn": sum(t.cached_tokens for t in modelled) / count,
        "completion_tokens_per_turn": sum(t.completion_tokens for t in modelled) / count,
        "seconds_per_turn": sum(t.seconds for t in modelled) / count,
        "errors": sum(t.error is not None for t in turns),
        # the model's messages a person could not use, summed over the conversations
        **{name: sum(s.quality.get(name, 0) for s in scores) for name in QUALITY},
        # collected values the model changed where the scripted run kept them
        "overwritten_values": sum(len(t.overwrote) for t in turns),
        "rejected": dict(sorted(kinds.items())),
    }


def run(
    courses: Iterable[Course],
    make_llm: Callable[[Course], LLMClient],
    *,
    repeat: int = 1,
    on_score: Callable[[int, CourseScore], None] | None = None,
    **options: Any,
) -> list[list[CourseScore]]:
    """Every course ``repeat`` times, each play with a fresh client (``make_llm(course)``: ``Course.scripted``
    plays each course with its own replies); one list of scores per run."""
    courses = list(courses)
    runs = []
    for number in range(1, max(1, repeat) + 1):
        scores = []
        for each in courses:
            scores.append(score(each, make_llm(each), **options))
            if on_score is not None:
                on_score(number, scores[-1])
        runs.append(scores)
    return runs


def as_json(runs: list[list[CourseScore]]) -> str:
    """The runs as JSON: per run, each course's turns and summary, and the run's overall summary."""
    document = [
        {
            "overall": summary(scores),
            "courses": [
                {
                    "name": s.name,
                    "end": s.end,
                    "paused": s.paused,
                    "summary": summary([s]),
                    "turns": [asdict(t) for t in s.turns],
                }
                for s in scores
            ],
        }
        for scores in runs
    ]
    return json.dumps({"runs": document}, indent=2, ensure_ascii=False)
