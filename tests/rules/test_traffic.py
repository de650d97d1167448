"""Traffic accounting against a real SQLite store: every byte counted exactly once,
across ticks, core restarts and panel restarts."""

from __future__ import annotations

import time

import gevent
import pytest
from helpers import locked_externally, runs_every_feature, without_core_or_nodes, write_protected
from pony.orm import db_session

from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.runtime.jobs import every
from appliance.services.admin.settings import Settings
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.clients.records import Clients
from appliance.services.clients.traffic import TrafficAccounting
from appliance.services.inbounds.records import Inbounds
from appliance.services.webhooks.outbox import Outbox
from appliance.store import Store

NOW = 1_800_000_000.0
DAY_MS = 86_400_000


def up(email: str) -> str:
    return f"user>>>{email}>>>traffic>>>uplink"


def down(email: str) -> str:
    return f"user>>>{email}>>>traffic>>>downlink"


@pytest.fixture
def store(tmp_path):
    store = Store(str(tmp_path / "panel.db"))
    store.open()
    yield store
    store.close()


@pytest.fixture
def world(store, tmp_path):
    """One vless inbound tagged `in-1` with clients Alice and bob."""
    return store, *populate(store, tmp_path)


def populate(store, tmp_path) -> tuple:
    """(presence, inbounds, clients) of `store` given inbound `in-1` (id 1) with clients
    Alice and bob (who starts on first use)."""
    notice = ChangeNotice()
    settings = Settings(store, FilePlaces(str(tmp_path)), notice)
    settings.load()
    presence = Presence(clock=lambda: NOW)
    query = ClientQuery(store, settings, presence)
    inbounds = Inbounds(
        store,
        lambda: [],
        query.by_inbound,
        places=settings.places,
        notice=notice,
        **without_core_or_nodes(),
    )
    inbound = inbounds.add({"protocol": "vless", "port": 4431, "tag": "in-1"})
    clients = Clients(store, notice, runs_every_feature, Outbox(store))
    clients.add({"client": {"email": "Alice"}, "inboundIds": [inbound["id"]]})
    clients.add(
        {"client": {"email": "bob", "expiryTime": -3 * DAY_MS}, "inboundIds": [inbound["id"]]}
    )
    return presence, inbounds, clients


def traffic(clients: Clients, email: str) -> tuple[int, int]:
    record = clients.traffic(email)
    return record["up"], record["down"]


def accounting(store, presence, instance: str = "a") -> TrafficAccounting:
    return TrafficAccounting(store, presence, Outbox(store), lambda: instance, clock=lambda: NOW)


def test_differences_are_added_to_clients_inbounds_and_outbounds(world):
    store, presence, inbounds, clients = world
    counting = accounting(store, presence)
    counting.tick(
        {
            up("Alice"): 100,
            down("Alice"): 1000,
            "inbound>>>in-1>>>traffic>>>uplink": 100,
            "outbound>>>direct>>>traffic>>>downlink": 7,
        },
        generation=1,
    )
    counting.tick(
        {
            up("Alice"): 150,
            down("Alice"): 1500,
            "inbound>>>in-1>>>traffic>>>uplink": 150,
            "outbound>>>direct>>>traffic>>>downlink": 9,
        },
        generation=1,
    )
    assert traffic(clients, "Alice") == (150, 1500)
    assert traffic(clients, "bob") == (0, 0)
    assert inbounds.get(1)["up"] == 150
    with db_session:
        assert store.rows("SELECT tag, up, down FROM outbound_traffic") == [("direct", 0, 9)]
    assert presence.online() == {"alice"}
    assert presence.active_inbounds() == ["in-1"]


def test_a_counter_read_twice_adds_nothing(world):
    store, presence, _, clients = world
    counting = accounting(store, presence)
    counting.tick({up("Alice"): 100}, generation=1)
    counting.tick({up("Alice"): 100}, generation=1)
    assert traffic(clients, "Alice") == (100, 0)


