"""Where the time of the clients hot paths goes, in process, at 100,000 clients.

    python bench/profile_clients.py [--db FILE] [--cprofile N]

Builds `clients_100k` (or copies `--db`, a database the bench built) into a temporary
directory, opens a `Store` on it as the panel does and calls the services directly: each
SQL statement the paged list and its summary run is timed on its own (with SQLite's query
plan), then whole service calls and the JSON encoding of their result, the part the HTTP
figures cannot separate. `--cprofile N` also prints the N most expensive functions of
each service call. Figures go to stdout; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from clients_dataset import DATASET_NAME
from harness import DATASETS, build_database
from pony.orm import db_session

from appliance.config import DB_FILE
from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings import Settings
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.inbounds.records import Inbounds
from appliance.store import Store
from appliance.store.client_rows import CLIENT_FROM as FROM
from appliance.web.http import encode

REPEAT = 5
# (prepare, call): `prepare` runs untimed before each timed `call`.
Call = tuple[Callable[[], object], Callable[[], object]]
PAGED_QUERIES = {
    "first_page": {},
    "search": {"search": "4242"},
    "active_by_traffic": {"filter": "active", "sort": "traffic", "order": "descend"},
    "expiring": {"filter": "expiring"},
    "protocol_vless": {"protocol": "vless"},
    "deep_page": {"page": "2000"},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, help="a clients_100k database to copy")
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="appliance-profile-"))
    try:
        path = workdir / DB_FILE
        if args.db:
            shutil.copyfile(args.db, path)
        else:
            build_database(DATASETS[DATASET_NAME], path)
        profile(path, args.cprofile)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def profile(path: Path, top: int) -> None:
    store = Store(str(path))
    store.open()
    settings = Settings(store, FilePlaces(str(path.parent)), ChangeNotice())
    settings.load()
    query = ClientQuery(store, settings, Presence())
    inbounds = Inbounds(
        store,
        lambda: [],
        query.by_inbound,
        places=settings.places,
        notice=ChangeNotice(),
        # Read only here: nothing is saved, and no core or node stands behind it.
        held_sockets=list,
        check_config=_ignored,
        place_on_node=_ignored,
        node_marks=lambda node_ids: {},
        node_save_failed=_ignored,
    )
    statements(query, path)
    calls = {
        **{
            f"paged {name} (summary cached)": _paged(query, params, cached=True)
            for name, params in PAGED_QUERIES.items()
        },
        "paged first_page (summary uncached)": _paged(query, {}, cached=False),
        "summary (full reading)": (
            _nothing,
            lambda: ClientQuery(store, settings, Presence()).summary().as_dict(),
        ),
        "export": (_nothing, lambda: sum(len(piece) for piece in query.export_json())),
        "inbounds list slim": (_nothing, lambda: inbounds.list(slim=True)),
        "inbounds list": (_nothing, inbounds.list),
    }
    for name, call in calls.items():
        service, encoding, size = _time_call(call)
        print(
            f"{name}: service {service:.1f} ms, JSON encoding {encoding:.1f} ms, "
            f"{size} bytes (median of {REPEAT})"
        )
        if top:
            _cprofile(call, top)
    store.close()


def statements(query: ClientQuery, path: Path) -> None:
    """Each SQL statement of a paged request and of the summary, timed alone on a plain
    sqlite3 connection, with its plan."""
    conn = sqlite3.connect(path)
    depleted, d_params = query.depleted_sql()
    expiring, e_params = query.expiring_sql()
    search = (
        "(c.email_key LIKE ? ESCAPE '!' OR LOWER(c.sub_id) LIKE ? ESCAPE '!' "
        "OR LOWER(c.comment) LIKE ? ESCAPE '!')"
    )
    cases = {
        "count all": (f"SELECT COUNT(*) {FROM}", []),
        "count search": (f"SELECT COUNT(*) {FROM} WHERE {search}", ["%4242%"] * 3),
        "count search, email only": (
            "SELECT COUNT(*) FROM client c WHERE c.email_key LIKE ?",
            ["%4242%"],
        ),
        "page sorted by email": (
            f"SELECT c.id {FROM} ORDER BY c.email_key ASC, c.id ASC LIMIT 25 OFFSET 0",
            [],
        ),
        "page 2000 sorted by email": (
            f"SELECT c.id {FROM} ORDER BY c.email_key ASC, c.id ASC LIMIT 25 OFFSET 49975",
            [],
        ),
        "page active by traffic": (
            f"SELECT c.id {FROM} WHERE (c.enable = 1 AND NOT {depleted}) "
            "ORDER BY (COALESCE(t.up, 0) + COALESCE(t.down, 0)) DESC, c.id DESC LIMIT 25",
            d_params,
        ),
        "summary: total + active": (
            f"SELECT COUNT(*), SUM(CASE WHEN (c.enable = 1 AND NOT {depleted}) THEN 1 ELSE 0 END)"
            f" {FROM}",
            d_params,
        ),
        "summary: depleted emails": (
            f"SELECT c.email {FROM} WHERE {depleted} ORDER BY c.email_key",
            d_params,
        ),
        "summary: expiring emails": (
            f"SELECT c.email {FROM} WHERE {expiring} ORDER BY c.email_key",
            e_params,
        ),
        "summary: deactive emails": (
            f"SELECT c.email {FROM} WHERE c.enable = 0 ORDER BY c.email_key",
            [],
        ),
    }
    for name, (sql, params) in cases.items():
        times = []
        for _ in range(REPEAT):
            started = time.perf_counter()
            rows = conn.execute(sql, params).fetchall()
            times.append(time.perf_counter() - started)
        plan = "; ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        print(f"SQL {name}: {statistics.median(times) * 1000:.1f} ms, {len(rows)} rows [{plan}]")
    conn.close()


def _paged(query: ClientQuery, params: dict, cached: bool) -> Call:
    """A paged call and what prepares it, untimed: the summary read (cached), or one
    client's enable flag flipped, which the summary must follow (uncached)."""

    def prepare() -> None:
        if not cached:
            with db_session:
                query.store.execute("UPDATE client SET enable = 1 - enable WHERE id = 1")
                query.store.client_writes.note(ids=[1])
            query.invalidate()
        else:
            query.summary()

    return prepare, lambda: query.paged({"pageSize": "25", **params})


def _time_call(call: Call) -> tuple[float, float, int]:
    prepare, call = call
    service, encoding = [], []
    size = 0
    for _ in range(REPEAT):
        prepare()
        started = time.perf_counter()
        with db_session:
            result = call()
        middle = time.perf_counter()
        text = encode(True, "", result)
        encoding.append(time.perf_counter() - middle)
        service.append(middle - started)
        size = len(text.encode())
    return statistics.median(service) * 1000, statistics.median(encoding) * 1000, size


def _nothing() -> None:
    """No preparation."""


def _ignored(*args) -> None:
    """What the inbound service tells a core or a node, here where none is."""


def _cprofile(call: Call, top: int) -> None:
    prepare, call = call
    prepare()
    profiler = cProfile.Profile()
    with db_session:
        profiler.runcall(lambda: encode(True, "", call()))
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    sys.exit(main())
