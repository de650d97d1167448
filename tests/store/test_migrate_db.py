"""`appliance migrate-db` from a panel's SQLite file to PostgreSQL and MariaDB.

One generated panel (10,000 clients with traffic, groups, external links, API tokens and
changed settings) is copied into a fresh database on each local server; a panel started
on the copy must answer the API exactly as the panel on the SQLite file did. Around that:
the command's refusals (non-empty target, a SQLite target, a missing file) and what it
must never do (write to the source, lose counters past 2^32, hand out an id twice).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys

import pytest
import requests
from helpers import (
    NETWORKED,
    clean_env,
    create_inbound,
    fresh_database,
    networked_rows,
    ok,
)
from panels import start_panel

from appliance.store import Store
from appliance.store.transfer import table_digest

CLIENTS = "/panel/api/clients"
CLIENT_COUNT = 10_000
GROUPS = ("Sales", "support", "Ops ✓")
BIG = 2**40 + 7  # a counter no 32-bit column could hold


def appliance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "appliance", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),
    )


@pytest.fixture
def target(request):
    """A fresh database on the local server named by the test's `kind`; dropped after."""
    with fresh_database(request.param) as url:
        yield url


def networked(test):
    return pytest.mark.parametrize("target", sorted(NETWORKED), indirect=True)(test)


# ---- the generated panel ---------------------------------------------------------------


def generate(api) -> list[str]:
    """Fill a panel through its API; returns the emails of the clients."""
    vless = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": 32191,
            "remark": "vless Grüße",
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )["id"]
    trojan = create_inbound(
        api, {"protocol": "trojan", "port": 32192, "remark": "trojan", "settings": {}}
    )["id"]
    emails = [f"user{n:05d}@migrate.test" for n in range(CLIENT_COUNT)]
    for start in range(0, CLIENT_COUNT, 2500):
        items = [
            {
                "client": {
                    "email": email,
                    "group": GROUPS[n % len(GROUPS)],
                    "comment": f"client {n} — ünïcode 🚀" if n % 7 == 0 else "",
                    "totalGB": (n % 5) * 2**30,
                    "limitIp": n % 3,
                },
                "inboundIds": [vless] if n % 2 else [vless, trojan],
            }
            for n, email in enumerate(emails[start : start + 2500], start)
        ]
        assert ok(api.post(f"{CLIENTS}/bulkCreate", items))["created"] == len(items)
    ok(api.post(f"{CLIENTS}/groups/create", {"name": "empty group"}))
    for email in emails[:40]:
        links = [
            {"kind": "link", "value": f"vless://{email}@example.com:443#x", "remark": "one"},
            {"kind": "subscription", "value": "https://sub.example.com/s/abc", "remark": ""},
        ]
        ok(api.post(f"{CLIENTS}/{email}/externalLinks", {"externalLinks": links}))
    ok(api.post(f"{CLIENTS}/del/{emails[-1]}"))  # an id handed out, then freed
    for name in ("automation", "backup"):
        ok(api.post("/panel/api/setting/apiTokens/create", {"name": name}))
    ok(api.post("/panel/api/setting/update", {"pageSize": 50, "remarkModel": "-ei"}))
    for _ in range(5):  # a sign-in block, which the copy carries over
        guess = {"username": "intruder", "password": "guess"}
        assert requests.post(api.url + "/login", json=guess, timeout=10).status_code == 200
    return emails[:-1]


def add_traffic(db_file: str) -> None:
    """Counters as the core would have left them, some past 2^32 (written directly: the
    API only sets them one client at a time)."""
    with sqlite3.connect(db_file) as db:
        db.execute("UPDATE client_traffic SET up = id * 1048573, down = id * 7919")
        db.execute("UPDATE client_traffic SET up = ?, down = ? WHERE id % 1000 = 1", (BIG, BIG))
        db.execute("UPDATE inbound SET up = ?, down = 5", (BIG,))
    db.close()


