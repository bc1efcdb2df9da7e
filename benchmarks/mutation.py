"""Mutation testing of the core modules, each against its own fast test files (mutmut 3).

    pip install -e '.[mutation]'
    python benchmarks/mutation.py engine contract logic calling  # measured whole (benchmarks/RESULTS.md, 13)
    python benchmarks/mutation.py                     # every module below (turn and stores whole: hours and more)
    python benchmarks/mutation.py --report engine     # only re-read the results of an earlier run
    python benchmarks/mutation.py --survivors engine  # list the survivors, with their diffs
    python benchmarks/mutation.py --retest engine     # after adding tests: only the mutants not killed last time
    python benchmarks/mutation.py --sample 150 --seed 1 stores  # a uniform random sample of 150 mutants only
    python benchmarks/mutation.py --sample 150 --seed 1 --report stores  # killed / sampled, 95 % Wilson interval
    python benchmarks/mutation.py --sample 150 --seed 1 --check stores   # survivors vs their KILLED_BY tests

A full run of a big module (turn: ~1,800 mutants against its eight test files) takes many hours on a shared
machine, so its score is measured on a uniform random sample of mutant names (``--sample N --seed S``): the
mutants are generated first (no test run), N names are drawn with ``random.Random(S).sample`` from all of the
module's mutants (sorted), written to ``.mutation/<module>/sample-<N>-<S>.json``, and only those are run
(``mutmut run <names>``, which reruns the named mutants even when they have a result). The report then gives
killed / (sampled - equivalent) with its 95 % Wilson score interval: an estimate of the whole module's score.
``--retest`` with ``--sample`` reruns only that sample's mutants that were not killed (every test of each
mutated function: minutes per survivor of the turn); ``--check`` runs only the tests written for each survivor
(``KILLED_BY``) against it, from any test file.

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
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"

# module name -> (files to mutate, relative to the checkout; its own test files)
MODULES: dict[str, tuple[list[str], list[str]]] = {
    "engine": (["llm_fsm/turn/engine.py"], ["tests/turn/test_engine.py"]),
    "contract": (["llm_fsm/contract.py"], ["tests/turn/test_contract.py", "tests/turn/test_reply_contract.py"]),
    "logic": (["llm_fsm/logic/rules.py", "llm_fsm/logic/js_values.py"], ["tests/logic/test_logic.py"]),
    # not tests/tools/test_llm_tools.py: each of its tests is an HTTP round trip through litellm to a local server
    "calling": (
        [f"llm_fsm/tools/{name}.py" for name in ("calling", "tool_types", "binding", "running", "messages")],
        ["tests/tools/test_tools.py"],
    ),
    # the turn's behaviour is tested where each feature is: with conversation and engine alone, most of it is
    # reached by no test (measured: RESULTS.md section 13)
    "turn": (
        [
            "llm_fsm/turn/runner.py",
            "llm_fsm/turn/working.py",
            "llm_fsm/turn/requests.py",
            "llm_fsm/turn/verdict.py",
            "llm_fsm/turn/firing.py",
            "llm_fsm/turn/outcomes.py",
            "llm_fsm/turn/tool_rounds.py",
        ],
        [
            "tests/conversation/test_conversation.py",
            "tests/turn/test_engine.py",
            "tests/tools/test_tools.py",
            "tests/turn/test_hooks.py",
            "tests/memory/test_summaries.py",
            "tests/conversation/test_streaming.py",
            "tests/conversation/test_async.py",
            "tests/subflows/test_subflows.py",
        ],
    ),
    # every store against the same tests (memory, files, SQLite, and real redis-server and PostgreSQL servers
    # started by tests/conftest.py), the idempotency keys and the stored conversation (advance, aadvance)
    "stores": (
        ["llm_fsm/store/*.py"],
        [
            "tests/store/test_store.py",
            "tests/store/test_store_files.py",
            "tests/store/test_store_leftovers.py",
            "tests/store/test_store_locks.py",
            "tests/store/test_store_postgres.py",
            "tests/cli/test_store_cli.py",
            "tests/store/test_idempotency.py",
            "tests/conversation/test_aadvance.py",
        ],
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
    # the stores' crash and contention tests start processes and wait for locks to expire (5-11 s each, 125 s of
    # the 180 the selection takes): the same code paths are run in-process by the other tests
    "stores": "not four_processes and not killed_writer and not killed_holder and not heartbeat",
}

COPY = ["llm_fsm", "prompts", "schema", "fsm_definitions", "tests", "cli.py", "README.md"]

# mutant name -> why it cannot be told apart from the original
_CACHE_KIND = "the cache kind only names the definition's cache entry; no other caller uses it"
_LOCATED = "what is validated is always a non-empty object: every error has a location"
_DEFAULT = "drops an argument whose default is the same value"
EQUIVALENT: dict[str, str] = {
    "llm_fsm.turn.engine.x__check_target__mutmut_14": "decide resolves '$return' when there is a way back, so a "
    "'$return' target reaches _check_target only with back_to None",
    "llm_fsm.turn.engine.x_initial_snapshot__mutmut_25": _DEFAULT + " (turns=0)",
    "llm_fsm.turn.engine.x_initial_snapshot__mutmut_28": _DEFAULT + " (used_tokens=())",
    "llm_fsm.turn.engine.x_model_writable_keys__mutmut_12": _CACHE_KIND + " (None)",
    "llm_fsm.turn.engine.x_model_writable_keys__mutmut_18": _CACHE_KIND,
    "llm_fsm.turn.engine.x_model_writable_keys__mutmut_19": _CACHE_KIND,
    "llm_fsm.logic.rules.x__js_mod__mutmut_8": (
        "for a == 0 the remainder is 0, and -0 is 0 (a float -0.0 becomes int 0)"
    ),
    "llm_fsm.logic.js_values.x_js_number_str__mutmut_11": (
        "only infinities get there: +inf is > 0 and >= 0, -inf neither"
    ),
    "llm_fsm.logic.js_values.x_js_number_str__mutmut_12": "only infinities get there: +inf is > 1, -inf is not",
    "llm_fsm.logic.js_values.x_js_number_str__mutmut_19": "1e+21 and 1e21 are the same literal",
    "llm_fsm.logic.js_values.x_kind__mutmut_3": "None, booleans and strings are never == one another in Python, so one "
    "label for the three changes no comparison",
    "llm_fsm.logic.js_values.x_kind__mutmut_6": "the label is only compared with other _kind results and 'object'",
    "llm_fsm.logic.js_values.x_kind__mutmut_7": "the label is only compared with other _kind results and 'object'",
    "llm_fsm.logic.js_values.x_loose_equal__mutmut_1": (
        "with one None, the rest of _loose_equal finds no number in it: False"
    ),
    "llm_fsm.logic.rules.x__op_contains__mutmut_2": "_op_in does not read data",
    "llm_fsm.logic.rules.x__unknown_message__mutmut_7": "only the best match is used, and it comes first whatever n is",
    "llm_fsm.logic.rules.x__unknown_message__mutmut_10": (
        "only the best match is used, and it comes first whatever n is"
    ),
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
    "llm_fsm.store.base.xǁStoreǁ_beat__mutmut_5": "renewing every quarter of the lease instead of every third "
    "keeps the same lock (more renewal writes, no other difference)",
    "llm_fsm.store.sqlite.xǁSQLiteStoreǁ_release__mutmut_7": "SQL keywords and identifiers are case-insensitive",
    "llm_fsm.store.sqlite.xǁSQLiteStoreǁ_write_history__mutmut_1": "the whole history rewritten instead of the new "
    "exchanges appended: the same rows are stored (only the cost differs)",
    "llm_fsm.store.postgres.xǁPostgresStoreǁ__init____mutmut_34": "without autocommit, the check and the DDL "
    "run in one transaction that leaving the with block commits: the same tables are created",
}

# The tests written for the survivors of a sampled run: mutant name -> pytest node ids. ``--check`` runs them
# against each survivor of the sample they list (pytest in a copy of the mutated package with the current tests,
# ``MUTANT_UNDER_TEST=<mutant>``: how mutmut itself switches a mutant on) and counts it killed only if they fail;
# the outcome is kept in ``.mutation/<module>/checked.json``. Quicker than ``--retest`` (which reruns every
# test of the mutated function, minutes per survivor of the turn) and it also takes tests from other files (where
# that behaviour's tests live: telemetry).
_T, _H = "tests/tools/test_tools.py::", "tests/turn/test_hooks.py::"
_TURN_FROM_DICT = ["tests/conversation/test_conversation.py::test_a_turn_result_as_a_dict_and_back_is_the_same_result"]
_ERROR_HANDLERS = [_H + "test_error_handlers_run_for_their_states_only_and_their_own_failure_is_logged"]
_HANDLER_ARGUMENTS = [_H + "test_handlers_are_given_the_message_no_error_and_the_memory"]
_FOUND_RUNNING = [_T + "test_a_call_found_running_is_logged_and_another_decision_refused_naming_the_tool"]
_REJECTED = [_T + "test_a_call_rejected_without_a_reason_says_only_that_and_the_model_is_told_which_tool"]
_KEYED = [_T + "test_the_calls_of_a_turn_are_keyed_by_tool_and_by_their_rank_among_that_tools_calls"]
_S, _L, _I = "tests/store/test_store.py::", "tests/store/test_store_locks.py::", "tests/store/test_idempotency.py::"
_STORE_ERRORS = [
    _S + "test_a_damaged_sqlite_file_is_a_store_error_naming_the_store",
    _S + "test_a_redis_server_gone_is_a_store_error_naming_the_store_without_its_password",
    _S + "test_the_methods_of_every_store_keep_their_names_and_documentation",
]
_LOCK_TAKEN = [_L + "test_a_turn_whose_lock_was_taken_away_says_so_in_the_log"]
_WAITS = [_L + "test_a_turn_waits_its_whole_timeout_for_the_lock_and_the_conflict_names_the_conversation"]
_REDIS_URLS = [_S + "test_redis_urls_refused_in_words_and_the_forms_accepted"]
_SQLITE_CLOSE = [_S + "test_closing_a_sqlite_store_releases_its_file_and_it_can_be_used_again"]
KILLED_BY: dict[str, list[str]] = {
    "llm_fsm.store.base.x__lost__mutmut_7": _LOCK_TAKEN,
    "llm_fsm.store.redis.xǁRedisStoreǁ_arenew__mutmut_8": _LOCK_TAKEN,
    "llm_fsm.store.base.x__pauses__mutmut_4": _WAITS,
    "llm_fsm.store.base.x_busy__mutmut_2": _WAITS,
    "llm_fsm.store.base.x_failures_as_store_errors__mutmut_8": _STORE_ERRORS,
    "llm_fsm.store.base.x_failures_as_store_errors__mutmut_10": _STORE_ERRORS,
    "llm_fsm.store.base.x_failures_as_store_errors__mutmut_29": _STORE_ERRORS,
    "llm_fsm.store.base.x_failures_as_store_errors__mutmut_31": _STORE_ERRORS,
    "llm_fsm.store.base.x_failures_as_store_errors__mutmut_36": _STORE_ERRORS,
    "llm_fsm.store.idempotency.x_answered__mutmut_12": [
        _I + "test_a_key_sent_with_another_request_is_refused_and_changes_nothing"
    ],
    "llm_fsm.store.idempotency.x_fingerprint__mutmut_22": [
        _I + "test_a_fingerprint_takes_any_text_even_a_lone_surrogate"
    ],
    "llm_fsm.store.postgres.xǁPostgresStoreǁ__init____mutmut_19": [
        "tests/store/test_store_postgres.py::test_a_store_waits_at_most_its_connect_timeout_unless_the_url_says"
    ],
    "llm_fsm.store.postgres.xǁPostgresStoreǁ_arun__mutmut_15": [
        "tests/store/test_store_postgres.py::test_an_async_save_that_keeps_meeting_a_unique_violation_gives_up_after_three_tries"
    ],
    "llm_fsm.store.redis.x__info__mutmut_27": [_S + "test_list_tells_an_ended_conversation_from_an_active_one"],
    "llm_fsm.store.redis.x__split_prefix__mutmut_12": _REDIS_URLS,
    "llm_fsm.store.x__check_redis_url__mutmut_13": _REDIS_URLS,
    "llm_fsm.store.x__check_redis_url__mutmut_7": _REDIS_URLS,
    "llm_fsm.store.x__redis__mutmut_2": _REDIS_URLS,
    "llm_fsm.store.x__local_path__mutmut_3": [_S + "test_a_local_store_url_is_a_path_with_no_query_nor_fragment"],
    "llm_fsm.store.x__local_path__mutmut_8": [_S + "test_a_local_store_url_is_a_path_with_no_query_nor_fragment"],
    "llm_fsm.store.redis.xǁRedisStoreǁdelete__mutmut_3": [_S + "test_redis_deletes_a_conversation_in_one_transaction"],
    "llm_fsm.store.sqlite.xǁSQLiteStoreǁclose__mutmut_1": _SQLITE_CLOSE,
    "llm_fsm.store.sqlite.xǁSQLiteStoreǁclose__mutmut_10": _SQLITE_CLOSE,
    "llm_fsm.store.sqlite.xǁSQLiteStoreǁ_db__mutmut_8": [_S + "test_a_sqlite_store_keeps_one_connection_per_thread"],
    "llm_fsm.store.stored.xǁStoredConversationǁ_derive_uid__mutmut_25": [
        _I + "test_a_keyed_first_request_that_opens_in_a_sub_conversation_has_the_same_uids_in_every_retry"
    ],
    "llm_fsm.store.stored.xǁStoredConversationǁhold__mutmut_2": [
        _I + "test_an_approved_call_of_a_stored_conversation_is_saved_before_and_after_it_runs"
    ],
    "llm_fsm.store.stored.xǁStoredConversationǁ__init____mutmut_8": [
        _I + "test_replayed_says_whether_the_last_run_gave_a_kept_answer"
    ],
    "llm_fsm.turn.runner.xǁTurnRunnerǁapply_tools__mutmut_12": [
        _T + "test_a_failed_tool_call_is_a_rejection_of_the_model_call_that_asked_for_it"
    ],
    "llm_fsm.store.stored.xǁStoredConversationǁ_answered__mutmut_1": [
        _I + "test_replayed_says_whether_the_last_run_gave_a_kept_answer"
    ],
    "llm_fsm.turn.runner.x_fire_error__mutmut_11": _ERROR_HANDLERS,
    "llm_fsm.turn.runner.x_fire_error__mutmut_36": _ERROR_HANDLERS,
    "llm_fsm.turn.runner.x_fire_error__mutmut_41": _ERROR_HANDLERS,
    "llm_fsm.turn.runner.x_resume_turn__mutmut_28": _FOUND_RUNNING,
    "llm_fsm.turn.runner.x_resume_turn__mutmut_64": _REJECTED,
    "llm_fsm.turn.runner.x_summary_steps__mutmut_18": [
        "tests/memory/test_summaries.py::test_a_summary_request_that_cannot_be_made_never_fails_the_turn"
    ],
    "llm_fsm.turn.runner.xǁTurnResultǁfrom_dict__mutmut_14": _TURN_FROM_DICT,
    "llm_fsm.turn.runner.xǁTurnResultǁfrom_dict__mutmut_32": _TURN_FROM_DICT,
    "llm_fsm.turn.runner.xǁTurnResultǁfrom_dict__mutmut_38": _TURN_FROM_DICT,
    "llm_fsm.turn.runner.xǁTurnResultǁfrom_dict__mutmut_63": _TURN_FROM_DICT,
    "llm_fsm.turn.runner.xǁTurnResultǁto_dict__mutmut_28": _TURN_FROM_DICT,
    "llm_fsm.turn.runner.xǁTurnResultǁto_dict__mutmut_4": _TURN_FROM_DICT,
    "llm_fsm.turn.runner.xǁTurnRunnerǁ_fire__mutmut_53": _HANDLER_ARGUMENTS,
    "llm_fsm.turn.runner.xǁTurnRunnerǁ_fire__mutmut_57": _HANDLER_ARGUMENTS,
    "llm_fsm.turn.runner.xǁTurnRunnerǁ_fire__mutmut_60": _HANDLER_ARGUMENTS,
    "llm_fsm.turn.runner.xǁTurnRunnerǁ_fire__mutmut_63": [
        "tests/telemetry/test_telemetry.py::test_a_handler_span_names_the_state_it_ran_in_and_the_target"
    ],
    "llm_fsm.turn.runner.xǁTurnRunnerǁclose_terminal__mutmut_25": [
        _H + "test_a_second_pause_at_the_end_is_another_pause_in_the_ended_state"
    ],
    "llm_fsm.turn.runner.xǁTurnRunnerǁdecide_call__mutmut_19": _FOUND_RUNNING,
    "llm_fsm.turn.runner.xǁTurnRunnerǁdecide_call__mutmut_46": [
        _T + "test_a_supplied_result_that_is_not_json_data_is_refused_naming_it"
    ],
    "llm_fsm.turn.runner.xǁTurnRunnerǁdecide_call__mutmut_68": _REJECTED,
    # test_telemetry.py had it already (outside the turn's test files)
    "llm_fsm.turn.runner.xǁTurnRunnerǁexhausted__mutmut_21": [
        "tests/telemetry/test_telemetry.py::test_a_reply_never_accepted_ends_in_the_fallback"
    ],
    "llm_fsm.turn.runner.xǁTurnRunnerǁkeyed_call__mutmut_14": _KEYED,
    "llm_fsm.turn.runner.xǁTurnRunnerǁkeyed_call__mutmut_2": _KEYED,
    "llm_fsm.turn.runner.xǁTurnRunnerǁrun_approved__mutmut_8": [
        _T + "test_a_call_held_without_a_key_by_an_older_version_gets_the_key_of_its_pause"
    ],
    "llm_fsm.turn.runner.xǁTurnRunnerǁuse_tools__mutmut_70": [
        _T + "test_a_second_call_that_needs_approval_in_the_round_is_refused_until_the_first_is_decided"
    ],
}

# Functions that only run at import time, to build a table (logic's operators): mutmut switches mutants on
# after the import, so their mutants can never be active. Each such change was applied by hand to a copy of
# the module and failed tests/logic/test_logic.py (see benchmarks/RESULTS.md); reported apart, out of the total.
IMPORT_TIME = [
    "llm_fsm.logic.rules.x__chain__mutmut_*",
    "llm_fsm.logic.rules.x__numeric__mutmut_*",
    "llm_fsm.logic.rules.x__deciding__mutmut_*",
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


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COVERAGE_PROCESS_START")}


# Writes mutmut's mutated copy of the package (``mutants/``, with a ``.meta`` file per module listing its
# mutant names) without running any test: mutmut's own first step of ``mutmut run``.
_GENERATE = """
import os
from mutmut.__main__ import create_mutants
from mutmut.mutation.trampoline import set_mutant_under_test
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths
set_mutant_under_test("mutant_generation")
os.makedirs("mutants", exist_ok=True)
copy_src_dir()
copy_also_copy_files()
setup_source_paths()
create_mutants(1)
"""


def sample_file(name: str, size: int, seed: int) -> Path:
    return WORK / name / f"sample-{size}-{seed}.json"


def draw(name: str, size: int, seed: int) -> list[str]:
    """The sample: ``size`` mutant names drawn uniformly (without replacement) from all of ``name``'s
    mutants, the same for the same seed and mutants. Kept in a file so that reports and retests use it."""
    path = sample_file(name, size, seed)
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))["mutants"]
    work = prepare(name)
    subprocess.check_call(
        ["nice", "-n", "10", sys.executable, "-c", _GENERATE], cwd=work, env=_env(), stdout=subprocess.DEVNULL
    )
    everything = sorted(results(name))
    chosen = sorted(random.Random(seed).sample(everything, min(size, len(everything))))
    path.write_text(
        json.dumps({"seed": seed, "size": size, "of": len(everything), "mutants": chosen}, indent=1), encoding="utf-8"
    )
    return chosen


def run(name: str, retest: bool = False, sample: list[str] | None = None) -> int:
    """Run mutmut on ``name``. ``retest``: only the mutants that were not killed last time (with the tests'
    coverage of each function collected again); a killed mutant stays killed as long as tests are only added.
    ``sample``: only these mutants (those without a result yet; with ``retest``, those not killed)."""
    work = prepare(name)
    env = _env()
    cmd = ["nice", "-n", "10", sys.executable, "-m", "mutmut", "run", "--max-children", "1"]
    if sample is not None:
        known = results(name)
        wanted = ("survived", "no tests", "not checked") if retest else ("not checked",)
        todo = [m for m in sample if status(known.get(m)) in wanted]
        if not todo:
            print(f"== {name}: every sampled mutant has a result")
            return 0
        cmd += todo
    elif retest:
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


def wilson(killed: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of the proportion killed / total (in %)."""
    if not total:
        return (0.0, 100.0)
    p = killed / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half))


