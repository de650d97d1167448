"""The mTLS CA the instances on one networked database share: a row of the setting table
(CA_SETTING), its value the CA certificate and its sealed key as JSON text. Written once,
by whichever instance needs the CA first; read from the database every time, never from
the settings cache, which another instance's write would not reach."""

from __future__ import annotations

from appliance.store.ddl import quote

CA_SETTING = "clusterMtlsCa"


def shared_ca(store) -> str | None:
    """The stored value; None while no instance stored one."""
    key = quote("key", store.dialect)
    rows = store.rows(f"SELECT value FROM setting WHERE {key} = ?", [CA_SETTING])
    return rows[0][0] if rows else None


def offer_ca(store, value: str) -> str:
    """Store `value` unless another instance stored one first; the value stored."""
    key = quote("key", store.dialect)
    if store.dialect == "mysql":
        statement = f"INSERT IGNORE INTO setting ({key}, value) VALUES (?, ?)"
    else:
        statement = f"INSERT INTO setting ({key}, value) VALUES (?, ?) ON CONFLICT DO NOTHING"
    store.execute(statement, [CA_SETTING, value])
    return shared_ca(store)
