"""What one client edit costs the panel, by the number of clients, and a steady stream of
edits at 100,000 clients with the subscription server measured alongside.

Both run on the real core (the first core on PATH; V2Ray 4.34 here): the inbounds it
cannot run are disabled first, as in `clients_change_stall`, so every edit is a live user
change of a client the core runs. CPU is the panel process's own (utime + stime from
/proc/PID/stat; the core's is its own process), read before and after the edits, minus
what the same panel spends idle over a window of the same length. Edits give the client a
new UUID through `POST /panel/api/clients/update/:email`, so each is an API call, a
transaction, a sync and a user changed in the core.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from urllib.parse import quote
from uuid import uuid4

import client_scenarios
from harness import BenchError, Client, Context, Panel, log, percentile, scenario
from sub_scenarios import _sub_url

# The supervisor's (services/control/supervisor.py), written out so that the scenarios
# also run against a panel from before it had WRITE_QUIET, for comparison.
DEBOUNCE_SECONDS = 0.2
WRITE_QUIET = 5.0
SIZES = ("clients_1k", "clients_10k", "clients_100k")
EDITS = 40
IDLE_WINDOW = 30.0  # seconds over which the idle panel's CPU rate is read
SETTLE_START = 15.0  # after the core runs: the first syncs, file writes and ticks
# Apart by more than the sync's debounce, so every edit is synced alone.
EDIT_GAP = DEBOUNCE_SECONDS + 0.1
SETTLE = 1.0  # after the last edit: its sync is done
WRITE_WAIT = WRITE_QUIET + 3.0  # config.json is rewritten once the edits pause
SUSTAINED_RATE = 100  # edits per second asked for
EDIT_CONNECTIONS = 4
ADD_COUNT = 10_000
SUSTAINED_SECONDS = 10.0
EDITED_CLIENTS = 200
# Subscriptions fetched, each once per window: every fetch is a cold one, while editing
# (each edit empties the cache) and idle alike, so the two compare the same work.
SUB_IDS = 8000
PAGE = 200  # the largest page the API gives
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def idle_cpu(pid: int, seconds: float) -> float:
    start = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - start


class Editor:
    """Gives clients new UUIDs, one API call per edit, round the clients it was given that
    have no flow: a save of a client with XTLS Vision is refused on the stand-in V2Ray,
    which lacks it (the core runs such a client on its other inbounds all the same)."""

    def __init__(self, client: Client, emails: list[str]):
        self.client = client
        records = [
            client.call("GET", f"/panel/api/clients/get/{quote(email, safe='@')}")["client"]
            for email in emails
        ]
        self.records = [record for record in records if not record.get("flow")]
        if not self.records:
            raise BenchError("every client the core runs has a flow the core lacks")
        self.done = 0
        self.times: list[float] = []  # ms per edit, answer included

    def last_edited(self) -> dict:
        """The record of the last edit, with the UUID it was given."""
        return self.records[(self.done - 1) % len(self.records)]

    def edit(self) -> None:
        record = self.records[self.done % len(self.records)]
        record["id"] = str(uuid4())
        path = quote(record["email"], safe="@")
        started = time.perf_counter()
        self.client.call("POST", f"/panel/api/clients/update/{path}", record)
        self.times.append((time.perf_counter() - started) * 1000)
        self.done += 1


def core_clients(ctx: Context, dataset: str) -> tuple[Panel, Client, list[str]]:
    """A panel whose core runs (`client_scenarios.core_panel`), a signed-in client, and
    emails of clients the core runs."""
    panel, _in_core, emails = client_scenarios.core_panel(ctx, dataset)
    time.sleep(SETTLE_START)
    return panel, panel.client(), emails[:EDITED_CLIENTS]


def active_sub_ids(client: Client, count: int) -> list[str]:
    """subIds of `count` active clients on enabled inbounds (their subscriptions are
    served; one on disabled inbounds alone is answered 404)."""
    enabled = {
        inbound["id"]
        for inbound in client.call("GET", "/panel/api/inbounds/list/slim")
        if inbound["enable"]
    }
    sub_ids: list[str] = []
    page = 1
    while len(sub_ids) < count:
        rows = client.call(
            "GET", f"/panel/api/clients/list/paged?pageSize={PAGE}&page={page}&filter=active"
        )["items"]
        if not rows:
            break
        sub_ids += [row["subId"] for row in rows if enabled & set(row["inboundIds"])]
        page += 1
    return list(dict.fromkeys(sub_ids))[:count]


def served_uuid(client: Client, email: str) -> str | None:
    """The UUID the running core has for `email` (the running config, live changes in)."""
    for inbound in client.call("GET", "/panel/api/server/getConfigJson")["inbounds"]:
        for entry in (inbound.get("settings") or {}).get("clients") or []:
            if entry.get("email") == email:
                return entry.get("id")
    return None


@scenario("client_edit_cpu", dataset=None, mutates=True)
def client_edit_cpu(ctx: Context) -> dict:
    """Panel CPU per client edit at 1,000, 10,000 and 100,000 clients (one panel each,
    one after the other): EDITS edits EDIT_GAP apart, each synced alone, `runs` times,
    less the panel's idle CPU rate (read over IDLE_WINDOW first) over the same time;
    then, the same way, the CPU of the config.json rewrite once the edits pause."""
    figures = {}
    for dataset in SIZES:
        panel, client, emails = core_clients(ctx, dataset)
        editor = Editor(client, emails[:EDITS])
        idle_rate = idle_cpu(panel.pid, IDLE_WINDOW) / IDLE_WINDOW
        per_edit, raw, writes = [], [], []
        for _ in range(ctx.runs):
            start, started = cpu_seconds(panel.pid), time.perf_counter()
            for _ in range(EDITS):
                editor.edit()
                time.sleep(EDIT_GAP)
            time.sleep(SETTLE)
            spent = cpu_seconds(panel.pid) - start
            window = time.perf_counter() - started
            raw.append(spent / EDITS)
            per_edit.append((spent - idle_rate * window) / EDITS)
            writes.append(idle_cpu(panel.pid, WRITE_WAIT) - idle_rate * WRITE_WAIT)
        last = editor.last_edited()
        synced = served_uuid(client, last["email"]) == last["id"]
        client.close()
        panel.stop()
        figures[dataset] = {
            "cpu_ms_per_edit": round(statistics.median(per_edit) * 1000, 2),
            "cpu_ms_per_edit_raw": round(statistics.median(raw) * 1000, 2),
            "idle_cpu_ms_per_s": round(idle_rate * 1000, 1),
            "deferred_write_cpu_ms": round(statistics.median(writes) * 1000, 1),
            "edits": EDITS,
            "runs": ctx.runs,
            "last_edit_in_core": synced,
            "target": "cpu_ms_per_edit < 20 at clients_100k, flat across sizes",
            "met": statistics.median(per_edit) < 0.020,
        }
        log(f"  {dataset}: {figures[dataset]['cpu_ms_per_edit']} ms CPU per edit")
    figures["ratio_100k_to_1k"] = round(
        figures["clients_100k"]["cpu_ms_per_edit"]
        / max(figures["clients_1k"]["cpu_ms_per_edit"], 0.01),
        2,
    )
    return {"edit_cpu": figures}


@scenario("client_edits_sustained", dataset=None, mutates=True)
def client_edits_sustained(ctx: Context) -> dict:
    """Edits asked for at SUSTAINED_RATE a second for SUSTAINED_SECONDS at 100,000
    clients over EDIT_CONNECTIONS connections (each waits for its answers: as several
    admins or API clients would), while one more connection fetches subscriptions of
    active clients back to back, each once (cold: the edits empty the subscription cache
    anyway); the same subscription figures over the same time with no edit first.
    Edits/s is what the panel got through."""
    panel, client, emails = core_clients(ctx, client_scenarios.DATASET)
    sub_ids = active_sub_ids(client, SUB_IDS)
    sub_url = _sub_url(panel.lines)
    editors = [Editor(panel.client(), emails[n::EDIT_CONNECTIONS]) for n in range(EDIT_CONNECTIONS)]
    figures: dict = {"idle": [], "editing": []}
    rates, cpu_shares, edit_ms = [], [], []
    for _ in range(ctx.runs):
        figures["idle"].append(_subscriptions(sub_url, sub_ids, SUSTAINED_SECONDS))
        stop = threading.Event()
        result: list[dict] = []
        reader = threading.Thread(target=_read_until, args=(sub_url, sub_ids, stop, result))
        before = sum(editor.done for editor in editors)
        cpu, start = cpu_seconds(panel.pid), time.perf_counter()
        reader.start()
        writers = [
            threading.Thread(target=_edit_for, args=(editor, SUSTAINED_RATE / len(editors)))
            for editor in editors
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        elapsed = time.perf_counter() - start
        cpu_shares.append((cpu_seconds(panel.pid) - cpu) / elapsed)
        stop.set()
        reader.join()
        figures["editing"].append(result[0])
        rates.append((sum(editor.done for editor in editors) - before) / elapsed)
        edit_ms += [ms for editor in editors for ms in editor.times]
    time.sleep(SETTLE)
    last = editors[0].last_edited()
    synced = served_uuid(client, last["email"]) == last["id"]
    for editor in editors:
        editor.client.close()
    client.close()
    summary = {
        side: {key: round(statistics.median(run[key] for run in runs), 2) for key in runs[0]}
        for side, runs in figures.items()
    }
    rate = round(statistics.median(rates), 1)
    return {
        "sustained": {
            "edits_per_s": rate,
            "asked_per_s": SUSTAINED_RATE,
            "connections": EDIT_CONNECTIONS,
            "edit_p50_ms": round(statistics.median(edit_ms), 2),
            "edit_p99_ms": round(percentile(edit_ms, 99), 2),
            "panel_cpu_share": round(statistics.median(cpu_shares), 3),
            "subscriptions_idle": summary["idle"],
            "subscriptions_while_editing": summary["editing"],
            "p99_ratio": round(
                summary["editing"]["p99_ms"] / max(summary["idle"]["p99_ms"], 0.01), 2
            ),
            "last_edit_in_core": synced,
            "seconds": SUSTAINED_SECONDS,
            "runs": ctx.runs,
            "target": f"edits_per_s >= {SUSTAINED_RATE} with subscription p99 as when idle",
            "met": rate >= SUSTAINED_RATE * 0.95,
        }
    }


@scenario("clients_add_one_by_one", dataset=None, mutates=True)
def clients_add_one_by_one(ctx: Context) -> dict:
    """ADD_COUNT clients added one at a time (one connection, `POST clients/add`) to a
    VLESS inbound the core runs, on a new panel: the rate of the first thousand and of
    the last, and the panel's CPU per add in each. Each add goes live in the core, so
    what a sync costs shows as the clients grow."""
    (panel,) = ctx.start_panels(["empty"])
    client = panel.client()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inbound = client.call(
        "POST",
        "/panel/api/inbounds/add",
        {
            "protocol": "vless",
            "remark": "one by one",
            "listen": "127.0.0.1",
            "port": port,
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )
    deadline = time.monotonic() + client_scenarios.CORE_WAIT
    while client.call("GET", "/panel/api/server/status")["core"]["state"] != "running":
        if time.monotonic() > deadline:
            return {"one_by_one": {"skipped": "the core did not run"}}
        time.sleep(0.5)
    thousands = []
    for thousand in range(ADD_COUNT // 1000):
        cpu, start = cpu_seconds(panel.pid), time.perf_counter()
        for n in range(1000):
            email = f"one.{thousand * 1000 + n:05d}@bench.example.org"
            body = {"client": {"email": email}, "inboundIds": [inbound["id"]]}
            client.call("POST", "/panel/api/clients/add", body)
        elapsed = time.perf_counter() - start
        thousands.append((1000 / elapsed, (cpu_seconds(panel.pid) - cpu) / 1000))
    time.sleep(SETTLE)
    synced = served_uuid(client, email) is not None
    client.close()
    (first_rate, first_cpu), (last_rate, last_cpu) = thousands[0], thousands[-1]
    return {
        "one_by_one": {
            "first_thousand_per_s": round(first_rate, 1),
            "last_thousand_per_s": round(last_rate, 1),
            "ratio_last_to_first": round(last_rate / first_rate, 2),
            "first_thousand_cpu_ms_per_add": round(first_cpu * 1000, 2),
            "last_thousand_cpu_ms_per_add": round(last_cpu * 1000, 2),
            "clients": ADD_COUNT,
            "last_add_in_core": synced,
            "target": "ratio_last_to_first about 1",
            "met": last_rate >= 0.9 * first_rate,
        }
    }


def _edit_for(editor: Editor, rate: float) -> None:
    """Edit at `rate` a second (as fast as answers come when they lag) for
    SUSTAINED_SECONDS."""
    before, start = editor.done, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < SUSTAINED_SECONDS:
        ahead = (editor.done - before) / rate - elapsed
        if ahead > 0:
            time.sleep(ahead)
        editor.edit()


def _read_until(url: str, sub_ids: list[str], stop: threading.Event, result: list) -> None:
    result.append(_subscriptions(url, sub_ids, None, stop))


def _subscriptions(url: str, sub_ids: list[str], seconds: float | None, stop=None) -> dict:
    """Fetch /sub/ID of `sub_ids` in turn on one connection for `seconds` (or until
    `stop` is set): p50, p99 and slowest in ms, and how many."""
    fetcher = Client(url)
    times = []
    end = time.perf_counter() + (seconds or 1e9)
    try:
        while time.perf_counter() < end and not (stop and stop.is_set()):
            sub_id = sub_ids[len(times) % len(sub_ids)]
            started = time.perf_counter()
            reply = fetcher.request("GET", f"/sub/{sub_id}")
            times.append((time.perf_counter() - started) * 1000)
            if reply.status != 200:
                raise RuntimeError(f"/sub/{sub_id} answered {reply.status}")
    finally:
        fetcher.close()
    return {
        "p50_ms": statistics.median(times),
        "p99_ms": percentile(times, 99),
        "slowest_ms": max(times),
        "requests": len(times),
    }