def test_a_new_core_generation_counts_from_zero(world):
    store, presence, _, clients = world
    counting = accounting(store, presence)
    counting.tick({up("Alice"): 500, down("Alice"): 50}, generation=1)
    counting.tick({up("Alice"): 20}, generation=2)
    counting.tick({up("Alice"): 30, down("Alice"): 600}, generation=2)
    assert traffic(clients, "Alice") == (530, 650)


def test_a_counter_that_went_down_means_the_core_restarted(world):
    store, presence, _, clients = world
    counting = accounting(store, presence)
    counting.tick({up("Alice"): 500}, generation=1)
    counting.tick({up("Alice"): 40}, generation=1)
    assert traffic(clients, "Alice") == (540, 0)


def test_a_panel_restart_reads_the_kept_values_and_counts_nothing_twice(world):
    store, presence, _, clients = world
    accounting(store, presence).tick({up("Alice"): 500, down("bob"): 5}, generation=7)
    restarted = accounting(store, presence)
    restarted.tick({up("Alice"): 800, down("bob"): 5}, generation=7)
    assert traffic(clients, "Alice") == (800, 0)
    assert traffic(clients, "bob") == (0, 5)


def test_a_counter_kept_meanwhile_by_the_panel_process_before_this_one_is_taken_over(world):
    """The process a restart replaces may still tick while the new one starts: a counter
    it kept after the new one read the kept values is set by the new one's tick, which
    does not fail on it (every tick after it would fail the same way, and no traffic
    would be counted until the next restart)."""
    store, presence, inbounds, _ = world
    name = "inbound>>>in-1>>>traffic>>>uplink"
    replaced, new = accounting(store, presence), accounting(store, presence)
    new.tick({}, generation=3)  # has read the kept values: none
    replaced.tick({name: 100}, generation=3)
    new.tick({name: 100}, generation=3)
    new.tick({name: 250}, generation=3)
    with db_session:
        assert store.rows("SELECT value FROM core_counter WHERE name = ?", [name]) == [(250,)]
    assert inbounds.get(1)["up"] == 350  # the new one measured its 100 from zero


def test_after_a_core_restart_unmoved_counters_do_not_keep_old_baselines(world):
    """A counter the new core has not moved yet must not be measured later against the
    old core's value, even after the panel restarts in between."""
    store, presence, _, clients = world
    accounting(store, presence).tick({up("Alice"): 1000, up("bob"): 10}, generation=1)
    accounting(store, presence).tick({up("bob"): 1}, generation=2)
    accounting(store, presence).tick({up("Alice"): 1500, up("bob"): 1}, generation=2)
    assert traffic(clients, "Alice") == (2500, 0)
    assert traffic(clients, "bob") == (11, 0)


def test_instances_sharing_the_database_each_count_their_own_core_once(world):
    """Two instances on one database, each with its own core: each core's bytes are added
    to the same totals once, however their ticks interleave, and an instance restarted
    beside the other (collecting its orphaned core) measures that core against its own
    values, not the ones the other kept last."""
    store, presence, inbounds, clients = world
    name = "inbound>>>in-1>>>traffic>>>uplink"
    a, b = accounting(store, presence, "a"), accounting(store, presence, "b")
    a.tick({up("Alice"): 100, name: 100}, generation=1)
    b.tick({up("Alice"): 5000, name: 5000}, generation=2)
    a.tick({up("Alice"): 300, name: 300}, generation=1)
    assert traffic(clients, "Alice") == (5300, 0)
    restarted = accounting(store, presence, "a")
    restarted.tick({up("Alice"): 350, name: 350}, generation=1)
    assert traffic(clients, "Alice") == (5350, 0)
    assert inbounds.get(1)["up"] == 5350
    # b's core restarts: only b's values go, a's still measure a's core.
    b.tick({up("Alice"): 10, name: 10}, generation=3)
    accounting(store, presence, "a").tick({up("Alice"): 360, name: 360}, generation=1)
    assert traffic(clients, "Alice") == (5370, 0)
    assert inbounds.get(1)["up"] == 5370


