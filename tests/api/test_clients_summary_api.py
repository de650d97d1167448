"""The paged list's summary is kept up to date by following changes instead of reading
every client again; these tests hold it to a full recomputation after random changes.

Over HTTP against a real panel: random adds, edits (enable, quota, expiry, email), deletes,
traffic writes, resets, attach and detach, bulk calls, and expiries crossed while the test
waits; after each step the page's summary must equal the buckets the test computes from
`clients/list`, and a page asked with the `summaryVersion` it already has must leave the
summary out only when nothing in it changed.

In process on the same database (SQLite, or the server of `--db`): the same services the
panel runs, on a clock the test moves, with traffic ticks through the accounting the core's
counters go through; after each step the summary must equal the buckets read by one query
over every client.
"""

from __future__ import annotations

import json
import random
import time

import pytest
from helpers import (
    create_database,
    create_inbound,
    free_port,
    ok,
    refused,
    runs_every_feature,
    without_core_or_nodes,
)
from panels import backend, created_databases
from pony.orm import db_session

from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings import Settings
from appliance.services.clients import summary
from appliance.services.clients.bulk import ClientBulk
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.clients.records import Clients
from appliance.services.clients.traffic import TrafficAccounting
from appliance.services.inbounds.records import Inbounds
from appliance.services.webhooks.outbox import Outbox
from appliance.store import Store
from appliance.store.client_rows import CLIENT_FROM as FROM

API = "/panel/api/clients"
PAGED = f"{API}/list/paged"
DAY_MS = 86_400_000
GB = 1024**3
LISTS = ("online", "depleted", "expiring", "deactive")


# ---- over HTTP ---------------------------------------------------------------------------


def expected_summary(api) -> dict:
    """The summary as the spec defines it, computed here from every client record (no
    core runs, so nobody is online)."""
    settings = ok(api.post("/panel/api/setting/all"))
    now = time.time() * 1000
    horizon = now + settings["expireDiff"] * DAY_MS
    margin = settings["trafficDiff"] * GB
    rows = sorted(ok(api.get(f"{API}/list")), key=lambda c: c["email"].casefold())
    buckets: dict[str, list[str]] = {name: [] for name in LISTS}
    active = 0
    for client in rows:
        used = client["traffic"]["up"] + client["traffic"]["down"]
        quota = client["totalGB"]
        expiry = client["expiryTime"]
        depleted = (quota > 0 and used >= quota) or 0 < expiry <= now
        if depleted:
            buckets["depleted"].append(client["email"])
        if not client["enable"]:
            buckets["deactive"].append(client["email"])
        elif not depleted:
            active += 1
            if 0 < expiry <= horizon or (quota > 0 and quota - used <= margin):
                buckets["expiring"].append(client["email"])
    return {"total": len(rows), "active": active, **buckets}


def random_expiry(rng: random.Random) -> int:
    """An expiry at least an hour from any boundary the test could cross by accident."""
    now = int(time.time() * 1000)
    return rng.choice(
        [0, now - 2 * DAY_MS, now + 3_600_000, now + 2 * DAY_MS, now + 5 * DAY_MS, -DAY_MS]
    )