def snapshot(api, emails: list[str]) -> dict:
    """What a user sees: the lists, pages in several orders, settings, single clients."""
    views = {
        "list": api.get(f"{CLIENTS}/list"),
        "inbounds": api.get("/panel/api/inbounds/list"),
        "settings": api.post("/panel/api/setting/all"),
        "tokens": api.get("/panel/api/setting/apiTokens"),
        "audit": api.get("/panel/api/audit/list?pageSize=200&route=clients"),
        "groups": api.get(f"{CLIENTS}/groups"),
    }
    for query in (
        "page=1&pageSize=100",
        "page=37&pageSize=100",
        "page=2&pageSize=200&sort=email&order=descend",
        "page=1&pageSize=50&sort=traffic&order=descend",
        "page=3&pageSize=50&sort=remaining&order=ascend",
        "page=1&pageSize=50&sort=inboundIds&order=descend",
        "page=1&pageSize=50&search=ünïcode",
        "page=1&pageSize=50&group=support",
    ):
        page = api.get(f"{CLIENTS}/list/paged?{query}")
        # The summary's version names one panel's run, not the data: each panel has its own.
        page["obj"].pop("summaryVersion")
        views[query] = page
    for email in (emails[0], emails[1], emails[1001], emails[-1]):
        view = api.get(f"{CLIENTS}/get/{email}")
        # The subscription URL names the port this panel's subscription server listens on.
        view["obj"].pop("subUrl", None)
        views[email] = view
    for name, view in views.items():
        assert view["success"] is True, (name, view)
    return views


