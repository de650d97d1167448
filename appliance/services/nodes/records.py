"""Node records: the remote panels this panel manages, as the admin entered them.

A record holds how to reach a node (scheme, address, port, basePath, its API token) and
how to trust it (`tlsVerifyMode`, `certFingerprint`, `allowPrivateAddress`); what the
node says of itself (guid, versions, health) is filled in by the heartbeat. The token is
a credential for another machine: it is never shown again once saved (a view carries
`hasApiToken`), an update that leaves `apiToken` empty keeps it, and it is sealed at rest
with a key kept outside the database (`sealing.py`).

Deleting a node leaves the inbounds bound to it in place, here and on the node: they are
not migrated anywhere (the admin rebinds or deletes them), and the view of each says its
node is gone.

Every committed write of a record publishes `Change("nodes", [id])` on the change notice;
what the heartbeat notes of a node (`note_identity`, `set_dirty`) does not: it is the
node's state, not the admin's record.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from pony.orm import count, db_session, select

from appliance.domain.parse import parse_id, parse_text
from appliance.errors import ServiceError
from appliance.runtime.changes import Change, ChangeNotice
from appliance.services.clients.ips import server_of
from appliance.services.nodes.link import MODES, Details, normalize_pin
from appliance.services.nodes.sealing import TokenSeal, is_sealed
from appliance.services.webhooks.outbox import Outbox

# A host name or an IP address (IPv6 bare or in brackets): nothing that could carry a
# scheme, a path, a user or a port into the URL built from it.
ADDRESS_SHAPE = re.compile(
    r"^(?:\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*|[A-Za-z0-9._-]+)$"
)
BASE_PATH_SHAPE = re.compile(r"^/[A-Za-z0-9._~/-]*$")
TOKEN_SHAPE = re.compile(r"^[\x21-\x7e]{1,512}$")
SCHEMES = ("https", "http")
FIELDS = (
    "name",
    "remark",
    "scheme",
    "address",
    "port",
    "basePath",
    "apiToken",
    "enable",
    "allowPrivateAddress",
    "tlsVerifyMode",
    "certFingerprint",
)


class Nodes:
    def __init__(
        self,
        store,
        seal: TokenSeal,
        notice: ChangeNotice,
        outbox: Outbox,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.notice = notice
        # Webhook events: node.out_of_step, in the transaction that marks a node so.
        self.outbox = outbox
        self.clock = clock
        # How API tokens are kept at rest: sealed, with a key kept outside the database.
        self.seal = seal

    # ---- reads -----------------------------------------------------------------------

    def rows(self) -> list[dict]:
        """Every record as stored (token included), in id order: for the services that
        call nodes, never for a reply."""
        with db_session:
            return [
                self._record(n) for n in select(n for n in self.store.entities.Node).order_by(1)
            ]

    def stored(self, node_id) -> dict:
        node_id = parse_id(node_id, "node id")
        with db_session:
            return self._record(self._row(node_id))

    def exists(self, node_id: int) -> bool:
        with db_session:
            return self.store.entities.Node.exists(id=node_id)

    def bound_inbounds(self, node_id: int) -> int:
        with db_session:
            return count(i for i in self.store.entities.Inbound if i.node_id == node_id)

    # ---- writes ----------------------------------------------------------------------

    def add(self, payload: Any) -> dict:
        record = parse_node(payload, None)
        now = int(self.clock())
        with db_session:
            self._check_name(record["name"], None)
            row = self.store.entities.Node(**self._columns(record), created_at=now, updated_at=now)
            row.flush()
            made = self._record(row)
        self._announce(made["id"])
        return made

    def update(self, node_id, payload: Any) -> tuple[dict, dict]:
        """The record before and after; the token is kept when `apiToken` is empty."""
        node_id = parse_id(node_id, "node id")
        with db_session:
            row = self._row(node_id)
            before = self._record(row)
            record = parse_node(payload, before)
            self._check_name(record["name"], node_id)
            row.set(**self._columns(record), updated_at=int(self.clock()))
            after = self._record(row)
        self._announce(node_id)
        return before, after

    def set_enable(self, node_id, enable: Any) -> dict:
        node_id = parse_id(node_id, "node id")
        if not isinstance(enable, bool):
            raise ServiceError("enable must be true or false")
        with db_session:
            row = self._row(node_id)
            row.set(enable=enable, updated_at=int(self.clock()))
            changed = self._record(row)
        self._announce(node_id)
        return changed

    def delete(self, node_id) -> tuple[dict, int]:
        """The deleted record and how many inbounds stay bound to it."""
        node_id = parse_id(node_id, "node id")
        with db_session:
            row = self._row(node_id)
            gone = self._record(row)
            row.delete()
            self.store.entities.NodeCounter.select(lambda c: c.node_id == node_id).delete(bulk=True)
            # The addresses it saw: no client's limit is judged on a server that is gone.
            seen_by = server_of(node_id)
            self.store.entities.ClientIp.select(lambda i: i.server == seen_by).delete(bulk=True)
            bound = count(i for i in self.store.entities.Inbound if i.node_id == node_id)
        self._announce(node_id)
        return gone, bound

    def _announce(self, node_id: int) -> None:
        """After a commit: the record of node `node_id` changed."""
        self.notice.publish(Change("nodes", [node_id]))

    def note_identity(self, node_id: int, **fields: Any) -> None:
        """Keep what a node said of itself (guid, parentGuid, versions, last heartbeat)
        when it differs from what is stored."""
        columns = {_COLUMN.get(k, k): v for k, v in fields.items()}
        with db_session:
            row = self.store.entities.Node.get(id=node_id)
            if row is None:
                return
            changed = {k: v for k, v in columns.items() if getattr(row, k) != v}
            if changed:
                row.set(**changed)

    def set_dirty(self, node_ids, dirty: bool) -> None:
        ids = list(node_ids)
        if not ids:
            return
        with db_session:
            marked = []
            for row in select(
                n for n in self.store.entities.Node if n.id in ids and n.dirty != dirty
            ):
                row.dirty = dirty
                marked.append(row)
            if dirty:
                self.outbox.raise_event(
                    "node.out_of_step", [node_event(_stored(row)) for row in marked]
                )

    def seal_stored(self) -> tuple[int, list[str]]:
        """Seal the tokens stored in plaintext; returns how many, and the names of the
        nodes whose sealed token this key cannot open."""
        with db_session:
            rows = [
                n for n in select(n for n in self.store.entities.Node) if not is_sealed(n.api_token)
            ]
            for row in rows:
                row.api_token = self.seal.seal(row.api_token)
            unopened = [
                n.name
                for n in select(n for n in self.store.entities.Node).order_by(1)
                if is_sealed(self.seal.open(n.api_token))
            ]
            return len(rows), unopened

    def check_name(self, name: str, own_id: int | None) -> None:
        """Refuse a name another node already has."""
        with db_session:
            self._check_name(name, own_id)

    # ---- helpers ---------------------------------------------------------------------

    def _record(self, row) -> dict:
        record = _stored(row)
        record["apiToken"] = self.seal.open(record["apiToken"])
        return record

    def _columns(self, record: dict) -> dict:
        return {**_columns(record), "api_token": self.seal.seal(record["apiToken"])}

    def _row(self, node_id: int):
        row = self.store.entities.Node.get(id=node_id)
        if row is None:
            raise ServiceError(f"node {node_id} not found")
        return row

    def _check_name(self, name: str, own_id: int | None) -> None:
        key = name.casefold()
        for row in select(n for n in self.store.entities.Node):
            if row.name.casefold() == key and row.id != own_id:
                raise ServiceError(f"a node named {row.name!r} already exists")


def details(record: dict) -> Details:
    """How to reach the node of a stored (or parsed) record."""
    return Details(
        name=record.get("name", ""),
        scheme=record["scheme"],
        address=record["address"],
        port=record["port"],
        base_path=record["basePath"],
        api_token=record["apiToken"],
        allow_private_address=record["allowPrivateAddress"],
        tls_verify_mode=record["tlsVerifyMode"],
        cert_fingerprint=record["certFingerprint"],
    )


def public_view(record: dict) -> dict:
    """A stored record as replies show it: everything but the token. A token this panel
    cannot open (sealed under another key) is one the admin must enter again."""
    token = record.get("apiToken") or ""
    view = {k: v for k, v in record.items() if k != "apiToken"}
    view["apiToken"] = ""
    view["hasApiToken"] = bool(token) and not is_sealed(token)
    return view


def parse_node(payload: Any, before: dict | None, *, probe: bool = False) -> dict:
    """A node record from an add or update body (`before`: the stored record an update
    replaces, whose token an empty `apiToken` keeps). `probe`: connection details for a
    test, where the name may be left out."""
    if not isinstance(payload, dict):
        raise ServiceError("the body must be a JSON object with the node's fields")
    name = parse_text(payload.get("name"), "name", 64)
    if not name and not probe:
        raise ServiceError("name is required (1-64 characters)")
    scheme = payload.get("scheme", "https")
    scheme = "https" if scheme in (None, "") else scheme
    if scheme not in SCHEMES:
        raise ServiceError(f"scheme must be https or http (got {scheme!r})")
    address = parse_text(payload.get("address"), "address", 255)
    if not address:
        raise ServiceError("address is required: the node's host name or IP address")
    if not ADDRESS_SHAPE.match(address):
        raise ServiceError(
            f"address must be a host name or an IP address, without scheme, port or path "
            f"(got {address[:100]!r})"
        )
    address = address.strip("[]")
    port = _port(payload.get("port"))
    base_path = parse_text(payload.get("basePath"), "basePath", 255) or "/"
    if not base_path.startswith("/"):
        base_path = "/" + base_path
    if not BASE_PATH_SHAPE.match(base_path) or "/../" in base_path + "/" or "//" in base_path:
        raise ServiceError(
            f"basePath must be a path such as / or /panel/ (got {base_path[:100]!r})"
        )
    if not base_path.endswith("/"):
        base_path += "/"
    token = payload.get("apiToken")
    if token in (None, "") and before is not None:
        token = before["apiToken"]
    if not isinstance(token, str) or not TOKEN_SHAPE.match(token.strip()):
        raise ServiceError(
            "apiToken is required: an API token created on the node (scope node or admin)"
        )
    fingerprint = payload.get("certFingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise ServiceError("certFingerprint must be a string")
    fingerprint = normalize_pin(fingerprint or "")
    mode = payload.get("tlsVerifyMode")
    if mode in (None, ""):
        mode = "pin" if fingerprint else "system"
    if mode not in MODES:
        raise ServiceError(f"tlsVerifyMode must be one of {', '.join(MODES)} (got {mode!r})")
    if mode == "pin" and not fingerprint:
        raise ServiceError(
            "tlsVerifyMode pin needs certFingerprint: fetch it with nodes/certFingerprint "
            "and confirm it is the node's"
        )
    if mode != "system" and scheme != "https":
        raise ServiceError(f"tlsVerifyMode {mode} needs scheme https")
    return {
        "name": name,
        "remark": parse_text(payload.get("remark"), "remark", 255),
        "scheme": scheme,
        "address": address,
        "port": port,
        "basePath": base_path,
        "apiToken": token.strip(),
        "enable": _flag(payload, "enable", True),
        "allowPrivateAddress": _flag(payload, "allowPrivateAddress", False),
        "tlsVerifyMode": mode,
        "certFingerprint": fingerprint,
    }


def _port(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 7:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ServiceError(f"port must be from 1 to 65535 (got {value!r})")
    return value


def _flag(payload: dict, key: str, default: bool) -> bool:
    value = payload.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ServiceError(f"{key} must be true or false")
    return value


_COLUMN = {
    "basePath": "base_path",
    "apiToken": "api_token",
    "allowPrivateAddress": "allow_private_address",
    "tlsVerifyMode": "tls_verify_mode",
    "certFingerprint": "cert_fingerprint",
    "parentGuid": "parent_guid",
    "panelVersion": "panel_version",
    "coreVersion": "core_version",
    "lastHeartbeat": "last_heartbeat",
}


def _columns(record: dict) -> dict:
    return {_COLUMN.get(k, k): record[k] for k in FIELDS}


def _stored(row) -> dict:
    return {
        "id": row.id,
        "name": row.name,
        "remark": row.remark,
        "scheme": row.scheme,
        "address": row.address,
        "port": row.port,
        "basePath": row.base_path,
        "apiToken": row.api_token,
        "enable": row.enable,
        "allowPrivateAddress": row.allow_private_address,
        "tlsVerifyMode": row.tls_verify_mode,
        "certFingerprint": row.cert_fingerprint,
        "guid": row.guid,
        "parentGuid": row.parent_guid,
        "panelVersion": row.panel_version,
        "coreVersion": row.core_version,
        "lastHeartbeat": row.last_heartbeat,
        "outOfStep": row.dirty,
        "createdAt": row.created_at,
        "updatedAt": row.updated_at,
    }


def node_event(record: dict, **more) -> tuple[str, dict]:
    """(subject, data) of a webhook event about a node (its stored record): which node,
    where, in step or not, and `more`."""
    data = {key: record[key] for key in ("id", "name", "address", "port", "outOfStep")}
    return f"node:{record['id']}", {**data, **more}
