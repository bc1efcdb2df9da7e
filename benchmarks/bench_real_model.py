"""The scorecard of the local model (SmolLM2-135M on llama-server) under each reply variant.

    python scripts/local-model provision
    python benchmarks/bench_real_model.py [--variants plain,guided] [--examples a,b] [--repeat N] [--json out.json]
                                          [--model-opens]

Starts its own server (``scripts/local-model start --name bench``), plays every example's course
(``llm_fsm.testing.scorecard``) once per variant at temperature 0 with ``max_tokens`` 256 and the
strict JSON schema, prints one line per variant, and stops the server. The variants:

- ``plain``: the default reply schema and prompt (what ``LiteLLMClient(response_format="json_schema")`` sends);
- ``plain-no-map``, ``guided-no-map``: ``plain`` and ``guided`` with the prompt's ``<state_map>`` left out;
- ``plain-rules-first``, ``guided-rules-first``: the reply rules opening the prompt (issue 26's first order);
- ``plain-rules-before-state``, ``guided-rules-before-state``: the reply rules just before the current state;
- ``plain-history-early``: the history just after the definition-wide part;
- ``plain-update-first``: the same, with ``context_update`` before ``target_state`` in the schema;
- ``guided-lazy``: the guided schema (``llm_fsm.guided.schema``) without tying "stay" to null values;
- ``guided-wide``: the guided schema without the values the conditions' comparisons allow;
- ``guided-plain-prompt``: the guided schema with the default prompt (which shows the other key order);
- ``guided-short-prompt``: the guided schema with a prompt cut to the state, its moves and the context;
- ``guided``: what ``--guided`` / ``LiteLLMClient(guided=True)`` does.

Rounds 4 to 6 of ``REAL_MODEL.md`` measured three more (``guided-no-template``, ``guided-no-examples``,
``guided-capped``): ``guided`` now is ``guided-capped``; ``git show a15b8e2:benchmarks/bench_real_model.py``
has them.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llm_fsm import LiteLLMClient  # noqa: E402
from llm_fsm.definition.models import FSMDefinition  # noqa: E402
from llm_fsm.definition.reply_schema import writable_keys
from llm_fsm.guided.schema import guided_schema  # noqa: E402
from llm_fsm.llm import LLMRequest, LLMResponse  # noqa: E402
from llm_fsm.testing import scorecard  # noqa: E402
from llm_fsm.turn.prompt import OPENING_REQUEST  # noqa: E402

EXAMPLES = ["form_filling", "order_flow", "quiz", "restaurant_booking", "small_talk", "support_triage"]
Rewrite = Callable[[LLMRequest, FSMDefinition], LLMRequest]


def update_first(request: LLMRequest, _definition: FSMDefinition) -> LLMRequest:
    schema = copy.deepcopy(request.strict_schema)
    if schema is not None:
        transition = schema["properties"]["transition"]
        props = transition["properties"]
        transition["properties"] = {"context_update": props["context_update"], "target_state": props["target_state"]}
        transition["required"] = ["context_update", "target_state"]
    return dataclasses.replace(request, strict_schema=schema)


def guided_with(**options: Any) -> Rewrite:
    def rewrite(request: LLMRequest, definition: FSMDefinition) -> LLMRequest:
        if request.strict_schema is None or request.state is None:
            return request
        opening = request.messages[-1]["content"] == OPENING_REQUEST
        context = request.context or {}
        schema = guided_schema(definition, request.state, context, opening=opening, back_to=request.back_to, **options)
        if "anyOf" in request.strict_schema:  # a state with tools, in the JSON form: keep the tool request
            schema = {"anyOf": [schema, request.strict_schema["anyOf"][1]]}
        return dataclasses.replace(request, strict_schema=schema)

    return rewrite


def short_prompt(request: LLMRequest, definition: FSMDefinition) -> LLMRequest:
    """The state, what to take from the message, the moves and the context: no history, no guidelines."""
    request = guided_with()(request, definition)
    state = definition.states[request.state or definition.initial_state]
    keys = writable_keys(state, definition.code_only_keys)
    lines = [definition.persona or "", f"Step: {state.purpose}", (state.instructions or "").strip()]
    if keys:
        lines.append(f"Take from the user's message: {', '.join(keys)} (null for what the user did not say).")
    lines.append("Moves (target_state):")
    for transition in definition.moves(state.id, request.back_to):  # global ones too, "$return" resolved
        when = "; ".join(c.description for c in transition.conditions) or "any time"
        lines.append(f"- {transition.target_state}: {transition.description or ''} (when: {when})")
    lines.append(f"- {state.id}: stay, when none of the above holds")
    context = {k: v for k, v in (request.context or {}).items() if not k.startswith("_")}
    if context:
        lines.append("Known so far: " + json.dumps(context, ensure_ascii=False, default=str))
    lines.append(
        'Reply with one JSON object: {"transition": {"context_update": {...}, "target_state": "..."}, "message": "..."}'
    )
    system = {"role": "system", "content": "\n".join(line for line in lines if line)}
    return dataclasses.replace(request, messages=[system, *request.messages[1:]])


def without_state_map(request: LLMRequest, _definition: FSMDefinition) -> LLMRequest:
    """The prompt without its ``<state_map>`` (issue 26: is the map what makes a small model ramble?)."""
    system = request.messages[0]
    text = re.sub(r"<state_map>.*?</state_map>\n?", "", system["content"], flags=re.S)
    return dataclasses.replace(request, messages=[{**system, "content": text}, *request.messages[1:]])


def moving(pattern: str, before: str) -> Rewrite:
    """A rewrite that moves the block ``pattern`` matches in the system prompt to just before ``before``."""

    def rewrite(request: LLMRequest, _definition: FSMDefinition) -> LLMRequest:
        system = request.messages[0]
        text = system["content"]
        found = re.search(pattern, text, flags=re.S)
        if found and before in text:
            text = text.replace(found.group(0), "", 1)
            at = text.index(before)
            text = text[:at] + found.group(0) + text[at:]
        return dataclasses.replace(request, messages=[{**system, "content": text}, *request.messages[1:]])

    return rewrite


RULES = r"<response>.*?</format_rules>\n"  # the reply rules, which close the state's part
# issue 26's alternatives to the rules closing the state's part (REAL_MODEL.md): the rules first, where every
# call of any definition shares them; just before the state, where every call of the definition does; and the
# history moved up to just after the definition-wide part, so that consecutive calls share it too
rules_first = moving(RULES, "<fsm>")
rules_before_state = moving(RULES, "<current_state>")
history_early = moving(r"<conversation_history>.*?</conversation_history>\n", "<current_state>")


VARIANTS: dict[str, tuple[Rewrite | None, bool]] = {  # (rewrite of each request, guided conversation)
    "plain": (None, False),
    "plain-no-map": (without_state_map, False),
    "plain-rules-first": (rules_first, False),
    "plain-rules-before-state": (rules_before_state, False),
    "plain-history-early": (history_early, False),
    "plain-update-first": (update_first, False),
    "guided-lazy": (guided_with(eager=False), True),
    "guided-wide": (guided_with(narrow=False), True),
    "guided-plain-prompt": (guided_with(), False),
    "guided-short-prompt": (short_prompt, True),
    "guided-no-map": (without_state_map, True),
    "guided-rules-first": (rules_first, True),
    "guided-rules-before-state": (rules_before_state, True),
    "guided": (None, True),
}


class Client(LiteLLMClient):
    """The local model, with each request rewritten as the variant says."""

    def __init__(self, url: str, rewrite: Rewrite | None, definition: FSMDefinition, guided: bool,
                 timeout: float = 60.0) -> None:  # fmt: skip
        super().__init__("openai/smollm2", api_base=url, api_key="none", temperature=0, timeout=timeout,
                         response_format="json_schema", max_tokens=256, guided=guided)  # fmt: skip
        self.rewrite = rewrite
        self.definition = definition

    def complete(self, request: LLMRequest) -> LLMResponse:
        if self.rewrite is not None:
            request = self.rewrite(request, self.definition)
        return super().complete(request)


def model_opens(course: scorecard.Course) -> scorecard.Course:
    """The course with the model writing the opening, as every example did before states had an ``opening``
    (issue 26 §2): a before/after comparison with older code plays the same calls on both sides."""
    states = {sid: state.model_copy(update={"opening": None}) for sid, state in course.definition.states.items()}
    return dataclasses.replace(course, definition=course.definition.model_copy(update={"states": states}))


def play(
    url: str, name: str, repeat: int, timeout: float = 60.0, openings: bool = True, examples: list[str] = EXAMPLES
) -> dict[str, Any]:
    rewrite, guided = VARIANTS[name]
    courses = [scorecard.course(ROOT / "fsm_definitions" / f"{example}.json") for example in examples]
    if not openings:
        courses = [model_opens(c) for c in courses]
    runs = []
    for _ in range(repeat):
        scores = [scorecard.score(c, Client(url, rewrite, c.definition, guided, timeout)) for c in courses]
        runs.append({"overall": scorecard.summary(scores), "courses": {s.name: scorecard.summary([s]) for s in scores}})
    return {"variant": name, "runs": runs}


def line(result: dict[str, Any]) -> str:
    def median(key: str) -> float:
        return statistics.median(float(run["overall"][key]) for run in result["runs"])

    first = result["runs"][0]["overall"]
    per_course = " ".join(
        f"{name}={figures['reached']}/{figures['course_turns']}"
        for name, figures in result["runs"][0]["courses"].items()
    )
    return (
        f"{result['variant']:20} reached {median('reached'):.0f}/{first['course_turns']} "
        f"({100 * median('reached_rate'):.0f}%)  ended as expected {median('finished'):.0f}/{first['courses']}  "
        f"valid 1st {100 * median('first_valid_rate'):.0f}%  calls/turn {median('calls_per_turn'):.2f}  "
        f"completion tok/turn {median('completion_tokens_per_turn'):.0f}  s/turn {median('seconds_per_turn'):.2f}  "
        # messages a person could not use (llm_fsm.testing.message_quality): repeated, looping, copied
        f"unusable {median('repeated_messages'):.0f}/{median('looping_messages'):.0f}/{median('copied_messages'):.0f}  "
        f"[{per_course}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--examples", default=",".join(EXAMPLES), help="the examples to play (default: the six)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per model call")
    parser.add_argument(
        "--model-opens", action="store_true", help="the model writes each opening (as before states had their own)"
    )
    args = parser.parse_args()
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    script = [sys.executable, str(ROOT / "scripts" / "local-model")]
    url = subprocess.run(
        [*script, "start", "--name", "bench"], check=True, capture_output=True, text=True
    ).stdout.strip()
    results = []
    try:
        for name in names:
            started = time.perf_counter()
            examples = [e for e in args.examples.split(",") if e]
            results.append(play(url, name, args.repeat, args.timeout, not args.model_opens, examples))
            print(line(results[-1]), f"({time.perf_counter() - started:.0f} s)", flush=True)
    finally:
        subprocess.run([*script, "stop", "--name", "bench"], check=False, capture_output=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