def checked_file(name: str) -> Path:
    return WORK / name / "checked.json"


def check(name: str, mutants: list[str]) -> None:
    """Run the ``KILLED_BY`` tests of each of ``mutants`` against it; keep their exit codes (1: killed)."""
    work, path = WORK / name, checked_file(name)
    copy = work / "check"  # the mutated package of the last run, with this checkout's tests
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(work / "mutants", copy, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    done = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    for mutant in mutants:
        env = {**_env(), "MUTANT_UNDER_TEST": mutant}
        cmd = ["nice", "-n", "10", sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
        code = subprocess.call([*cmd, *KILLED_BY[mutant]], cwd=copy, env=env, stdout=subprocess.DEVNULL)
        done[mutant] = code
        verdict = "killed" if code == 1 else "survived" if code == 0 else f"exit {code}"
        print(f"== {mutant}: {verdict} by {' '.join(KILLED_BY[mutant])}", flush=True)
        path.write_text(json.dumps(done, indent=1), encoding="utf-8")


def summary(name: str, sample: list[str] | None = None) -> dict[str, object]:
    codes = results(name)
    if sample is not None:
        codes = {m: codes.get(m) for m in sample}
    path = checked_file(name)
    checked = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    by: dict[str, list[str]] = {}
    for mutant, code in codes.items():
        key = status(code)
        if key in ("survived", "no tests") and checked.get(mutant) == 1:
            key = "killed by its new test"
        elif key == "survived" and mutant in EQUIVALENT:
            key = "equivalent"
        elif key == "survived" and any(fnmatch.fnmatch(mutant, p) for p in IMPORT_TIME):
            key = "import-time"
        by.setdefault(key, []).append(mutant)
    killed = len(by.get("killed", [])) + len(by.get("timeout", [])) + len(by.get("killed by its new test", []))
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


def report(names: list[str], samples: dict[str, list[str]] | None = None) -> None:
    samples = samples or {}
    print("| module | killed / total | score | counts |")
    print("|---|---|---|---|")
    for name in names:
        s = summary(name, samples.get(name))
        score = f"{s['score']:.1f} %" if s["score"] is not None else "-"
        if name in samples and s["total"]:
            low, high = wilson(s["killed"], s["total"])  # type: ignore[arg-type]
            score += f" (95 % CI {low:.1f}-{high:.1f} %, sample of {len(samples[name])})"
        counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items())  # type: ignore[union-attr]
        print(f"| {name} | {s['killed']} / {s['total']} | {score} | {counts} |")


def survivors(name: str, sample: list[str] | None = None) -> None:
    s = summary(name, sample)
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
    parser.add_argument("--check", action="store_true", help="run each survivor's KILLED_BY tests against it")
    parser.add_argument("--sample", type=int, metavar="N", help="only a uniform random sample of N mutants per module")
    parser.add_argument("--seed", type=int, default=1, help="the sample's random seed (default 1)")
    args = parser.parse_args()
    names = args.modules or list(MODULES)
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {list(MODULES)}")
    samples = {n: draw(n, args.sample, args.seed) for n in names} if args.sample else {}
    if args.check:
        for name in names:
            s = summary(name, samples.get(name))
            check(name, [m for m in [*s["survived"], *s["no tests"]] if m in KILLED_BY])  # type: ignore[misc]
        report(names, samples)
        return 0
    if args.survivors:
        for name in names:
            survivors(name, samples.get(name))
        return 0
    if not args.report:
        for name in names:
            run(name, retest=args.retest, sample=samples.get(name))

    report(names, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
