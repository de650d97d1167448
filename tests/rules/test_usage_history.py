"""Usage history against a real SQLite store: what a tick adds lands in the current hour's
bucket beside the totals, a reset leaves it, and pruning rolls old hours into days and
drops days older than a year, under a clock moved by hand; on each database backend."""

from __future__ import annotations

import pytest
from helpers import fresh_database
from pony.orm import db_session
from test_traffic import accounting, down, populate, traffic, up

from appliance.errors import ServiceError
from appliance.services.clients.usage import DAY, HOUR, UsageHistory, month_usage
from appliance.store import Store

NOW = 1_800_000_000.0  # test_traffic's clock: 2027-01-15 08:00 UTC
HOUR_NOW = int(NOW) // HOUR * HOUR


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def database(request, tmp_path):
    """Each backend in turn: their upserts are written in words of their own."""
    if request.param == "sqlite":
        yield str(tmp_path / "panel.db")
    else:
        with fresh_database(request.param) as url:
            yield url


@pytest.fixture
def world(database, tmp_path):
    """test_traffic's world: inbound `in-1` (id 1) with clients Alice and bob."""
    store = Store(database)
    store.open()
    presence, _, clients = populate(store, tmp_path)
    yield store, presence, clients
    store.close()


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def rows(store, table: str) -> list[tuple]:
    with db_session:
        return store.rows(f"SELECT * FROM {table} ORDER BY 1")


def history(store, clock, email="Alice", **query) -> dict:
    return UsageHistory(store, clock=clock).client(email, query)


def test_a_tick_adds_to_the_current_hour_once(world):
    store, presence, clients = world
    counting = accounting(store, presence)
    counting.tick({up("Alice"): 100, "inbound>>>in-1>>>traffic>>>uplink": 100}, generation=1)
    counting.tick({up("Alice"): 100, down("Alice"): 7}, generation=1)  # only 7 moved
    counting.tick({up("Alice"): 150, down("Alice"): 7}, generation=1)
    with db_session:
        assert store.rows("SELECT email_key, at, up, down FROM client_usage") == [
            ("alice", HOUR_NOW, 150, 7)
        ]
        assert store.rows("SELECT inbound_id, at, up, down FROM inbound_usage") == [
            (1, HOUR_NOW, 100, 0)
        ]
    assert traffic(clients, "Alice") == (150, 7)
    answer = history(store, Clock(NOW))
    assert answer["buckets"] == [{"at": HOUR_NOW * 1000, "up": 150, "down": 7}]
    assert (answer["up"], answer["down"]) == (150, 7)
    assert UsageHistory(store, clock=Clock(NOW)).inbound(1, {})["up"] == 100


def test_counters_of_no_client_leave_no_history(world):
    store, presence, _ = world
    accounting(store, presence).tick({up("Alice"): 10, up("gone"): 99}, generation=1)
    with db_session:
        assert store.rows("SELECT email_key FROM client_usage") == [("alice",)]


def test_the_next_hour_gets_its_own_bucket_and_a_day_sums_them(world):
    store, presence, _ = world
    clock = Clock(NOW)
    counting = accounting(store, presence)
    counting.clock = clock
    counting.tick({up("Alice"): 100}, generation=1)
    clock.now = NOW + HOUR
    counting.tick({up("Alice"): 130}, generation=1)
    hourly = history(store, clock)["buckets"]
    assert hourly == [
        {"at": HOUR_NOW * 1000, "up": 100, "down": 0},
        {"at": (HOUR_NOW + HOUR) * 1000, "up": 30, "down": 0},
    ]
    daily = history(store, clock, step="day")["buckets"]
    assert daily == [{"at": int(NOW) // DAY * DAY * 1000, "up": 130, "down": 0}]


def test_resetting_a_client_keeps_its_history(world):
    store, presence, clients = world
    accounting(store, presence).tick({up("Alice"): 100, down("Alice"): 5}, generation=1)
    clients.reset_traffic("Alice")
    assert traffic(clients, "Alice") == (0, 0)
    assert history(store, Clock(NOW))["buckets"] == [{"at": HOUR_NOW * 1000, "up": 100, "down": 5}]


def test_pruning_rolls_old_hours_into_days_and_drops_old_days(world):
    store, presence, _ = world
    clock = Clock(NOW)
    counting = accounting(store, presence)
    counting.clock = clock
    counting.tick({up("Alice"): 10, "inbound>>>in-1>>>traffic>>>uplink": 10}, generation=1)
    clock.now = NOW + 3 * HOUR
    counting.tick({up("Alice"): 30, "inbound>>>in-1>>>traffic>>>uplink": 30}, generation=1)
    clock.now = NOW + 2 * DAY
    counting.tick({up("Alice"): 35}, generation=1)
    day = int(NOW) // DAY * DAY

    clock.now = NOW + 80 * DAY
    assert UsageHistory(store, clock=clock).prune() == 0
    assert len(rows(store, "client_usage")) == 3

    clock.now = NOW + 91 * DAY  # the first day is past 90 days, the third is not
    assert UsageHistory(store, clock=clock).prune() == 4  # two hours each
    with db_session:
        assert store.rows("SELECT email_key, at, up, down FROM client_usage_day") == [
            ("alice", day, 30, 0)
        ]
        assert store.rows("SELECT email_key, at, up FROM client_usage") == [
            ("alice", HOUR_NOW + 2 * DAY, 5)
        ]
        assert store.rows("SELECT inbound_id, at, up FROM inbound_usage_day") == [(1, day, 30)]
        assert store.rows("SELECT COUNT(*) FROM inbound_usage") == [(0,)]
    # The history read as days is what it was before the roll-up.
    answer = history(store, clock, step="day", **{"from": str(day * 1000)})
    assert answer["buckets"] == [
        {"at": day * 1000, "up": 30, "down": 0},
        {"at": (day + 2 * DAY) * 1000, "up": 5, "down": 0},
    ]

    clock.now = NOW + 368 * DAY
    UsageHistory(store, clock=clock).prune()
    assert rows(store, "client_usage_day") == []
    assert rows(store, "inbound_usage_day") == []
    assert rows(store, "client_usage") == []


def test_the_month_lists_every_day_so_far(world):
    store, presence, _ = world
    accounting(store, presence).tick({up("Alice"): 100, down("bob"): 4}, generation=1)
    with db_session:
        month = month_usage(store.rows, ["alice"], int(NOW))
    assert len(month["days"]) == 15  # 2027-01-01 to 2027-01-15
    assert month["days"][-1] == {"at": int(NOW) // DAY * DAY * 1000, "up": 100, "down": 0}
    assert (month["up"], month["down"]) == (100, 0)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"step": "minute"}, "step must be hour or day, not 'minute'"),
        ({"from": "yesterday"}, "from must be a time in milliseconds since 1970"),
        ({"to": "-5"}, "to must be a time in milliseconds since 1970"),
        ({"from": "2000", "to": "1000"}, "from must be before to"),
        ({"from": "0", "to": str(DAY * 1000 * 100)}, "a range in hours may span at most"),
    ],
)
def test_bad_ranges_are_refused_with_a_sentence(world, query, message):
    store = world[0]
    with pytest.raises(ServiceError, match=message):
        history(store, Clock(NOW), **query)


def test_unknown_owners_are_refused(world):
    store = world[0]
    with pytest.raises(ServiceError, match="no client with email 'nobody'"):
        history(store, Clock(NOW), email="nobody")
    with pytest.raises(ServiceError, match="no inbound with id 9"):
        UsageHistory(store, clock=Clock(NOW)).inbound("9", {})
