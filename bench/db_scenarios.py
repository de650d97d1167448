"""The same panel work on SQLite, PostgreSQL and MariaDB, side by side: `backends`.

Each backend gets the `clients_100k` dataset. SQLite runs on a copy of the built file, as
the clients scenarios do. For PostgreSQL and MariaDB the bench makes a database of its own
on the local server (`bench_<random>`), copies the built file into it with the product's
own `appliance migrate-db` (timed: `migrate_db`), starts the panel with `--db URL`, and
drops the database afterwards, so the networked panels serve exactly the rows the SQLite
one does.

On each panel: `list/paged` pages of 25 (first page, a search, active clients by traffic)
with the summary cached, the first page with it uncached (a client change before every
request, untimed; see client_scenarios.py), then the dataset check through the API, then
`bulkCreate` of 10,000 new clients, one request per run on the same panel (run N starts
at 100,000 + N x 10,000 clients). Every figure carries `ratio_to_sqlite`: its median over
SQLite's. The JSON has one figure per measure and backend (`first_page.postgres`);
stderr gets them as a table, one row per measure, one column per backend.
"""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import client_scenarios
from client_scenarios import PAGED, PAGED_VARIANTS, SummaryBuster, _spread
from clients_dataset import DATASET_NAME
from harness import (
    DATASETS,
    BenchError,
    Client,
    Context,
    Panel,
    expect_success,
    latency,
    log,
    scenario,
)

from appliance.config import DB_FILE

BACKENDS = ("sqlite", "postgres", "mysql")
SERVERS = {"postgres": ("127.0.0.1", 5432), "mysql": ("127.0.0.1", 3306)}
PAGES = ("first_page", "search", "active_by_traffic")
BULK_COUNT = 10_000
MIGRATE_TIMEOUT = 900
# measure -> the key of its figure that the table shows and the ratios divide
MEASURES = {
    **{name: "median_ms" for name in PAGES},
    "first_page_uncached": "median_ms",
    "bulk_create_10k": "median_s",
    "migrate_db": "seconds",
}


class ServerDatabase:
    """A database of the bench's own on the local `kind` server, made empty and dropped
    at the end; the servers are shared, so nothing else on them is touched."""

    def __init__(self, kind: str):
        self.kind = kind
        self.name = f"bench_{secrets.token_hex(6)}"
        host, port = SERVERS[kind]
        user = "postgres" if kind == "postgres" else "root"
        scheme = "postgresql" if kind == "postgres" else "mysql"
        self.url = f"{scheme}://{user}@{host}:{port}/{self.name}"

    def __enter__(self) -> ServerDatabase:
        self._admin(f"CREATE DATABASE {self.name}")
        return self

    def __exit__(self, *exc_info) -> None:
        self._admin(f"DROP DATABASE IF EXISTS {self.name}")

    def _admin(self, statement: str) -> None:
        host, port = SERVERS[self.kind]
        if self.kind == "postgres":
            import psycopg2

            conn = psycopg2.connect(host=host, port=port, user="postgres", dbname="postgres")
            conn.autocommit = True
        else:
            import pymysql

            conn = pymysql.connect(host=host, port=port, user="root", password="", autocommit=True)
        try:
            cur = conn.cursor()
            if self.kind == "postgres" and statement.startswith("DROP"):
                cur.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (self.name,),
                )
            cur.execute(statement)
        finally:
            conn.close()


@scenario("backends", dataset=None, mutates=True)
def backends(ctx: Context) -> dict:
    """list/paged at 100,000 clients (first page, search, active by traffic; first page
    with the summary uncached) and bulkCreate of 10,000 clients on SQLite, PostgreSQL and
    MariaDB, the networked ones filled by `appliance migrate-db`; ratios to SQLite."""
    measured: dict[str, dict] = {}
    for kind in BACKENDS:
        log(f"backends: {kind}")
        try:
            measured[kind] = _on_backend(ctx, kind)
        except Exception as exc:  # one backend down still leaves the others' figures
            log(f"backends: {kind} failed: {exc!r}")
            measured[kind] = {"error": f"{type(exc).__name__}: {exc}"}
    figures = _side_by_side(measured)
    _log_table(figures)
    return figures


