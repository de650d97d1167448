"""The SQL forms of the client rules answer what the Python rules answer, for every row.

Random clients (enabled or not, quotas of 0, below and above their traffic, expiries of
0, negative ones that start on first use, and dated ones right around the clock) are
written into a real database, the backend of this run (`--db`), with or without a
traffic row; each condition of `appliance.store.client_rules_sql` is then asked which
rows it matches at a random moment, and the answer must be the set the rule of
`appliance.domain.clients` picks from the same rows as the store's reader returns them.
The reader itself is checked on the way: every record carries what was written.
"""

from __future__ import annotations

import pytest
from helpers import create_database
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from panels import backend, created_databases
from pony.orm import db_session

from appliance.domain import clients as rules
from appliance.store import Store
from appliance.store.client_queries import Conditions
from appliance.store.client_rows import CLIENT_FROM, CLIENT_SELECT, client_records
from appliance.store.client_rules_sql import active_sql, depleted_sql, expired_sql

NOW = 1_800_000_000_000  # the clocks drawn lie around this moment (ms)
GB = 1024**3


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    if backend["kind"] == "sqlite":
        url = str(tmp_path_factory.mktemp("rules") / "rules.db")
    else:
        url = create_database(backend["kind"])
        created_databases.append(url)
    opened = Store(url)
    opened.open()
    yield opened
    opened.close()


@st.composite
def moments_and_clients(draw):
    now = draw(st.integers(NOW - 10_000, NOW + 10_000))
    near_now = st.integers(now - 3, now + 3)
    expiry = st.one_of(
        st.just(0),
        st.integers(-400 * 86_400_000, -1),  # a duration that starts on first use
        near_now,
        st.integers(1, 2 * NOW),
    )
    used = st.integers(0, 4 * GB)
    client = st.fixed_dictionaries(
        {
            "enable": st.booleans(),
            "total": st.one_of(st.just(0), st.integers(-GB, 8 * GB)),
            "expiry": expiry,
            # None: no traffic row at all
            "traffic": st.one_of(
                st.none(),
                st.fixed_dictionaries({"up": used, "down": used, "enable": st.booleans()}),
            ),
        }
    )
    clients = draw(st.lists(client, min_size=1, max_size=12))
    # A quota exactly at the traffic is the edge the rules must agree on.
    for entry in clients:
        if entry["traffic"] is not None and draw(st.booleans()):
            entry["total"] = entry["traffic"]["up"] + entry["traffic"]["down"]
    return now, clients


def written(store: Store, clients: list[dict]) -> None:
    """`clients` as the only rows of the client and traffic tables."""
    entities = store.entities
    with db_session:
        store.execute("DELETE FROM client_traffic")
        store.execute("DELETE FROM client")
        for n, entry in enumerate(clients):
            email = f"rule{n}@sql.test"
            entities.Client(
                email=email,
                email_key=email,
                uuid=f"00000000-0000-4000-8000-{n:012d}",
                password=f"pass{n}",
                auth=f"auth{n}",
                sub_id=f"sub{n}",
                mt_secret=f"{n:032x}",
                total_bytes=entry["total"],
                expiry_time=entry["expiry"],
                enable=entry["enable"],
            )
            traffic = entry["traffic"]
            if traffic is not None:
                entities.ClientTraffic(
                    email_key=email,
                    email=email,
                    up=traffic["up"],
                    down=traffic["down"],
                    enable=traffic["enable"],
                )


def matched(store: Store, condition: tuple[str, list]) -> set[int]:
    where, params = condition
    with db_session:
        return {row[0] for row in store.rows(f"SELECT c.id {CLIENT_FROM} WHERE {where}", params)}


def read_back(store: Store) -> list[rules.ClientRecord]:
    with db_session:
        return client_records(store.rows(f"SELECT {CLIENT_SELECT} {CLIENT_FROM} ORDER BY c.id"))


