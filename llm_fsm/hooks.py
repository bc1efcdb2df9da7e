"""Handlers and named checks: plain Python callables that run at fixed points of a turn.

Register them on a :class:`Hooks` object (one per conversation, or one shared by every
conversation a runtime creates)::

    hooks = Hooks()

    @hooks.on("state_enter", states=["approval"])
    def ask_a_human(*, context, **_):
        raise Break("needs approval", {"amount": context["amount"]})

    @hooks.handler("notify_staff", on="after_transition")   # runs where a state lists it in "handlers"
    def notify(*, state, target, **_): ...

    @hooks.check("no_prices")                                # used by {"kind": "python", "name": ...}
    def no_prices(*, message, **_): return "$" not in message or "do not quote prices"

A handler is called with keyword arguments only (those it does not declare are not passed, so
handlers keep working when arguments are added): ``conversation``, ``timing``, ``state``,
``target``, ``context`` (a read-only view), ``update`` (keys updated this turn), ``corrections``
(at ``context_update``: the updated keys whose collected value changed, ``{"from": ..., "to": ...}`` each;
see :mod:`llm_fsm.definition.corrections`), ``user``, ``reply``, ``message``, ``error``, ``memory`` (the turn's working
memory, to read and write: see :class:`llm_fsm.memory.MemoryAccess`). It returns a context delta or None; a
key set to None in a delta deletes it. Raising :class:`Break` pauses the conversation.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import re
import sys
import uuid
from collections.abc import Awaitable, Callable, Collection, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from llm_fsm.errors import HandlerError, HooksLoadError
from llm_fsm.values import as_json_data

logger = logging.getLogger("llm_fsm")

Timing = Literal[
    "start",
    "before_llm_call",
    "after_reply",
    "context_update",
    "before_transition",
    "after_transition",
    "state_enter",
    "state_exit",
    "end",
    "error",
]
TIMINGS: tuple[str, ...] = get_args(Timing)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what providers accept as a function name
Policy = Literal["raise", "continue"]
CheckOutcome = bool | str | tuple[bool, str] | None


class Break(Exception):  # noqa: N818 (a signal, not an error: "raise Break(...)" reads as intended)
    """Raised by a handler to pause the conversation until :meth:`Conversation.resume` is called."""

    def __init__(self, reason: str, payload: Mapping[str, Any] | None = None, *, message: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.payload = dict(payload or {})
        self.message = message  # shown to the user when the pause comes before the model's reply is used
        self.handler: str | None = None  # filled in by the runtime: who raised it, and when
        self.timing: str | None = None


@dataclass(frozen=True)
class Handler:
    """A registered callable and when it runs. ``named``: only in states that list it in ``handlers``."""

    name: str
    function: Callable[..., Any]
    timings: frozenset[str]
    states: frozenset[str] | None = None
    targets: frozenset[str] | None = None
    keys: frozenset[str] | None = None
    policy: Policy = "raise"
    named: bool = False
    accepts: frozenset[str] | None = field(default=None, repr=False)  # None: takes **kwargs
    is_async: bool = False

    def wants(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if self.accepts is None:
            return dict(arguments)
        return {k: v for k, v in arguments.items() if k in self.accepts}


@dataclass(frozen=True)
class ToolFunction:
    """The code of a tool: ``parameters`` is the JSON Schema given at registration, or None (then
    the definition's, or one made from the signature, is used)."""

    name: str
    function: Callable[..., Any]
    is_async: bool
    description: str = ""
    parameters: dict[str, Any] | None = None


def _accepted_keywords(function: Callable[..., Any]) -> frozenset[str] | None:
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    # refused at registration: handlers are called with keywords only, so a positional-only
    # parameter would fail at the first turn that fires it
    positional = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_ONLY]
    if positional:
        raise TypeError(f"handler {function.__qualname__} must take keyword arguments only, not {positional}")
    return frozenset(p.name for p in parameters)


