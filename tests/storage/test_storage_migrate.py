"""The schema comes from the Alembic migrations, which agree with storage.schema."""

from __future__ import annotations

import threading

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text
from storage_rows import result

from storage import ResultStore, count_results, make_engine, upgrade
from storage.migrate import MIGRATIONS_DIR
from storage.schema import metadata

HEAD = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


def _version(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())


def test_the_migrated_schema_matches_the_metadata(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine)

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []
    assert set(inspect(engine).get_table_names()) == {*metadata.tables, "alembic_version"}
    assert _version(engine) == [HEAD]
    engine.dispose()


def test_upgrading_twice_is_a_no_op(db_url: str) -> None:
    with ResultStore(db_url) as store:
        store.write([result("r1")], [], [])
        upgrade(store.engine)

        assert _version(store.engine) == [HEAD]
        assert count_results(store.engine) == 1


def test_workers_starting_together_migrate_once(db_url: str) -> None:
    engines = [make_engine(db_url) for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(engines))

    def migrate(engine: Engine) -> None:
        start.wait()
        try:
            upgrade(engine)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=migrate, args=(engine,)) for engine in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert _version(engines[0]) == [HEAD]
    for engine in engines:
        engine.dispose()