@settings(
    max_examples=60 if backend["kind"] == "sqlite" else 25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(moments_and_clients())
def test_each_condition_matches_the_rows_its_rule_picks(store, case):
    now, clients = case
    written(store, clients)
    records = read_back(store)
    for record, entry in zip(records, clients, strict=True):
        traffic = entry["traffic"] or {"up": 0, "down": 0, "enable": True}
        assert (record.total_bytes, record.expiry_time) == (entry["total"], entry["expiry"])
        assert (record.up, record.down) == (traffic["up"], traffic["down"])
        assert (bool(record.enable), bool(record.traffic_enable)) == (
            entry["enable"],
            traffic["enable"],
        )
    for condition, rule in (
        (expired_sql(now), lambda c: rules.expired(c.expiry_time, now)),
        (depleted_sql(now), lambda c: rules.depleted(c, now)),
        (active_sql(now), lambda c: rules.active(c, now)),
    ):
        assert matched(store, condition) == {c.row_id for c in records if rule(c)}, condition[0]


def test_served_is_active_with_the_traffic_row_enabled():
    """The served rule in the cases the SQL conditions leave to it: the traffic flag."""
    base = rules.ClientRecord(
        row_id=1, uuid="u", email="e", password="p", auth="a", flow="", security="",
        reverse_tag="", method="", enable=True, total_bytes=0, expiry_time=0, up=0, down=0,
        traffic_enable=True,
    )  # fmt: skip
    assert rules.served(base, NOW)
    assert not rules.served(base._replace(traffic_enable=False), NOW)
    assert not rules.served(base._replace(enable=0), NOW)
    assert not rules.served(base._replace(total_bytes=10, up=6, down=4), NOW)
    assert rules.served(base._replace(total_bytes=11, up=6, down=4), NOW)
    assert not rules.served(base._replace(expiry_time=NOW), NOW)
    assert rules.served(base._replace(expiry_time=NOW + 1), NOW)
    assert rules.served(base._replace(expiry_time=-86_400_000), NOW)


# ---- search ----------------------------------------------------------------------------------

# Search texts and needles from few letters, so that needles often match, with LIKE's own
# wildcards and the escape character among them: a search is a literal substring.
SEARCH_ALPHABET = "abü1%_! "


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.text(SEARCH_ALPHABET, max_size=14), min_size=1, max_size=10),
    st.text(SEARCH_ALPHABET, min_size=1, max_size=6),
    st.booleans(),
)
def test_a_search_matches_the_clients_whose_text_holds_it_or_whose_device_it_names(
    store, texts, needle, a_device
):
    """The rows whose search text holds the needle, and the one whose subscription served
    a device of that id: on PostgreSQL through its trigram index (for a needle long
    enough to hold a trigram; scans of the table and of other indexes turned off, so the
    plan must use it), elsewhere by a scan."""
    written(store, [{"enable": True, "total": 0, "expiry": 0, "traffic": None}] * len(texts))
    with db_session:
        store.execute("DELETE FROM client_device")
        ids = [row[0] for row in store.rows("SELECT id FROM client ORDER BY id")]
        store.execute_many(
            "UPDATE client SET search_key = ? WHERE id = ?", list(zip(texts, ids, strict=True))
        )
        if a_device:  # the last client's subscription served a device named as the needle
            store.execute(
                "INSERT INTO client_device (sub_id, slot, hwid) VALUES (?, 1, ?)",
                [f"sub{len(texts) - 1}", needle],
            )
    expected = {row_id for row_id, text in zip(ids, texts, strict=True) if needle in text}
    for hwid in ("", needle):
        conditions = Conditions(dialect=store.dialect)
        conditions.search(needle, hwid)
        where, params = conditions.where[0], conditions.params
        with db_session:
            # A needle of fewer than three characters holds no trigram to look up.
            if backend["kind"] == "postgres" and len(needle) >= 3:
                for scan in ("seqscan", "indexscan", "indexonlyscan"):
                    store.execute(f"SET LOCAL enable_{scan} = off")
                plan = store.rows(f"EXPLAIN SELECT c.id {CLIENT_FROM} WHERE {where}", params)
                assert "ix_client_search_trigram" in " ".join(row[0] for row in plan), plan
            found = {
                row[0] for row in store.rows(f"SELECT c.id {CLIENT_FROM} WHERE {where}", params)
            }
        device = {ids[-1]} if hwid and a_device else set()
        assert found == expected | device, (hwid, where)