def test_values_kept_before_they_were_per_instance_are_the_first_instances(world):
    """A database upgraded from before values were kept per instance holds them as
    instance '': the first instance to tick takes them as its own, so the core left
    running by a crash before the upgrade is measured against them; another instance
    starting later does not."""
    store, presence, _, clients = world
    accounting(store, presence, "").tick({up("Alice"): 400}, generation=9)
    accounting(store, presence, "a").tick({up("Alice"): 450}, generation=9)
    assert traffic(clients, "Alice") == (450, 0)
    accounting(store, presence, "b").tick({up("Alice"): 20}, generation=4)
    assert traffic(clients, "Alice") == (470, 0)
    with db_session:
        assert store.rows("SELECT DISTINCT instance FROM core_counter ORDER BY 1") == [
            ("a",),
            ("b",),
        ]


def test_emails_match_whatever_their_case_in_the_core(world):
    store, presence, _, clients = world
    accounting(store, presence).tick({up("ALICE"): 9}, generation=1)
    assert traffic(clients, "Alice") == (9, 0)


def test_start_on_first_use_begins_with_the_first_bytes(world):
    store, presence, _, clients = world
    counting = accounting(store, presence)
    counting.tick({up("Alice"): 1}, generation=1)
    assert clients.get("bob")["client"]["expiryTime"] == -3 * DAY_MS
    counting.tick({down("bob"): 1}, generation=1)
    assert clients.get("bob")["client"]["expiryTime"] == int(NOW * 1000) + 3 * DAY_MS
    assert clients.traffic("bob")["lastOnline"] == int(NOW * 1000)


def test_unknown_names_and_deleted_clients_are_ignored(world):
    store, presence, _, clients = world
    counting = accounting(store, presence)
    tick = counting.tick(
        {"weird": 5, "user>>>ghost>>>traffic>>>uplink": 9, up("Alice"): 3}, generation=1
    )
    assert traffic(clients, "Alice") == (3, 0)
    assert set(tick.clients) == {"alice", "ghost"}


FAULTS = {
    # Refused when the tick asks for the write lock.
    "locked": (lambda path: locked_externally(path), "locked by another program"),
    # Refused when the tick commits: its log cannot be written.
    "wal-read-only": (lambda path: write_protected(f"{path}-wal"), "cannot be read or written"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_tick_the_database_refused_is_counted_on_the_next(world, caplog, fault):
    """The SQLite file fails a tick of the background job: the job logs a warning with
    the reason (no traceback), and the next tick adds every byte of both, a new
    outbound's included."""
    store, presence, inbounds, clients = world
    counting = accounting(store, presence)
    counting.tick({up("Alice"): 10}, generation=1)
    refused = {
        up("Alice"): 100,
        "inbound>>>in-1>>>traffic>>>uplink": 100,
        "outbound>>>direct>>>traffic>>>downlink": 7,
    }
    make_fault, reason = FAULTS[fault]
    with make_fault(store.url.path):
        job = every(3600, lambda: counting.tick(refused, 1), "traffic", store.unavailable)
        deadline = time.monotonic() + 60
        while not caplog.records and time.monotonic() < deadline:
            gevent.sleep(0.05)
        job.kill()
    [record] = caplog.records
    assert record.levelname == "WARNING" and record.exc_info is None
    message = record.getMessage()
    assert message.startswith("background job traffic failed: the database is unavailable: ")
    assert reason in message
    assert traffic(clients, "Alice") == (10, 0)

    counting.tick(
        {
            up("Alice"): 150,
            "inbound>>>in-1>>>traffic>>>uplink": 150,
            "outbound>>>direct>>>traffic>>>downlink": 9,
        },
        generation=1,
    )
    assert traffic(clients, "Alice") == (150, 0)
    assert inbounds.get(1)["up"] == 150
    with db_session:
        assert store.rows("SELECT tag, up, down FROM outbound_traffic") == [("direct", 0, 9)]
