"""What only the PostgreSQL store has: its URL and schema, its errors, a dropped connection, a role without
CREATE, racing first saves. The conformance, lock and crash tests run on it in test_store*.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid

import pytest

from llm_fsm.errors import ConflictError, StoreError
from llm_fsm.snapshot import Exchange
from llm_fsm.store import open_store
from tests.store.test_store import snapshot_after

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")


@pytest.fixture
def schema_url(postgres_url):
    return f"{postgres_url}?schema=t_{uuid.uuid4().hex}"


def admin(postgres_url):
    return psycopg.connect(postgres_url, autocommit=True)


@pytest.mark.parametrize(
    "url, words",
    [
        ("postgresql://ann:s3cret@127.0.0.1:9/db", "cannot reach PostgreSQL at postgresql://ann:***@127.0.0.1:9/db"),
        (
            "postgres://127.0.0.1:9/db?password=s3cret",
            "cannot reach PostgreSQL at postgres://127.0.0.1:9/db?password=***",
        ),
        ("postgresql://ann:s3cret@127.0.0.1:port/db", "the port is not a number"),
        ("postgresql://127.0.0.1:9/db?sslmod=require", 'invalid URI query parameter: "sslmod"'),
        ("postgresql://127.0.0.1:9/db?schema=my-app", "schema 'my-app' is not a plain name"),
    ],
)
def test_bad_urls_and_unreachable_servers_are_store_errors_without_the_password(url, words):
    with pytest.raises(StoreError) as info:
        open_store(url)
    assert words in str(info.value) and "s3cret" not in str(info.value)


def test_both_schemes_and_the_schema_parameter(postgres_url, schema_url):
    snapshot = snapshot_after(2)
    with open_store(schema_url) as store:
        store.save("c", snapshot)
    other = schema_url.replace("postgresql://", "postgres://", 1)
    with open_store(other) as same, open_store(postgres_url) as default_schema:
        assert same.load("c").snapshot == snapshot, "postgres:// names the same database"
        assert default_schema.load("c") is None, "another schema is another store"
    name = schema_url.rpartition("schema=")[2]
    with admin(postgres_url) as connection:
        tables = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (name,)
        ).fetchall()
        unlogged = connection.execute(
            "SELECT relpersistence FROM pg_class WHERE oid = %s::regclass", (f"{name}.locks",)
        )
        assert [t[0] for t in tables] == ["conversations", "locks", "turns"]
        assert unlogged.fetchone()[0] == "u", "lock rows cost no WAL flush"


def test_text_with_a_nul_character_is_stored(schema_url):
    snapshot = snapshot_after(1)
    odd = Exchange(user="a\x00b", assistant="tab\tnul\x00", state="chat")
    snapshot = snapshot.model_copy(update={"history": (*snapshot.history, odd)})
    with open_store(schema_url) as store:
        store.save("c", snapshot)
        assert store.load("c").snapshot.history[-1] == odd


def test_a_connection_the_server_dropped_is_replaced(postgres_url, schema_url):
    from llm_fsm.store.postgres_pool import CHECK_IDLE

    store = open_store(schema_url)
    store.save("c", snapshot_after(1))

    async def turn() -> int:
        async with store.alock("c", timeout=1):
            return (await store.aload("c")).version

    async def scenario() -> None:
        assert await turn() == 1
        with admin(postgres_url) as connection:  # a restart, a failover, an idle timeout...
            connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND backend_type = 'client backend' AND datname = current_database()"
            )
        await asyncio.sleep(CHECK_IDLE + 0.1)  # a connection idle this long is checked before it is used
        assert await turn() == 1
        await store.aclose()

    asyncio.run(scenario())
    assert store.load("c").version == 1 and store.save("c", snapshot_after(2), expected_version=1) == 2
    store.close()


def test_a_stopped_server_is_a_store_error_naming_it(tmp_path):
    from tests import postgres_server

    server = postgres_server.start()
    store = open_store(server.url)
    store.save("c", snapshot_after(1))
    server.stop()
    with pytest.raises(StoreError, match=r"PostgreSQL at postgresql://postgres@127\.0\.0\.1:\d+/postgres"):
        store.load("c")

    async def aload() -> None:
        with pytest.raises(StoreError, match="PostgreSQL at"):
            await store.aload("c")

    asyncio.run(aload())


def test_first_saves_racing_on_one_id_are_both_kept_or_one_refused(schema_url):
    store = open_store(schema_url)
    outcomes: dict[str, list[object]] = {}

    def race(cid: str, expected: int | None) -> None:
        barrier, results = threading.Barrier(2), outcomes.setdefault(cid, [])

        def save(n: int) -> None:
            barrier.wait()
            try:
                results.append(store.save(cid, snapshot_after(n), expected_version=expected))
            except ConflictError:
                results.append("conflict")

        threads = [threading.Thread(target=save, args=(n,)) for n in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    for n in range(15):
        race(f"free{n}", None)
        race(f"new{n}", 0)
    for cid, results in outcomes.items():
        if cid.startswith("free"):
            assert sorted(results) == [1, 2] and store.load(cid).version == 2
        else:
            assert sorted(results, key=str) == [1, "conflict"] and store.load(cid).version == 1
    store.close()


def test_a_role_without_create_uses_tables_that_exist_and_cannot_make_new_ones(postgres_url, schema_url):
    name = schema_url.rpartition("schema=")[2]
    open_store(schema_url).close()  # the owner creates the tables
    role = f"worker_{uuid.uuid4().hex[:8]}"
    with admin(postgres_url) as connection:
        connection.execute(f"CREATE ROLE {role} LOGIN")
        connection.execute(f"GRANT USAGE ON SCHEMA {name} TO {role}")
        connection.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {name} TO {role}")
    as_worker = schema_url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
    with open_store(as_worker) as store:
        assert store.save("c", snapshot_after(1)) == 1
        with store.lock("c", timeout=0):
            assert store.load("c").version == 1
    with pytest.raises(StoreError, match="cannot use PostgreSQL at .*permission denied"):
        open_store(as_worker.replace(f"schema={name}", "schema=elsewhere"))


def test_without_psycopg_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "llm_fsm.store.postgres", raising=False)
    with pytest.raises(StoreError, match=r"pip install 'llm-fsm-runtime\[postgres\]'"):
        open_store("postgresql://127.0.0.1:9/db")


def test_importing_the_stores_loads_no_postgres_driver():
    code = "import sys, llm_fsm, llm_fsm.store; print([m for m in ('psycopg', 'psycopg_pool') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_store_waits_at_most_its_connect_timeout_unless_the_url_says(schema_url):
    # libpq alone would wait as long as TCP does for a server that does not answer
    from llm_fsm.store.postgres import CONNECT_TIMEOUT

    def timeout_of(store) -> str | None:
        return psycopg.conninfo.conninfo_to_dict(store._conninfo).get("connect_timeout")

    store = open_store(schema_url)
    assert timeout_of(store) == str(CONNECT_TIMEOUT)
    store.close()
    store = open_store(f"{schema_url}&connect_timeout=3")
    assert timeout_of(store) == "3"
    store.close()


def test_an_async_save_that_keeps_meeting_a_unique_violation_gives_up_after_three_tries(schema_url, monkeypatch):
    # a first save racing another one on the same id is tried again, but not for ever
    import llm_fsm.store.postgres as postgres

    store, tries = open_store(schema_url), []

    async def always_taken(*_args, **_kwargs):
        tries.append(1)
        raise psycopg.errors.UniqueViolation("duplicate key value violates unique constraint")

    monkeypatch.setattr(postgres, "_acarry_out", always_taken)

    async def save() -> None:
        with pytest.raises(StoreError, match="duplicate key value"):
            await store.asave("c", snapshot_after(1), expected_version=0)

    asyncio.run(save())
    assert len(tries) == 3
    store.close()