def file_sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The generated SQLite panel, stopped, with what its API answered."""
    tmp = tmp_path_factory.mktemp("source")
    db_file = str(tmp / "source.db")
    server = start_panel(tmp, env={"APPLIANCE_DB": db_file})
    try:
        emails = generate(server.client())
    finally:
        server.stop()
    add_traffic(db_file)
    server.start()
    try:
        views = snapshot(server.client(), emails)
    finally:
        server.stop()
    return {"server": server, "db": db_file, "emails": emails, "views": views}


# ---- the copy -----------------------------------------------------------------------------


@networked
def test_panel_on_the_copy_answers_like_the_source(source, target, tmp_path):
    before = file_sha256(source["db"])
    result = appliance("migrate-db", "--from", source["db"], "--to", target)
    assert result.returncode == 0, result.stderr
    report = result.stdout
    tables = ("client", "client_inbound", "client_traffic", "client_link", "api_token")
    for table in (*tables, "login_block", "audit_entry"):
        line = next(line for line in report.splitlines() if line.split()[:1] == [table])
        assert line.endswith("ok"), line
    block = next(line.split() for line in report.splitlines() if line.startswith("login_block "))
    assert block[1] == "1"
    assert " 9999 " in next(line for line in report.splitlines() if line.startswith("client "))
    audit = next(line.split() for line in report.splitlines() if line.startswith("audit_entry "))
    assert int(audit[1]) > 20  # the audit log moves with the rest
    assert file_sha256(source["db"]) == before, "the source file was written"

    server = source["server"]
    copy = start_panel(tmp_path, "--db", target)
    copy.username, copy.password = server.username, server.password
    try:
        views = snapshot(copy.client(), source["emails"])
    finally:
        copy.stop()
    assert views.keys() == source["views"].keys()
    for name, view in source["views"].items():
        assert views[name] == view, name
    assert "An admin account was created" not in copy.output()


@networked
def test_counters_past_32_bits_and_checksums_match(source, target):
    assert appliance("migrate-db", "--from", source["db"], "--to", target).returncode == 0
    rows = networked_rows(target, "SELECT up FROM client_traffic WHERE up = ?", (BIG,))
    assert len(rows) == 10 and rows[0][0] == BIG
    with sqlite3.connect(f"file:{source['db']}?mode=ro", uri=True) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(client)")]
        expected = table_digest(db.execute("SELECT * FROM client ORDER BY id"))
    db.close()
    names = ", ".join(columns)
    assert table_digest(networked_rows(target, f"SELECT {names} FROM client ORDER BY id")) == (
        expected
    )


@networked
def test_new_rows_on_the_copy_get_fresh_ids(source, target, tmp_path):
    """The freed id of the deleted client is not handed out again, nor any copied id."""
    assert appliance("migrate-db", "--from", source["db"], "--to", target).returncode == 0
    with sqlite3.connect(f"file:{source['db']}?mode=ro", uri=True) as db:
        issued = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'client'").fetchone()[0]
    db.close()
    copy = start_panel(tmp_path, "--db", target)
    copy.username, copy.password = source["server"].username, source["server"].password
    try:
        api = copy.client()
        inbound_id = ok(api.get("/panel/api/inbounds/list"))[0]["id"]
        ok(api.post(f"{CLIENTS}/add", {"client": {"email": "new@x"}, "inboundIds": [inbound_id]}))
    finally:
        copy.stop()
    (new_id,) = networked_rows(target, "SELECT id FROM client WHERE email = 'new@x'")[0]
    assert new_id == issued + 1


@networked
def test_a_target_with_rows_is_refused_unless_replaced(source, target):
    assert appliance("migrate-db", "--from", source["db"], "--to", target).returncode == 0
    networked_rows(target, "UPDATE client SET comment = 'changed on the target' WHERE id = 1")
    again = appliance("migrate-db", "--from", source["db"], "--to", target)
    assert again.returncode == 1
    assert "the target database is not empty" in again.stderr
    assert "--replace" in again.stderr
    assert networked_rows(target, "SELECT comment FROM client WHERE id = 1") == [
        ("changed on the target",)
    ]
    replaced = appliance("migrate-db", "--from", source["db"], "--to", target, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert networked_rows(target, "SELECT comment FROM client WHERE id = 1") == [
        ("client 0 — ünïcode 🚀",)
    ]
    assert networked_rows(target, "SELECT COUNT(*) FROM client") == [(CLIENT_COUNT - 1,)]


# ---- refusals ------------------------------------------------------------------------------


def test_a_sqlite_target_is_refused(source, tmp_path):
    result = appliance("migrate-db", "--from", source["db"], "--to", str(tmp_path / "x.db"))
    assert result.returncode == 1
    assert "--to must name a PostgreSQL or MySQL/MariaDB database" in result.stderr
    assert not os.path.exists(tmp_path / "x.db")


def test_a_missing_source_is_refused(tmp_path):
    result = appliance(
        "migrate-db", "--data-dir", str(tmp_path), "--to", "postgresql://postgres@127.0.0.1/x"
    )
    assert result.returncode == 1
    assert f"no SQLite database at {tmp_path / 'appliance.db'}" in result.stderr


def test_a_file_that_is_no_panel_database_is_refused(tmp_path):
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (id INTEGER PRIMARY KEY)").connection.close()
    result = appliance("migrate-db", "--from", str(other), "--to", "mysql://root@127.0.0.1/x")
    assert result.returncode == 1
    assert "is not a panel database" in result.stderr


def test_an_unreachable_target_is_a_sentence(source):
    result = appliance(
        "migrate-db", "--from", source["db"], "--to", "postgresql://u:secret@127.0.0.1:1/x"
    )
    assert result.returncode == 1
    assert "cannot connect to postgres://u:***@127.0.0.1:1/x" in result.stderr
    assert "secret" not in result.stderr
    assert "Traceback" not in result.stderr


def test_help_names_every_option():
    result = appliance("migrate-db", "--help")
    assert result.returncode == 0
    for flag in ("--to", "--from", "--replace", "--data-dir"):
        assert flag in result.stdout


@networked
def test_a_row_the_target_cannot_hold_rolls_the_whole_copy_back(target, tmp_path):
    """SQLite does not enforce VARCHAR lengths; the networked servers do. The copy stops
    with the reason and leaves the target without a single copied row."""
    db_file = str(tmp_path / "long.db")
    Store(db_file).open()
    with sqlite3.connect(db_file) as db:
        db.execute("INSERT INTO setting (key, value) VALUES ('pageSize', '30')")
        db.execute(
            "INSERT INTO api_token (name, token_hash, created_at) VALUES (?, 'h', 1)", ("x" * 100,)
        )
    db.close()
    result = appliance("migrate-db", "--from", db_file, "--to", target)
    assert result.returncode == 1
    assert "failed and was rolled back" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert networked_rows(target, "SELECT COUNT(*) FROM setting") == [(0,)]
    assert networked_rows(target, "SELECT COUNT(*) FROM api_token") == [(0,)]


@networked
def test_settings_a_route_refuses_are_reset_on_the_way(target, tmp_path):
    """migrate-db is an import too: a value `setting/update` refuses is not copied as it
    is but reset to its default and named; the source file stays as it was."""
    db_file = str(tmp_path / "crafted.db")
    Store(db_file).open()
    with sqlite3.connect(db_file) as db:
        for key, value in (
            ("subSupportUrl", '"javascript:alert(1)"'),
            ("webBasePath", '"/a b/"'),
            ("subTitle", '"kept"'),
        ):
            db.execute("INSERT INTO setting (key, value) VALUES (?, ?)", (key, value))
    db.close()
    before = file_sha256(db_file)
    result = appliance("migrate-db", "--from", db_file, "--to", target)
    assert result.returncode == 0, result.stderr
    assert "reset, as the panel refuses it: subSupportUrl was reset to its default" in (
        result.stdout
    )
    assert "webBasePath was reset to its default" in result.stdout
    copied = dict(networked_rows(target, "SELECT key, value FROM setting"))
    assert copied["subTitle"] == '"kept"'
    assert not {"subSupportUrl", "webBasePath"} & set(copied)
    assert file_sha256(db_file) == before
