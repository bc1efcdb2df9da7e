"""The prompts of the calls besides a turn's own: the user-turn notes that follow a resume, a person's
decision about a tool call, or tool calls (their results); a correction; a judge's and a summary's messages.

:class:`~llm_fsm.turn.prompt.PromptBuilder` has them as methods (it inherits :class:`CallPrompts`), rendered
with its Jinja environment and bounded by its settings; the turn's own system prompt is
:mod:`llm_fsm.turn.prompt`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_fsm.definition.models import FSMDefinition
    from llm_fsm.snapshot import Rejection
    from llm_fsm.tools.calling import ToolRun
    from llm_fsm.turn.checks import Proposal

Message = dict[str, Any]


class CallPrompts:
    """The prompts of the calls besides a turn's own (see the module's docstring); a base of PromptBuilder."""

    if TYPE_CHECKING:  # PromptBuilder's: the template rendered, and the history window cut to size

        def _render(self, name: str, variables: dict[str, Any]) -> str: ...

        def _window(self, recent: Sequence[Any]) -> Sequence[Any]: ...

    def resume_note(self, reason: str, result: Mapping[str, Any]) -> str:
        """The user-turn text of the call that follows a resume."""
        return self._render("resume.xml.j2", {"reason": reason, "result": result})

    def act_note(self, task: str | None, *, tools: bool) -> str:
        """The user-turn text of an acting state's turn (no person waits to type): ``task``, the run's input, if any."""
        return self._render("act.xml.j2", {"task": task, "tools": tools})

    def approval_note(self, tool: str, decision: Mapping[str, Any]) -> str:
        """The user-turn text of the call that follows a person's decision about a tool call."""
        return self._render("approval.xml.j2", {"tool": tool, "decision": dict(decision)})

    def tool_results(self, runs: Sequence[ToolRun]) -> str:
        """The user-turn text that gives the model its tool calls' results (the JSON form of tool calling)."""
        from llm_fsm.tools.calling import result_text

        return self._render("tool_results.xml.j2", {"runs": list(runs), "text": result_text})

    def correction(self, rejections: Iterable[Rejection], state: str) -> str:
        """The user-turn text of a corrective call: exactly what was wrong with the last reply."""
        return self._render("correction.xml.j2", {"rejections": list(rejections), "state": state})

    def judge_messages(self, definition: FSMDefinition, rubric: str, proposal: Proposal) -> list[Message]:
        """The messages of a judge call: the rubric, the user's message and the proposed reply."""
        variables = {
            "rubric": rubric,
            "state": definition.states[proposal.state],
            "user": proposal.user,
            "message": proposal.message,
        }
        system = self._render("judge.xml.j2", variables)
        return [{"role": "system", "content": system}, {"role": "user", "content": "Grade the proposed reply."}]

    def summary_messages(
        self, definition: FSMDefinition, previous: str, exchanges: Sequence[Any], bounds: Any, *, left: str | None
    ) -> list[Message]:
        """The messages of a summary call: the previous summary and the exchanges to fold into it."""
        variables = {
            "fsm": definition,
            "previous": previous,
            "exchanges": [{**self._window([e])[0].as_dict(), "state": e.state} for e in exchanges],
            "max_chars": bounds.max_chars,
            "instructions": bounds.instructions,
            "left": left,
        }
        system = self._render("summary.xml.j2", variables)
        return [{"role": "system", "content": system}, {"role": "user", "content": "Write the updated summary."}]
