"""The `clients_100k` dataset: 100,000 clients over 20 inbounds, the size the clients
scenarios measure at.

The mix is what a large install looks like rather than 100,000 copies of one row: every
client-bearing protocol (VLESS REALITY/TCP, VLESS WS, VMess WS, Trojan TLS, Shadowsocks
legacy and 2022, Hysteria 2), traffic spread over nine orders of magnitude with some
clients over quota, a few dozen groups with a quarter of the clients ungrouped, expiry
unlimited / past / within the "expiring" window / far ahead / negative ("start on first
use"), some disabled clients, some attached to two or three inbounds and a few attached
to none.

Every client goes through the product's `normalize_client` with the inbounds it is
attached to, so its secrets are the ones the API would have generated (UUID v4,
16-character password and auth, a 2022 key of the cipher's length on 2022 inbounds, the
legacy cipher copied onto `method`), and its key is the product's `email_key`. The
distributions come from a seeded `random.Random`, so two builds differ only in secrets.
"""

from __future__ import annotations

import random
import sqlite3
import time
from urllib.parse import quote

from harness import (
    BenchError,
    Client,
    Dataset,
    insert_clients,
    insert_inbound,
    reality_stream,
    register_dataset,
)

from appliance.domain.client_rules import email_key, normalize_client
from appliance.services.clients.records import columns_of

DATASET_NAME = "clients_100k"
CLIENT_COUNT = 100_000
INBOUND_COUNT = 20
CLIENTS_FIRST_PORT = 30000
SEED = 20240601
DAY_MS = 86_400_000
GB = 1024**3
GROUP_COUNT = 36
EMPTY_GROUPS = 2
# Clients attached to no inbound: the "orphans" a panel accumulates.
UNATTACHED = 300
CERTIFICATE = {
    "certificateFile": "/etc/ssl/bench/fullchain.pem",
    "keyFile": "/etc/ssl/bench/key.pem",
}
TLS = {"serverName": "bench.example.com", "certificates": [CERTIFICATE]}
WS = {"path": "/ws", "headers": {"Host": "bench.example.com"}}

# (kind, protocol, settings, streamSettings); the REALITY key is generated per build.
INBOUND_KINDS = (
    ("vless-reality-tcp", "vless", {"decryption": "none"}, None),
    ("vless-ws", "vless", {"decryption": "none"}, {"network": "ws", "wsSettings": WS}),
    ("vmess-ws", "vmess", {}, {"network": "ws", "wsSettings": WS}),
    ("trojan-tls", "trojan", {}, {"network": "tcp", "security": "tls", "tlsSettings": TLS}),
    (
        "ss-legacy",
        "shadowsocks",
        {"method": "aes-256-gcm", "password": "bench-legacy"},
        {"network": "tcp"},
    ),
    ("ss-2022", "shadowsocks", {"method": "2022-blake3-aes-256-gcm"}, {"network": "tcp"}),
    (
        "hysteria2",
        "hysteria2",
        {"version": 2},
        {"network": "hysteria", "security": "tls", "tlsSettings": TLS},
    ),
)
STEMS = ("alice", "bob", "carol", "dmitri", "eve", "farid", "grace", "hana", "ivan", "jürgen")
DOMAINS = ("example.com", "mail.example.org", "Example.NET", "proxy.example.io")
COMMENTS = ("", "", "", "paid until renewal", "trial", "family plan", "tg support ticket")
QUOTAS_GB = (1, 5, 10, 50, 100, 500)

# A few generated clients remembered by `seed_clients` for `check_clients`.
SAMPLES: dict[str, dict] = {}


def inbound_payloads() -> list[dict]:
    """The 20 inbound payloads: the seven kinds in rotation, ports from CLIENTS_FIRST_PORT."""
    payloads = []
    for index in range(INBOUND_COUNT):
        kind, protocol, settings, stream = INBOUND_KINDS[index % len(INBOUND_KINDS)]
        if stream is None:
            stream = reality_stream()
        payloads.append(
            {
                "remark": f"bench {kind} {index}",
                "protocol": protocol,
                "port": CLIENTS_FIRST_PORT + index,
                "settings": settings,
                "streamSettings": stream,
                "sniffing": {"enabled": True, "destOverride": ["http", "tls", "quic"]},
            }
        )
    return payloads


def seed_clients(conn: sqlite3.Connection, count: int = CLIENT_COUNT) -> None:
    """Write the inbounds, groups, clients, attachments and traffic rows: `count` clients
    in the mix of the full dataset (smaller ones leave the samples alone)."""
    rng = random.Random(SEED)
    now = int(time.time() * 1000)
    inbounds = _insert_inbounds(conn, now)
    groups = [f"group-{n:02d}" for n in range(GROUP_COUNT)]
    conn.executemany(
        "INSERT INTO client_group (name, name_key) VALUES (?, ?)",
        [(name, email_key(name)) for name in groups + ["empty-a", "empty-b"][:EMPTY_GROUPS]],
    )
    clients, attachments, traffic = [], [], []
    for index in range(count):
        ids = _attachment(rng, index, count)
        payload = _client_payload(rng, index, groups, now, ids, inbounds)
        record = normalize_client(payload, [inbounds[i] for i in ids])
        key = email_key(record["email"])
        columns = columns_of(record)
        created = now - rng.randrange(400) * DAY_MS
        clients.append((index + 1, key, *columns.values(), created, created))
        attachments += [(index + 1, inbound_id) for inbound_id in ids]
        traffic.append(_traffic(rng, record, key, now))
        if count == CLIENT_COUNT and (
            index in (0, 4242, 77_777, CLIENT_COUNT - 1) or index == _first_unattached(count)
        ):
            SAMPLES[record["email"]] = {"uuid": record["id"], "inboundIds": ids}
    insert_clients(conn, list(columns), clients, attachments, traffic)