def _on_backend(ctx: Context, kind: str) -> dict:
    if kind == "sqlite":
        (panel,) = ctx.start_panels([DATASET_NAME])
        try:
            return _measure(ctx, panel)
        finally:
            panel.stop()  # idle, but not beside the next backend's measurements
    with ServerDatabase(kind) as database:
        seconds = _migrate(ctx.bench.data_dir(DATASET_NAME) / DB_FILE, database.url)
        panel = ctx.start(Panel(ctx.bench.data_dir("empty"), DATASET_NAME, db=database.url))
        try:
            figures = _measure(ctx, panel)
        finally:
            panel.stop()  # before the database is dropped under it
        figures["migrate_db"] = {"seconds": round(seconds, 2), "runs": 1}
        return figures


def _migrate(source: Path, url: str) -> float:
    """`appliance migrate-db` of the SQLite file into `url`; its wall time in seconds."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("APPLIANCE_")}
    argv = [sys.executable, "-m", "appliance", "migrate-db", "--from", str(source), "--to", url]
    started = time.perf_counter()
    result = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=MIGRATE_TIMEOUT, check=False
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise BenchError(f"migrate-db failed:\n{result.stdout}{result.stderr}")
    log(f"backends: migrate-db into {url.split('://')[0]} took {seconds:.1f} s")
    return seconds


def _measure(ctx: Context, panel: Panel) -> dict:
    client = panel.client()
    try:
        figures = {}
        for name in PAGES:
            path = f"{PAGED}?{PAGED_VARIANTS[name]}"
            figures[name] = latency(
                lambda path=path: client.request("GET", path),
                ctx.runs,
                client_scenarios.PAGED_REQUESTS,
            )
        first = f"{PAGED}?{PAGED_VARIANTS['first_page']}"
        figures["first_page_uncached"] = latency(
            lambda: client.request("GET", first),
            ctx.runs,
            client_scenarios.UNCACHED_REQUESTS,
            warmup=0,
            before=SummaryBuster(client),
        )
        figures["checked"] = DATASETS[DATASET_NAME].check(client)
        figures["bulk_create_10k"] = _bulk_create(client, ctx.runs)
        return figures
    finally:
        client.close()


def _bulk_create(client: Client, runs: int) -> dict:
    seconds = []
    for run in range(runs):
        items = [
            {"client": {"email": f"backends-{run}-{n:05d}@example.com"}, "inboundIds": _spread(n)}
            for n in range(BULK_COUNT)
        ]
        started = time.perf_counter()
        reply = client.request("POST", "/panel/api/clients/bulkCreate", items)
        seconds.append(time.perf_counter() - started)
        created = expect_success(reply, "bulkCreate")["obj"]["created"]
        if created != BULK_COUNT:
            raise BenchError(f"bulkCreate created {created} of {BULK_COUNT} clients")
    return {
        "median_s": round(statistics.median(seconds), 3),
        "max_s": round(max(seconds), 3),
        "runs": runs,
        "clients_per_request": BULK_COUNT,
    }


def _side_by_side(measured: dict[str, dict]) -> dict:
    """One figure per measure and backend, in table order, each with its ratio to SQLite."""
    figures: dict[str, object] = {}
    sqlite = measured.get("sqlite", {})
    for measure, key in MEASURES.items():
        for kind in BACKENDS:
            figure = measured[kind].get(measure)
            if not isinstance(figure, dict):
                continue
            base = sqlite.get(measure, {}).get(key)
            if base:
                figure["ratio_to_sqlite"] = round(figure[key] / base, 2)
            figures[f"{measure}.{kind}"] = figure
    figures["checked"] = [f"{kind}: {measured[kind].get('checked', '-')}" for kind in BACKENDS]
    errors = {kind: found["error"] for kind, found in measured.items() if "error" in found}
    if errors:
        figures["errors"] = errors
    return figures


def _log_table(figures: dict) -> None:
    width = max(map(len, MEASURES)) + 2
    log("backends:".ljust(width) + "".join(kind.rjust(24) for kind in BACKENDS))
    for measure, key in MEASURES.items():
        cells = []
        for kind in BACKENDS:
            figure = figures.get(f"{measure}.{kind}")
            if figure is None:
                cells.append("-")
                continue
            unit = "ms" if key == "median_ms" else "s"
            cell = f"{figure[key]} {unit}"
            if "ratio_to_sqlite" in figure and kind != "sqlite":
                cell += f" (x{figure['ratio_to_sqlite']})"
            cells.append(cell)
        log(f"  {measure}".ljust(width) + "".join(cell.rjust(24) for cell in cells))
