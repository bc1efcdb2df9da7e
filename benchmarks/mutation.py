"""Mutation testing of the core modules, each against its own fast test files (mutmut 3).

    pip install -e '.[mutation]'
    python benchmarks/mutation.py engine contract logic calling  # the measured modules (benchmarks/RESULTS.md, 12)
    python benchmarks/mutation.py                     # every module below (turn and stores: configured, never run)
    python benchmarks/mutation.py --report engine     # only re-read the results of an earlier run
    python benchmarks/mutation.py --survivors engine  # list the survivors, with their diffs
    python benchmarks/mutation.py --retest engine     # after adding tests: only the mutants not killed last time

Each module runs in its own directory ``.mutation/<module>/`` (git-ignored): a copy of the package, the
prompts, the example definitions and the tests, with a ``pyproject.toml`` whose ``[tool.mutmut]`` mutates that
module only and runs only its test files (without the tests marked ``slow``). mutmut writes the mutated
package to ``.mutation/<module>/mutants/`` and puts that directory first on ``sys.path``; its forced-fail
check at the start of a run proves that the tests import the mutated code, not this checkout nor the
editable install. One worker, under ``nice``: the machine is shared. A rerun only tests mutants whose
function changed (mutmut's cache); delete ``.mutation/<module>`` to start over.

mutmut mutates the bodies of functions and methods; it leaves module-level code, class bodies (field
defaults) and functions with decorators other than ``@staticmethod``/``@classmethod`` alone.

Known equivalent mutants (the mutated program behaves exactly as the original) are listed in
``EQUIVALENT`` with a reason; they are reported apart and count neither as killed nor in the total.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"

# module name -> (files to mutate, relative to the checkout; its own test files)
MODULES: dict[str, tuple[list[str], list[str]]] = {
    "engine": (["llm_fsm/engine.py"], ["tests/test_engine.py"]),
    "contract": (["llm_fsm/contract.py"], ["tests/test_contract.py", "tests/test_reply_contract.py"]),
    "logic": (["llm_fsm/logic.py", "llm_fsm/js_values.py"], ["tests/test_logic.py"]),
    # not tests/test_llm_tools.py: each of its tests is an HTTP round trip through litellm to a local server
    "calling": (
        [f"llm_fsm/tools/{name}.py" for name in ("calling", "tool_types", "binding", "running", "messages")],
        ["tests/test_tools.py"],
    ),
    # the turn's behaviour is tested where each feature is: with conversation and engine alone, most of it is
    # reached by no test (measured: RESULTS.md section 13)
    "turn": (
        [
            "llm_fsm/turn.py",
            "llm_fsm/turn_state.py",
            "llm_fsm/requests.py",
            "llm_fsm/verdict.py",
            "llm_fsm/firing.py",
            "llm_fsm/outcomes.py",
            "llm_fsm/tools/rounds.py",
        ],
        [
            "tests/test_conversation.py",
            "tests/test_engine.py",
            "tests/test_tools.py",
            "tests/test_hooks.py",
            "tests/test_summaries.py",
            "tests/test_streaming.py",
            "tests/test_async.py",
            "tests/test_subflows.py",
        ],
    ),
    "stores": (
        ["llm_fsm/store/*.py"],
        ["tests/test_store.py", "tests/test_store_files.py", "tests/test_store_locks.py"],
    ),
}

# Modules tested on a subset of their functions (mutmut mutant-name patterns), with the reason.
SUBSET: dict[str, tuple[list[str], str]] = {
    "calling": (
        [
            f"llm_fsm.tools.{module}.{name}__mutmut_*"
            for module, names in {
                "calling": ("x_prepare", "x_needs_approval"),
                "messages": (
                    "x_tool_request",
                    "x_requested_in_text",
                    "x_result_text",
                    "x_unique_ids",
                    "x_native_exchange",
                    "x_json_request_text",
                    "x_arguments_text",
                    "x_json_request_schema",
                    "x_masked",
                ),
                "tool_types": ("x__bounded", "xǁBoundToolǁspec"),
                "running": ("x__tool",),
            }.items()
            for name in names
        ],
        "the checks, the request parsing and what the model reads; not bind/arguments_model (binding, load time) "
        "nor what runs in the worker threads and on the loop (run_batch, _outcome, _arun, _call_sync, "
        "BoundTool.keywords, Prepared.refused...), whose mutants mostly hang until mutmut's timeout (20 s and more "
        "each on this machine)",
    ),
}

# Slow tests left out (an HTTP round trip through litellm, a worker pool wait): pytest -k expressions.
DESELECT: dict[str, str] = {
    "contract": "not provider_cut_over_http",
    "calling": "not over_http and not still_waiting_for_a_worker and not run_concurrently",
}

COPY = ["llm_fsm", "prompts", "schema", "fsm_definitions", "tests", "cli.py", "README.md"]

# mutant name -> why it cannot be told apart from the original
_CACHE_KIND = "the cache kind only names the definition's cache entry; no other caller uses it"
_LOCATED = "what is validated is always a non-empty object: every error has a location"
_DEFAULT = "drops an argument whose default is the same value"
EQUIVALENT: dict[str, str] = {
    "llm_fsm.engine.x__check_target__mutmut_14": "decide resolves '$return' when there is a way back, so a "
    "'$return' target reaches _check_target only with back_to None",
    "llm_fsm.engine.x_initial_snapshot__mutmut_25": _DEFAULT + " (turns=0)",
    "llm_fsm.engine.x_initial_snapshot__mutmut_28": _DEFAULT + " (used_tokens=())",
    "llm_fsm.engine.x_model_writable_keys__mutmut_12": _CACHE_KIND + " (None)",
    "llm_fsm.engine.x_model_writable_keys__mutmut_18": _CACHE_KIND,
    "llm_fsm.engine.x_model_writable_keys__mutmut_19": _CACHE_KIND,
    "llm_fsm.logic.x__js_mod__mutmut_8": "for a == 0 the remainder is 0, and -0 is 0 (a float -0.0 becomes int 0)",
    "llm_fsm.js_values.x_js_number_str__mutmut_11": "only infinities get there: +inf is > 0 and >= 0, -inf neither",
    "llm_fsm.js_values.x_js_number_str__mutmut_12": "only infinities get there: +inf is > 1, -inf is not",
    "llm_fsm.js_values.x_js_number_str__mutmut_19": "1e+21 and 1e21 are the same literal",
    "llm_fsm.js_values.x_kind__mutmut_3": "None, booleans and strings are never == one another in Python, so one "
    "label for the three changes no comparison",
    "llm_fsm.js_values.x_kind__mutmut_6": "the label is only compared with other _kind results and 'object'",
    "llm_fsm.js_values.x_kind__mutmut_7": "the label is only compared with other _kind results and 'object'",
    "llm_fsm.js_values.x_loose_equal__mutmut_1": "with one None, the rest of _loose_equal finds no number in it: False",
    "llm_fsm.logic.x__op_contains__mutmut_2": "_op_in does not read data",
    "llm_fsm.logic.x__unknown_message__mutmut_7": "only the best match is used, and it comes first whatever n is",
    "llm_fsm.logic.x__unknown_message__mutmut_10": "only the best match is used, and it comes first whatever n is",
    "llm_fsm.tools.messages.x_json_request_text__mutmut_7": "ensure_ascii=None is falsy like ensure_ascii=False",
    "llm_fsm.tools.messages.x_arguments_text__mutmut_4": "ensure_ascii=None is falsy like ensure_ascii=False",
    "llm_fsm.tools.messages.x_result_text__mutmut_11": "ensure_ascii=None is falsy like ensure_ascii=False",
    "llm_fsm.tools.messages.x_result_text__mutmut_27": "ensure_ascii=None is falsy like ensure_ascii=False",
    "llm_fsm.contract.x__depth__mutmut_2": "the depth is only compared with 32, and a reply is an object (depth >= 1)",
    "llm_fsm.contract.x__describe__mutmut_3": "include_url only adds a 'url' entry, which _describe does not read",
    "llm_fsm.contract.x__describe__mutmut_11": _LOCATED,
    "llm_fsm.contract.x__describe__mutmut_12": _LOCATED,
    "llm_fsm.contract.x__extract_object__mutmut_15": "cleaning strict JSON changes nothing: the strict decoder refuses "
    "NaN and infinities, and a lone surrogate needs a \\u escape or non-ASCII text, which are cleaned anyway",
    "llm_fsm.contract.x__repaired__mutmut_3": "the repair sees only text the strict decoder failed on with the same "
    "grammar as json.loads, so trying json.loads first cannot succeed",
    "llm_fsm.contract.x__repaired__mutmut_6": "as _repaired__mutmut_3",
    "llm_fsm.contract.x__repaired__mutmut_8": "as _repaired__mutmut_3",
    "llm_fsm.contract.x_state_reply_schemas__mutmut_18": "strict=None is falsy like strict=False",
    "llm_fsm.contract.x_state_reply_schemas__mutmut_40": "the cache key names no state unless one is called 'XXXX'",
}

# Functions that only run at import time, to build a table (logic's operators): mutmut switches mutants on
# after the import, so their mutants can never be active. Each such change was applied by hand to a copy of
# the module and failed tests/test_logic.py (see benchmarks/RESULTS.md); reported apart, out of the total.
IMPORT_TIME = [
    "llm_fsm.logic.x__chain__mutmut_*",
    "llm_fsm.logic.x__numeric__mutmut_*",
    "llm_fsm.logic.x__deciding__mutmut_*",
]

STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 37: "killed"}
TIMEOUT = {36, -24, 24, 152, 255}


# Modules whose tests run tools in a thread pool: mutmut's default "fork" isolation forks each mutant's run
# from the process that ran the suite to collect coverage, and a forked child inherits a pool whose threads
# are gone (every tool call then waits for its timeout and fails, whatever the mutant). "forkserver" forks
# from a process that ran no test.
FORKSERVER = {"calling", "turn", "stores"}


def _mutmut_section(files: list[str], tests: list[str], deselect: str | None = None, forkserver: bool = False) -> str:
    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    args = ["-p", "no:cacheprovider", "-m", "not slow and not real_model", "-x", "-q"]
    if deselect:
        args += ["-k", deselect]
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["llm_fsm/"]\n'
        f"only_mutate = {toml_list(files)}\n"
        'also_copy = ["prompts/", "schema/", "fsm_definitions/", "cli.py", "README.md"]\n'
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
        f"pytest_add_cli_args = {toml_list(args)}\n"
        "timeout_multiplier = 10.0\n"
        "use_git_change_detection = false\n" + ('process_isolation = "forkserver"\n' if forkserver else "")
    )


def prepare(name: str) -> Path:
    files, tests = MODULES[name]
    work = WORK / name
    work.mkdir(parents=True, exist_ok=True)
    for item in COPY:
        src, dst = ROOT / item, work / item
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "artifacts"))
        elif src.exists():
            shutil.copy2(src, dst)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = _mutmut_section(files, tests, DESELECT.get(name), name in FORKSERVER)
    (work / "pyproject.toml").write_text(pyproject + section, encoding="utf-8")
    return work


def run(name: str, retest: bool = False) -> int:
    """Run mutmut on ``name``. ``retest``: only the mutants that were not killed last time (with the tests'
    coverage of each function collected again); a killed mutant stays killed as long as tests are only added."""
    work = prepare(name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COVERAGE_PROCESS_START")}
    cmd = ["nice", "-n", "10", sys.executable, "-m", "mutmut", "run", "--max-children", "1"]
    if retest:
        again = [m for m, code in results(name).items() if status(code) in ("survived", "no tests", "not checked")]
        if SUBSET.get(name):
            again = [m for m in again if any(fnmatch.fnmatch(m, p) for p in SUBSET[name][0])]
        if not again:
            print(f"== {name}: nothing to retest")
            return 0
        (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
        cmd += again
    elif SUBSET.get(name):  # the subset's mutants without a result yet (all of them on a first run)
        known = results(name)
        fresh = [m for m, code in known.items() if code is None]
        cmd += fresh if known else SUBSET[name][0]
    print(f"== {name}: {' '.join(cmd)} (in {work})", flush=True)
    return subprocess.call(cmd, cwd=work, env=env)


def results(name: str) -> dict[str, int | None]:
    """Mutant name -> exit code of its test run, read from mutmut's ``.meta`` files (only the subset's
    mutants for a module in ``SUBSET``)."""
    out: dict[str, int | None] = {}
    for meta in sorted((WORK / name / "mutants").rglob("*.meta")):
        data = json.loads(meta.read_text(encoding="utf-8"))
        out.update(data.get("exit_code_by_key", {}))
    if SUBSET.get(name):
        out = {m: c for m, c in out.items() if any(fnmatch.fnmatch(m, p) for p in SUBSET[name][0])}
    return out


def status(code: int | None) -> str:
    if code is None:
        return "not checked"
    if code in TIMEOUT:
        return "timeout"
    return STATUS.get(code, "suspicious")


def summary(name: str) -> dict[str, object]:
    codes = results(name)
    by: dict[str, list[str]] = {}
    for mutant, code in codes.items():
        key = status(code)
        if key == "survived" and mutant in EQUIVALENT:
            key = "equivalent"
        elif key == "survived" and any(fnmatch.fnmatch(mutant, p) for p in IMPORT_TIME):
            key = "import-time"
        by.setdefault(key, []).append(mutant)
    killed = len(by.get("killed", [])) + len(by.get("timeout", []))
    total = sum(len(v) for k, v in by.items() if k not in ("equivalent", "import-time", "not checked", "skipped"))
    return {
        "module": name,
        "killed": killed,
        "total": total,
        "score": (100.0 * killed / total) if total else None,
        "counts": {k: len(v) for k, v in sorted(by.items())},
        "survived": sorted(by.get("survived", [])),
        "no tests": sorted(by.get("no tests", [])),
        "equivalent": sorted(by.get("equivalent", [])),
    }


def report(names: list[str]) -> None:
    print("| module | killed / total | score | counts |")
    print("|---|---|---|---|")
    for name in names:
        s = summary(name)
        score = f"{s['score']:.1f} %" if s["score"] is not None else "-"
        counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items())  # type: ignore[union-attr]
        print(f"| {name} | {s['killed']} / {s['total']} | {score} | {counts} |")


def survivors(name: str) -> None:
    s = summary(name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for mutant in s["survived"] + s["no tests"]:  # type: ignore[operator]
        print(f"--- {mutant}")
        subprocess.call([sys.executable, "-m", "mutmut", "show", mutant], cwd=WORK / name, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"default: all of {', '.join(MODULES)}")
    parser.add_argument("--report", action="store_true", help="only print the table of an earlier run")
    parser.add_argument("--survivors", action="store_true", help="print the surviving mutants' diffs")
    parser.add_argument("--retest", action="store_true", help="test again only the mutants not killed last time")
    args = parser.parse_args()
    names = args.modules or list(MODULES)
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {list(MODULES)}")
    if args.survivors:
        for name in names:
            survivors(name)
        return 0
    if not args.report:
        for name in names:
            run(name, retest=args.retest)
    report(names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