def _insert_inbounds(conn: sqlite3.Connection, now: int) -> dict[int, dict]:
    """The inbounds as the panel stores them; returns id -> inbound record."""
    records = {}
    for inbound_id, payload in enumerate(inbound_payloads(), start=1):
        records[inbound_id] = insert_inbound(conn, inbound_id, payload, now)
    return records


def _first_unattached(count: int) -> int:
    return count - UNATTACHED * count // CLIENT_COUNT


def _attachment(rng: random.Random, index: int, count: int) -> list[int]:
    """Inbound ids: none for the last UNATTACHED clients, two or three for about one in
    eight, one otherwise. Shadowsocks 2022 shares no client with another 2022 inbound of
    a different key length (there is one 2022 cipher), so every secret fits."""
    if index >= _first_unattached(count):
        return []
    count = 1 if rng.random() < 0.875 else rng.choice((2, 3))
    return sorted(rng.sample(range(1, INBOUND_COUNT + 1), count))


def _client_payload(
    rng: random.Random, index: int, groups: list[str], now: int, ids: list[int], inbounds: dict
) -> dict:
    stem = STEMS[index % len(STEMS)]
    if index % 97 == 0:
        stem = stem.capitalize()
    payload = {
        "email": f"{stem}.{index:06d}@{rng.choice(DOMAINS)}",
        "totalGB": 0 if rng.random() < 0.4 else rng.choice(QUOTAS_GB) * GB,
        "expiryTime": _expiry(rng, now),
        "enable": rng.random() >= 0.05,
        "group": rng.choice(groups) if rng.random() < 0.75 else "",
        "comment": rng.choice(COMMENTS),
        "limitIp": rng.choice((0, 0, 0, 2, 3)),
        "reset": rng.choice((0, 0, 0, 30)),
    }
    if any(inbounds[i]["streamSettings"].get("security") == "reality" for i in ids):
        payload["flow"] = "xtls-rprx-vision"
    return payload


def _expiry(rng: random.Random, now: int) -> int:
    """Unlimited 30 %, past 10 %, within three days (expiring) 10 %, one to twelve
    months ahead 40 %, a negative duration (starts on first use) 10 %."""
    roll = rng.random()
    if roll < 0.3:
        return 0
    if roll < 0.4:
        return now - rng.randrange(1, 90) * DAY_MS
    if roll < 0.5:
        return now + rng.randrange(3600_000, 3 * DAY_MS)
    if roll < 0.9:
        return now + rng.randrange(30, 365) * DAY_MS
    return -rng.choice((7, 30, 90)) * DAY_MS


def _traffic(rng: random.Random, record: dict, key: str, now: int) -> tuple:
    """(email_key, email, up, down, enable, last_online): a tenth never connected; the
    rest used 1 KB to 1 TB (log-uniform); about one limited client in ten is over its
    quota, and half of those were already disabled by the sweep."""
    if rng.random() < 0.1:
        return (key, record["email"], 0, 0, True, 0)
    used = int(10 ** rng.uniform(3, 12))
    quota = record["totalGB"]
    over = quota and rng.random() < 0.1
    if over:
        used = quota + rng.randrange(1, GB)
    down = int(used * rng.uniform(0.6, 0.95))
    enable = not (over and rng.random() < 0.5)
    last_online = now - rng.randrange(30 * DAY_MS)
    return (key, record["email"], used - down, down, enable, last_online)


def check_clients(client: Client) -> str:
    """The paged list counts every client, groups are listed, and sampled clients come
    back with the UUID and inbounds they were written with."""
    page = client.call("GET", "/panel/api/clients/list/paged?pageSize=1")
    if page["total"] != CLIENT_COUNT:
        raise BenchError(f"list/paged says total {page['total']}, {CLIENT_COUNT} were written")
    groups = client.call("GET", "/panel/api/clients/groups")
    if len(groups) != GROUP_COUNT + EMPTY_GROUPS:
        raise BenchError(f"{len(groups)} groups listed, {GROUP_COUNT + EMPTY_GROUPS} written")
    for email, written in SAMPLES.items():
        got = client.call("GET", f"/panel/api/clients/get/{quote(email, safe='@')}")
        if got["client"]["id"] != written["uuid"] or got["inboundIds"] != written["inboundIds"]:
            raise BenchError(f"client {email} reads back differently: {got}")
    return (
        f"list/paged total {page['total']}; {len(groups)} groups; "
        f"{len(SAMPLES)} sampled clients read back with their UUID and inbounds"
    )


register_dataset(
    Dataset(
        DATASET_NAME,
        "100,000 clients over 20 inbounds (VLESS REALITY/WS, VMess WS, Trojan TLS, "
        "Shadowsocks legacy/2022, Hysteria 2), traffic, groups, expiry spread",
        seed=seed_clients,
        check=check_clients,
    )
)


def check_count(count: int):
    """The check of a smaller dataset: the paged list counts every client."""

    def check(client: Client) -> str:
        total = client.call("GET", "/panel/api/clients/list/paged?pageSize=1")["total"]
        if total != count:
            raise BenchError(f"list/paged says total {total}, {count} were written")
        return f"list/paged total {total}"

    return check


# The same mix at a hundredth and a tenth of the size, where a cost that should not grow
# with the clients is compared (bench/edit_scenarios.py).
for _count, _name in ((1_000, "clients_1k"), (10_000, "clients_10k")):
    register_dataset(
        Dataset(
            _name,
            f"{_count:,} clients in the mix of {DATASET_NAME}",
            seed=lambda conn, count=_count: seed_clients(conn, count),
            check=check_count(_count),
        )
    )