def random_client(rng: random.Random, n: int) -> dict:
    return {
        "email": f"{rng.choice(['Ann', 'bob', 'Çelik', 'dee'])}{n}@summary.test",
        "enable": rng.random() > 0.2,
        "totalGB": rng.choice([0, 0, GB // 2, 3 * GB, 50 * GB]),
        "expiryTime": random_expiry(rng),
    }


@pytest.fixture
def own(fresh_panel):
    return fresh_panel.client()


def inbound(api, protocol: str = "vless") -> int:
    settings = {"decryption": "none"} if protocol == "vless" else {}
    return create_inbound(api, {"protocol": protocol, "port": free_port(), "settings": settings})[
        "id"
    ]


class Browser:
    """Pages as our UI asks for them: the version it holds goes with every page after the
    first, and a page without a summary means the one it holds is still right."""

    def __init__(self, api):
        self.api = api
        self.summary: dict | None = None
        self.version = ""

    def page(self, **params) -> dict:
        if self.version:
            params["summaryVersion"] = self.version
        reply = ok(self.api.get(PAGED, params=params))
        if "summary" in reply:
            self.summary = reply["summary"]
        else:
            assert reply["summaryVersion"] == self.version
        self.version = reply["summaryVersion"]
        return reply


def check(api, browser: Browser) -> None:
    reply = browser.page(pageSize=5)
    expected = expected_summary(api)
    assert browser.summary == expected
    assert reply["total"] == expected["total"]
    full = ok(api.get(PAGED, params={"pageSize": 1}))
    assert full["summary"] == browser.summary and full["summaryVersion"] == browser.version


def test_summary_equals_a_recomputation_after_random_changes_over_http(own):
    api = own
    rng = random.Random(18)
    first, second = inbound(api), inbound(api, "trojan")
    browser = Browser(api)
    emails: list[str] = []
    made = 0

    def some(k: int) -> list[str]:
        return rng.sample(emails, min(k, len(emails)))

    for _ in range(90):
        action = rng.choice(
            ["add"] * 4
            + ["edit"] * 4
            + ["traffic"] * 3
            + ["delete", "reset", "attach", "detach", "bulk", "adjust", "sweep", "soon"]
        )
        if action == "add" or not emails:
            made += 1
            client = random_client(rng, made)
            ok(api.post(f"{API}/add", {"client": client, "inboundIds": [first]}))
            emails.append(client["email"])
        elif action == "edit":
            email = rng.choice(emails)
            view = ok(api.get(f"{API}/get/{email}"))["client"]
            change = rng.choice(["enable", "totalGB", "expiryTime", "email"])
            if change == "enable":
                view["enable"] = not view["enable"]
            elif change == "totalGB":
                view["totalGB"] = rng.choice([0, GB // 2, 3 * GB, 50 * GB])
            elif change == "expiryTime":
                view["expiryTime"] = random_expiry(rng)
            else:
                made += 1
                view["email"] = f"renamed{made}@summary.test"
            ok(api.post(f"{API}/update/{email}", view))
            emails[emails.index(email)] = view["email"]
        elif action == "traffic":
            for email in some(3):
                used = rng.choice([0, GB // 4, GB, 4 * GB, 60 * GB])
                ok(api.post(f"{API}/updateTraffic/{email}", {"upload": used, "download": 0}))
        elif action == "delete":
            email = rng.choice(emails)
            ok(api.post(f"{API}/del/{email}?keepTraffic={rng.choice([0, 1])}"))
            emails.remove(email)
        elif action == "reset":
            ok(api.post(f"{API}/resetTraffic/{rng.choice(emails)}"))
        elif action == "attach":
            ok(api.post(f"{API}/{rng.choice(emails)}/attach", {"inboundIds": [second]}))
        elif action == "detach":
            ok(api.post(f"{API}/{rng.choice(emails)}/detach", {"inboundIds": [first]}))
        elif action == "bulk":
            kind = rng.choice(["create", "delete", "resetTraffic"])
            if kind == "create":
                items = []
                for _ in range(rng.randint(1, 6)):
                    made += 1
                    items.append(
                        {"client": random_client(rng, made), "inboundIds": [first, second]}
                    )
                ok(api.post(f"{API}/bulkCreate", items))
                emails += [item["client"]["email"] for item in items]
            elif kind == "delete":
                chosen = some(3)
                ok(api.post(f"{API}/bulkDel", {"emails": chosen, "keepTraffic": False}))
                emails = [email for email in emails if email not in chosen]
            else:
                ok(api.post(f"{API}/bulkResetTraffic", {"emails": some(4)}))
        elif action == "adjust":
            body = {"emails": some(4), "addDays": rng.choice([-3, 1, 4]), "addBytes": GB}
            ok(api.post(f"{API}/bulkAdjust", body))
        elif action == "sweep":
            chosen = rng.choice(["delDepleted", "resetAllTraffics"])
            ok(api.post(f"{API}/{chosen}"))
            emails = [c["email"] for c in ok(api.get(f"{API}/list"))]
        else:
            # Expiries that pass, and that come within expireDiff days, while we wait.
            now = int(time.time() * 1000)
            for email, expiry in zip(some(2), (now + 1000, now + 3 * DAY_MS + 1000), strict=False):
                view = ok(api.get(f"{API}/get/{email}"))["client"]
                ok(api.post(f"{API}/update/{email}", {**view, "expiryTime": expiry}))
            check(api, browser)
            time.sleep(1.5)
        check(api, browser)


def test_a_page_leaves_out_the_summary_the_caller_has(own):
    api = own
    vless = inbound(api)
    ok(
        api.post(
            f"{API}/bulkCreate",
            [
                {"client": {"email": f"gone{n}@x", "enable": False}, "inboundIds": [vless]}
                for n in range(300)
            ],
        )
    )
    full = api.raw("GET", PAGED, params={"pageSize": 25})
    first = full.json()["obj"]
    version = first["summaryVersion"]
    assert len(first["summary"]["deactive"]) == 300
    same = api.raw("GET", PAGED, params={"pageSize": 25, "page": 2, "summaryVersion": version})
    second = same.json()["obj"]
    assert "summary" not in second and second["summaryVersion"] == version
    # Emails sort in natural order: gone0, gone1, ..., gone9, gone10, ...
    assert second["items"][0]["email"] == "gone25@x"
    assert second["total"] == 300 and second["filtered"] == 300
    again = api.raw("GET", PAGED, params={"pageSize": 25, "summaryVersion": version})
    assert again.json()["obj"]["items"] == first["items"]
    assert len(full.content) - len(again.content) > len(json.dumps(first["summary"]))

    # Another version (an older one, or one from before a restart) gets the whole summary.
    other = ok(api.get(PAGED, params={"summaryVersion": "an-old-one"}))
    assert other["summary"] == first["summary"]

    # A change to the summary's content changes the version, and the page carries it.
    ok(api.post(f"{API}/update/gone7@x", {"email": "gone7@x", "enable": True}))
    changed = ok(api.get(PAGED, params={"summaryVersion": version}))
    assert changed["summaryVersion"] != version
    assert len(changed["summary"]["deactive"]) == 299 and changed["summary"]["active"] == 1

    # A change that leaves the summary as it was keeps the version.
    ok(api.post(f"{API}/gone8@x/detach", {"inboundIds": [vless]}))
    kept = ok(api.get(PAGED, params={"summaryVersion": changed["summaryVersion"]}))
    assert "summary" not in kept


def test_a_bad_summary_version_is_refused(own):
    too_long = "v" * 65
    refused(own.get(PAGED, params={"summaryVersion": too_long}), "summaryVersion")


# ---- in process, on a clock the test moves -----------------------------------------------


@pytest.fixture
def world(tmp_path):
    if backend["kind"] == "sqlite":
        url = str(tmp_path / "summary.db")
    else:
        url = create_database(backend["kind"])
        created_databases.append(url)
    store = Store(url)
    store.open()
    notice = ChangeNotice()
    settings = Settings(store, FilePlaces(str(tmp_path)), notice)
    settings.load()
    wall = {"now": time.time()}
    clock = lambda: wall["now"]  # noqa: E731
    presence = Presence(clock=clock)
    query = ClientQuery(store, settings, presence, clock=clock)
    inbounds = Inbounds(
        store,
        lambda: [],
        query.by_inbound,
        places=settings.places,
        notice=notice,
        **without_core_or_nodes(),
    )
    ids = [
        inbounds.add({"protocol": "vless", "port": 4431 + n, "tag": f"in-{n}"})["id"]
        for n in range(2)
    ]
    clients = Clients(store, notice, runs_every_feature, Outbox(store), clock=clock)
    yield {
        "store": store,
        "settings": settings,
        "wall": wall,
        "query": query,
        "clients": clients,
        "bulk": ClientBulk(clients, query),
        "accounting": TrafficAccounting(
            store, presence, Outbox(store), lambda: "test", clock=clock
        ),
        "inbounds": ids,
        "presence": presence,
    }
    store.close()


def recomputed(world) -> dict:
    """Every bucket from one query over every client, at the world's moment."""
    query, store = world["query"], world["store"]
    now = int(world["wall"]["now"] * 1000)
    depleted, depleted_params = query.depleted_sql(now)
    expiring, expiring_params = query.expiring_sql(now)
    online = world["presence"].online()
    with db_session:
        rows = store.rows(
            f"SELECT c.email, c.email_key, c.enable, CASE WHEN {depleted} THEN 1 ELSE 0 END, "
            f"CASE WHEN {expiring} THEN 1 ELSE 0 END {FROM}",
            [*depleted_params, *expiring_params],
        )
    rows.sort(key=lambda row: row[1])
    return {
        "total": len(rows),
        "active": sum(1 for _, _, enable, gone, _ in rows if enable and not gone),
        "online": [email for email, key, *_ in rows if key in online],
        "depleted": [email for email, _, _, gone, _ in rows if gone],
        "expiring": [email for email, *_, soon in rows if soon],
        "deactive": [email for email, _, enable, _, _ in rows if not enable],
    }


@pytest.mark.parametrize("lookups", [summary.MOVED_LOOKUPS, 2], ids=["by-key", "by-scan"])
def test_summary_equals_a_recomputation_after_random_changes_in_process(
    world, monkeypatch, lookups
):
    # Ticks that move more clients than MOVED_LOOKUPS are followed by a scan of the
    # clients near a limit rather than by key: both ways are held to the recomputation.
    monkeypatch.setattr(summary, "MOVED_LOOKUPS", lookups)
    rng = random.Random(1818)
    clients, bulk, query = world["clients"], world["bulk"], world["query"]
    wall, writes = world["wall"], world["store"].client_writes
    first, second = world["inbounds"]
    emails: list[str] = []
    gone: list[str] = []  # deleted, perhaps with their counters kept
    counters: dict[str, int] = {}  # the core's absolute counters, as a core keeps them
    generation = 1
    made = 0

    def expiry() -> int:
        now = int(wall["now"] * 1000)
        soon = now + rng.randint(1, 600) * 1000
        near_horizon = now + 3 * DAY_MS + rng.randint(-600, 600) * 1000
        return rng.choice(
            [0, now - DAY_MS, soon, -rng.randint(1, 5) * DAY_MS, near_horizon, now + 10 * DAY_MS]
        )

    def new_client() -> dict:
        nonlocal made
        made += 1
        return {
            "email": f"{rng.choice(['Ann', 'bob', 'Çelik'])}{made}@clock.test",
            "enable": rng.random() > 0.2,
            "totalGB": rng.choice([0, GB // 2, 2 * GB, 20 * GB]),
            "expiryTime": expiry(),
        }

    def committed() -> None:
        # What the panel does once a call has committed (Panel.changed).
        query.invalidate()

    assert query.summary().as_dict() == recomputed(world)
    for step in range(250):
        action = rng.choice(
            ["add"] * 3
            + ["edit"] * 3
            + ["tick"] * 3
            + ["time"] * 2
            + ["delete", "again", "attach", "detach", "bulk", "sweep", "settings", "restart"]
        )
        if not emails or (action == "again" and not gone):
            action = "add"
        if action == "add":
            view = clients.add({"client": new_client(), "inboundIds": [first]})
            emails.append(view["email"])
        elif action == "edit":
            email = rng.choice(emails)
            view = clients.get(email)["client"]
            change = rng.choice(["enable", "totalGB", "expiryTime", "email", "traffic"])
            if change == "traffic":
                used = rng.choice([0, GB // 3, GB, 3 * GB])
                clients.update_traffic(email, {"upload": used, "download": 0})
            else:
                if change == "enable":
                    view["enable"] = not view["enable"]
                elif change == "totalGB":
                    view["totalGB"] = rng.choice([0, GB // 2, 2 * GB, 20 * GB])
                elif change == "expiryTime":
                    view["expiryTime"] = expiry()
                else:
                    view["email"] = new_client()["email"]
                clients.update(email, view)
                emails[emails.index(email)] = view["email"]
        elif action == "tick":
            for email in rng.sample(emails, min(len(emails), 6)):
                name = f"user>>>{email}>>>traffic>>>downlink"
                counters[name] = counters.get(name, 0) + rng.choice([1, GB // 4, GB])
            world["accounting"].tick(dict(counters), generation)
        elif action == "restart":
            generation += 1
            counters = {}
        elif action == "time":
            wall["now"] += rng.choice([1, 30, 400, 3600, 2 * 86_400, -60])
        elif action == "delete":
            email = rng.choice(emails)
            clients.delete(email, keep_traffic=rng.random() < 0.5)
            emails.remove(email)
            gone.append(email)
        elif action == "again":
            # The same email again: it may find the counters its namesake kept.
            client = {**new_client(), "email": gone.pop(rng.randrange(len(gone)))}
            emails.append(clients.add({"client": client, "inboundIds": [second]})["email"])
        elif action == "attach":
            clients.attach(rng.choice(emails), {"inboundIds": [second]})
        elif action == "detach":
            clients.detach(rng.choice(emails), {"inboundIds": [first]})
        elif action == "bulk":
            kind = rng.choice(["create", "delete", "adjust", "reset"])
            chosen = rng.sample(emails, min(len(emails), 3))
            if kind == "create":
                items = [{"client": new_client(), "inboundIds": [first]} for _ in range(4)]
                bulk.bulk_create(items)
                emails += [item["client"]["email"] for item in items]
            elif kind == "delete":
                bulk.bulk_delete({"emails": chosen, "keepTraffic": False})
                emails = [email for email in emails if email not in chosen]
            elif kind == "adjust":
                bulk.bulk_adjust({"emails": chosen, "addDays": rng.choice([-2, 1]), "addBytes": GB})
            else:
                bulk.bulk_reset_traffic({"emails": chosen})
        elif action == "sweep":
            kind = rng.choice(["disable", "delete", "resetAll"])
            if kind == "disable":
                bulk.disable_depleted()
            elif kind == "delete":
                bulk.delete_depleted()
            else:
                bulk.reset_all_traffics()
            with db_session:
                emails = [row[0] for row in world["store"].rows("SELECT email FROM client")]
        else:
            world["settings"].write(
                world["settings"].check(
                    {"expireDiff": rng.choice([0, 3, 7]), "trafficDiff": rng.choice([0, 1, 5])}
                )
            )
        if action not in ("tick", "time", "restart"):
            committed()
        assert query.summary().as_dict() == recomputed(world), (step, action)
    assert not writes.take()