def _check_timings(timings: Iterable[str], policy: str) -> None:
    chosen = set(timings)
    unknown = sorted(chosen - set(TIMINGS))
    if not chosen or unknown:
        raise ValueError(f"unknown timing(s) {unknown or '(none given)'}; choose from {', '.join(TIMINGS)}")
    if policy not in ("raise", "continue"):
        raise ValueError(f"policy must be 'raise' or 'continue', not {policy!r}")


def _names(values: Iterable[str] | str | None) -> frozenset[str] | None:
    if values is None:
        return None
    return frozenset([values] if isinstance(values, str) else values)


class Hooks:
    """A registry of handlers and named checks."""

    def __init__(self) -> None:
        self.handlers: list[Handler] = []
        self.checks: dict[str, Callable[..., CheckOutcome]] = {}
        self.tools: dict[str, ToolFunction] = {}

    def on(
        self,
        *timings: Timing,
        states: Iterable[str] | str | None = None,
        targets: Iterable[str] | str | None = None,
        keys: Iterable[str] | str | None = None,
        policy: Policy = "raise",
        name: str | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: run the function at ``timings``, filtered by state, target state or keys updated."""
        _check_timings(timings, policy)

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            self.add(function, timings, states=states, targets=targets, keys=keys, policy=policy, name=name)
            return function

        return register

    def handler(
        self, name: str, *, on: Timing | Collection[Timing], policy: Policy = "raise"
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: a named handler, run only in the states whose ``handlers`` list names it."""
        timings = (on,) if isinstance(on, str) else tuple(on)
        _check_timings(timings, policy)

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            self.add(function, timings, policy=policy, name=name, named=True)
            return function

        return register

    def check(self, name: str) -> Callable[[Callable[..., CheckOutcome]], Callable[..., CheckOutcome]]:
        """Decorator: a named check. It returns True/None (pass), False or a reason string (fail)."""

        def register(function: Callable[..., CheckOutcome]) -> Callable[..., CheckOutcome]:
            _accepted_keywords(function)
            self.checks[name] = function
            return function

        return register

    def tool(
        self,
        name: str | Callable[..., Any] | None = None,
        *,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> Any:
        """Decorator: the code of a tool (sync or async) that states list in ``tools``.

        It is called with the model's arguments as keywords, after they were checked against the
        tool's JSON Schema: the definition's ``parameters``, else ``parameters`` here, else one made
        from the function's signature (its type hints, through pydantic). It returns JSON data.
        """

        if callable(name):  # @hooks.tool, without parentheses
            self.add_tool(name, description=description, parameters=parameters)
            return name

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            self.add_tool(function, name=name, description=description, parameters=parameters)
            return function

        return register

    def add_tool(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> ToolFunction:
        if not callable(function):
            raise TypeError(f"a tool is a function, not {type(function).__name__}")
        label = name or getattr(function, "__name__", None) or "tool"
        if not _TOOL_NAME.match(label):
            raise ValueError(f"tool name {label!r} is not valid (1 to 64 letters, digits, _ or -)")
        doc = (inspect.getdoc(function) or "").strip()
        tool = ToolFunction(label, function, is_async(function), description or doc, parameters)
        self.tools[label] = tool
        return tool

    def add(
        self,
        function: Callable[..., Any],
        timings: Iterable[str],
        *,
        states: Iterable[str] | str | None = None,
        targets: Iterable[str] | str | None = None,
        keys: Iterable[str] | str | None = None,
        policy: Policy = "raise",
        name: str | None = None,
        named: bool = False,
    ) -> Handler:
        chosen = frozenset(timings)
        _check_timings(chosen, policy)
        label: str = name or getattr(function, "__name__", None) or "handler"
        # error handlers run after the turn has failed, outside its generator, where no driver awaits
        # (see firing.fire_error)
        if is_async(function) and "error" in chosen:
            raise TypeError(f"handler {label!r}: an 'error' handler must be a plain function, not async")
        handler = Handler(
            label, function, chosen, _names(states), _names(targets), _names(keys), policy, named,
            _accepted_keywords(function), is_async(function),
        )  # fmt: skip
        self.handlers.append(handler)
        return handler

    def async_names(self) -> list[str]:
        """The async handlers and checks registered here (only the async API can run them)."""
        if not self.handlers and not self.checks:
            return []
        handlers = [f"handler '{h.name}'" for h in self.handlers if h.is_async]
        return handlers + [f"check '{n}'" for n, f in self.checks.items() if is_async(f)]

    def named_handler(self, name: str) -> Handler | None:
        return next((h for h in self.handlers if h.named and h.name == name), None)

    def copy(self) -> Hooks:
        other = Hooks()
        other.handlers = list(self.handlers)
        other.checks = dict(self.checks)
        other.tools = dict(self.tools)
        return other

    @staticmethod
    def load(spec: str, *, relative_to: str | Path | None = None) -> Hooks:
        """The ``Hooks`` object ``spec`` names: ``package.module:name`` or ``path/to/file.py:name``.

        A file path is read relative to ``relative_to`` (a folder; default: the current one), and its
        folder is put on ``sys.path`` so that it can import its neighbours, as when Python runs a
        script. A file is executed once per process: loading it again gives the same object.
        Raises :class:`~llm_fsm.errors.HooksLoadError`, one line saying what and why.
        """
        # the last colon: a Windows path (C:\...) has one of its own
        where, _, name = spec.rpartition(":")
        if not where or not name or not name.isidentifier():
            raise HooksLoadError(f"hooks {spec!r}: expected MODULE:NAME or FILE.py:NAME")
        try:
            module = _import_module(spec, where, Path(relative_to) if relative_to is not None else Path.cwd())
        except HooksLoadError:
            raise
        except BaseException as exc:  # the user's module failed while importing: one line, their words
            if isinstance(exc, KeyboardInterrupt):
                raise
            reason = str(exc).strip().partition("\n")[0]
            raise HooksLoadError(f"hooks {spec}: cannot import {where}: {type(exc).__name__}: {reason}") from exc
        hooks = getattr(module, name, None)
        if isinstance(hooks, Hooks):
            return hooks
        found = [n for n, v in vars(module).items() if isinstance(v, Hooks)]
        if hooks is None:
            there = f"its Hooks objects: {', '.join(found)}" if found else "it holds no Hooks object"
            raise HooksLoadError(f"hooks {spec}: {where} has no '{name}' ({there})")
        kind = type(hooks).__name__
        raise HooksLoadError(f"hooks {spec}: '{name}' in {where} is a {kind}, not a llm_fsm.Hooks object")


def _import_module(spec: str, where: str, folder: Path) -> Any:
    """The module ``where`` names: a ``.py`` file (relative to ``folder``), else an importable module
    (``folder`` is searched too)."""
    if not where.endswith(".py"):
        return _import_named_module(spec, where, folder)
    return _import_file(spec, where, folder)


def _import_named_module(spec: str, where: str, folder: Path) -> Any:
    """The importable module ``where`` names, ``folder`` searched too."""
    if (folder / where).is_file():  # "rules.json:x" would otherwise look for a module "rules"
        raise HooksLoadError(f"hooks {spec}: {where} is not a Python file (FILE.py) or module")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        # only the module asked for (or its package) missing is reported here; a module that the user's
        # module imports and is missing is their error, raised as it is
        if exc.name is not None and where.startswith(exc.name):
            looked = f"looked in {folder.resolve()} and sys.path"
            raise HooksLoadError(f"hooks {spec}: no module named {exc.name!r} ({looked})") from None
        raise


def _import_file(spec: str, where: str, folder: Path) -> Any:
    """The module of the ``.py`` file ``where`` (relative to ``folder``), imported once whatever its name."""
    path = (folder / where).resolve()
    if not path.is_file():
        raise HooksLoadError(f"hooks {spec}: no such file {path}")
    # a file already imported, under any name, gives its module: its Hooks object is not made twice
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == str(path):
            return module
    # a stem another module holds (a file named json.py, say) gets a name of its own, not that module's
    name = f"llm_fsm_hooks_{len(sys.modules)}_{path.stem}" if path.stem in sys.modules else path.stem
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise HooksLoadError(f"hooks {spec}: {path} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    sys.modules[name] = module  # dataclasses and pydantic models in the file look their module up
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        # not left half-imported: the next load executes the file again
        del sys.modules[name]
        raise
    return module


@dataclass(frozen=True)
class Invocation:
    """Where a timing point fires: the state it concerns, the target, the keys updated."""

    timing: str
    state: str
    target: str | None = None
    keys: frozenset[str] = frozenset()
    listed: frozenset[str] = frozenset()  # handler names the concerned state lists


def selected(hooks: Hooks, where: Invocation) -> list[Handler]:
    """The handlers that run at ``where``, in registration order."""
    return [h for h in hooks.handlers if _matches(h, where)]


def may_run(hooks: Hooks, timings: Collection[str], state: str, listed: frozenset[str]) -> bool:
    """Whether any handler could run at one of ``timings`` in ``state``, whatever the target and keys."""
    # the target and the keys are not known until the reply is read: any handler that might run counts
    return bool(hooks.handlers) and any(
        h.timings.intersection(timings)
        and (not h.named or h.name in listed)
        and (h.states is None or state in h.states)
        for h in hooks.handlers
    )


def _matches(handler: Handler, where: Invocation) -> bool:
    if where.timing not in handler.timings:
        return False
    if handler.named and handler.name not in where.listed:
        return False
    if handler.states is not None and where.state not in handler.states:
        return False
    if handler.targets is not None and where.target not in handler.targets:
        return False
    return handler.keys is None or bool(handler.keys & where.keys)


@dataclass(frozen=True)
class Await:
    """A step of a turn that an async driver awaits (an async handler or check) and answers with :class:`Awaited`."""

    awaitable: Awaitable[Any] = field(repr=False)
    what: str
    kind: str = "await"

    def close(self) -> None:
        """Drop the awaitable unawaited, without Python's "never awaited" warning."""
        close = getattr(self.awaitable, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class Awaited:
    """What awaiting an :class:`Await` gave: its value, or the exception it raised."""

    value: Any = None
    error: Exception | None = None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def is_async(function: Callable[..., Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)


def resolved(outcome: Any, what: str) -> Generator[Await, Awaited, Any]:
    """``outcome``, awaited through the driver first if it is awaitable (``yield from`` this)."""
    if inspect.isawaitable(outcome):
        return (yield Await(outcome, what)).result()
    return outcome


Run = Callable[[Callable[..., Any], dict[str, Any]], Any]  # calls a function with keywords (a traced turn: in its span)


def call(
    handler: Handler, arguments: Mapping[str, Any], run: Run | None = None
) -> Generator[Await, Awaited, dict[str, Any]]:
    """Run one handler (``yield from`` it: an async one is awaited by the driver); return its delta as
    JSON data. ``Break`` passes through; other errors follow the policy."""
    try:
        keywords = handler.wants(arguments)
        outcome = handler.function(**keywords) if run is None else run(handler.function, keywords)
        return _delta(handler, (yield from resolved(outcome, f"handler '{handler.name}'")))
    except Break:
        raise
    except Exception as exc:
        if handler.policy == "continue":
            logger.warning("handler %r failed at %r (policy: continue): %s", handler.name, arguments["timing"], exc)
            return {}
        raise HandlerError(handler.name, str(arguments["timing"]), exc) from exc


def _delta(handler: Handler, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"a handler returns a mapping (a context delta) or None, not {type(value).__name__}")
    # the delta is saved with the snapshot: JSON data only, refused here with the handler's name
    return as_json_data(value, source=f"handler '{handler.name}'")


def new_token() -> str:
    return uuid.uuid4().hex


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
