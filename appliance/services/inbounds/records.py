"""Inbounds: the listening proxy endpoints, stored once and shown in several shapes.

Payloads are normalised by `inbound_rules` before anything is written; this module adds
what needs the database or the disk: unique tags, port conflicts with other inbounds and
with the panel's own ports, certificate files, sockets and served folders inside their
directories (`file_paths`), and the derived parts of the returned record (`settings.clients`
from client rows, `settings.fallbacks` from fallback rows, `clientStats`). An update keeps
attached clients usable: the protocol must still take clients, and their secrets are
re-fitted to a changed Shadowsocks cipher as on attach. Every save that changes what
the core runs (add, update, enable) is written, then tested by the installed core inside
its still open transaction (`check_config`): a refusal rolls it back with the core's words.
An inbound bound to a node is placed on that node first (`place_on_node`): the node's
refusal refuses the save with the node's words. Its views carry `nodeStatus`,
`nodeOutOfStep` and `nodeError` (`node_marks`), so a list shows which run out of step.
Each of these is required: a wiring that forgot one would skip a test or a node in
silence. A committed save publishes `Change("inbounds", [id])` on the change notice, and
`Change("clients", emails)` for the clients it changed where they run (those of an
inbound bound to a node, and those whose secrets were re-fitted).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from pony.orm import db_session, select

from appliance.core.entries import client_entry
from appliance.domain import inbound_rules
from appliance.domain.client_rules import legacy_method
from appliance.domain.client_views import client_api_view, client_stat, slim_entry
from appliance.domain.parse import parse_id, parse_json_text
from appliance.errors import ServiceError
from appliance.runtime.changes import Change, ChangeNotice
from appliance.runtime.file_paths import (
    FilePlaces,
    check_inbound_paths,
    missing_certificate_file,
)
from appliance.services.inbounds.client_fit import refit
from appliance.services.inbounds.core_reads import ReservedPorts
from appliance.services.inbounds.fallbacks import NOT_ON_NODES, Fallbacks, master_problem
from appliance.services.inbounds.listeners import Socket, busy_transports, overlap, reserved_by
from appliance.services.inbounds.views import inbound_record, record_of
from appliance.store import inbound_rows, usage_sql

# (inbound ids, slim) -> {inbound id: client row tuples}, see ClientQuery.by_inbound.
ClientsOf = Callable[[list[int], bool], dict[int, list[tuple]]]
# The sockets the running core holds, see CoreService.held_sockets.
HeldSockets = Callable[[], list[Socket]]
# Raises ServiceError when the core refuses the config of the open transaction, see
# CoreService.check_candidate.
CheckConfig = Callable[[int], None]
# Applies a save of an inbound bound to a node on that node, inside the save's open
# transaction before anything is written (raising refuses the save): (node id, tag) before
# the save or None for a new inbound, and the record after it or None once deleted; see
# NodeDeploy.inbound_saved. The same arguments tell NodeDeploy.save_failed of a save that
# failed here after the node took it.
PlaceOnNode = Callable[[tuple[int | None, str] | None, dict | None], None]
# node ids -> {node id: fields an inbound view of that node carries}, see NodeDeploy.marks.
NodeMarks = Callable[[Iterable[int]], dict[int, dict]]

# Characters a generated tag may not carry (the ones `inbound_rules` refuses in a tag
# the user sends), so a generated tag survives being sent back on update.
TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@-]+")
# The prefix of the tag of an inbound bound to a node, here; the node's own tag lacks it.
NODE_TAG = re.compile(r"^n[0-9]+-")
# What a view of an inbound bound to a node says of that node (see NodeDeploy.marks).
NODE_MARKS = ("nodeStatus", "nodeOutOfStep", "nodeError")
# What a node can run: everything its core serves (MTProto is a process of its own here).
NODE_PROTOCOLS = frozenset(inbound_rules.PROTOCOLS) - {"mtproto"}


class Inbounds:
    def __init__(
        self,
        store,
        reserved_ports: ReservedPorts,
        clients_of: ClientsOf,
        *,
        places: FilePlaces,
        notice: ChangeNotice,
        held_sockets: HeldSockets,
        check_config: CheckConfig,
        place_on_node: PlaceOnNode,
        node_marks: NodeMarks,
        node_save_failed: PlaceOnNode,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        # Where the files and sockets inbounds name may be (runtime.file_paths).
        self.places = places
        self.reserved_ports = reserved_ports
        self.clients_of = clients_of
        self.held_sockets = held_sockets
        self.check_config = check_config
        self.place_on_node = place_on_node
        self.node_marks = node_marks
        self.notice = notice
        self.node_save_failed = node_save_failed
        self.clock = clock
        self.fallbacks = Fallbacks(store, places)

    # ---- reads -----------------------------------------------------------------------

    def list(self, slim: bool = False) -> list[dict]:
        """Every inbound with its clients. `slim` reduces each client entry to email,
        enable and comment and leaves clientStats empty: what a page of inbounds needs."""
        views = self._views(slim)
        for view in views:
            del view["clientRows"]
        return self._marked(views)

    def _views(self, slim: bool) -> list[dict]:
        with db_session:
            rows = inbound_rows.all_inbound_rows(self.store)
            fallbacks = self.fallbacks.by_master()
            clients = self.clients_of([row[0] for row in rows], slim)
        return [
            self._view(row, fallbacks.get(row[0], []), clients.get(row[0], []), slim)
            for row in rows
        ]

    def options(self) -> list[dict]:
        with db_session:
            rows = select(i for i in self.store.entities.Inbound).order_by(lambda i: i.id)[:]
            options = []
            for row in rows:
                record = _record(row)
                options.append(
                    {
                        "id": row.id,
                        "remark": row.remark,
                        "tag": row.tag,
                        "protocol": row.protocol,
                        "port": row.port,
                        "nodeId": row.node_id,
                        "tlsFlowCapable": inbound_rules.tls_flow_capable(record),
                        "ssMethod": inbound_rules.ss_method(record),
                    }
                )
            return options

    def get(self, inbound_id) -> dict:
        with db_session:
            return self._view_of(self._row(inbound_id).id)

    def _marked(self, views: list[dict]) -> list[dict]:
        """`views` with the state of their nodes, for those bound to one."""
        marks = self.node_marks({v["nodeId"] for v in views if v["nodeId"] is not None})
        for view in views:
            if view["nodeId"] in marks:
                view.update(marks[view["nodeId"]])
        return views

    def _view_of(self, inbound_id: int) -> dict:
        """The API view of one inbound, read fresh (the caller holds the db_session)."""
        self.store.db.flush()
        row = inbound_rows.inbound_row(self.store, inbound_id)
        clients = self.clients_of([inbound_id], False).get(inbound_id, [])
        view = self._view(row, self.fallbacks.rendered(inbound_id), clients, slim=False)
        del view["clientRows"]
        return self._marked([view])[0]

    # ---- writes ----------------------------------------------------------------------

    def add(self, payload) -> dict:
        record = inbound_rules.normalize_inbound(_object(payload))
        check_inbound_paths(record, self.places)
        with db_session:
            record = self._placed(record)
            self._check_unique(record, None)
            self._check_free(record)
            record = {**record, "tag": self._tag_for(record, None)}
            with self._node_first(None, record):
                now = int(self.clock() * 1000)
                row = self.store.entities.Inbound(
                    created_at=now, **_columns(record, record["tag"], now)
                )
                row.flush()
                self.fallbacks.replace_from_payload(row, inbound_rules.payload_fallbacks(payload))
                self._check_core(row.id, record)
                view = self._view_of(row.id)
        self._announce(view["id"])
        return view

    def update(self, inbound_id, payload) -> dict:
        with db_session:
            row = self._row(inbound_id)
            record = self._placed(inbound_rules.normalize_inbound(_object(payload)))
            check_inbound_paths(record, self.places)
            self._check_unique(record, row.id)
            self._check_free(record)
            self._check_still_master(row, record)
            self._check_clients_fit(row, record)
            before = (row.node_id, row.tag)
            record = {**record, "tag": self._tag_for(record, row)}
            # Clients follow an inbound that moves to or from a node; on the node it stays
            # on, its inbound keeps them, so only re-fitted secrets need telling.
            moved = before[0] != record["nodeId"]
            changed = []
            with self._node_first(before, record):
                now = int(self.clock() * 1000)
                row.set(**_columns(record, record["tag"], now))
                for attachment in row.attachments:
                    client = attachment.client
                    secrets = (client.password, client.method)
                    try:
                        refit(client, [a.inbound for a in client.attachments])
                    except ServiceError as exc:
                        raise ServiceError(f"client '{client.email}': {exc.msg}") from None
                    if moved or secrets != (client.password, client.method):
                        changed.append(client.email)
                self._check_core(row.id, record)
                view = self._view_of(row.id)
        self._announce(view["id"], changed)
        return view

    def import_(self, data) -> dict:
        """`data` is a JSON-encoded inbound, as exported; ids and counters are not kept."""
        payload = parse_json_text(data, "data", dict, "an object (one inbound)")
        payload = {k: v for k, v in payload.items() if k not in ("id", "up", "down")}
        return self.add(payload)

    def clone(self, inbound_id, payload) -> dict:
        """A copy of an inbound, as `import_` would make from its export, on the port the
        body names, with a generated tag and no clients: attaching clients is the clients
        API's work, and a copy meant to serve them all is one bulk attach away."""
        body = _object(payload)
        unknown = sorted(set(body) - {"port", "remark"})
        if unknown:
            raise ServiceError(f"a clone takes only port and remark (got {', '.join(unknown)})")
        if "port" not in body:
            raise ServiceError("port is required: the copy listens on a port of its own")
        copy = {
            key: value
            for key, value in self.get(inbound_id).items()
            if key not in ("id", "up", "down", "tag", "clientStats", *NODE_MARKS)
        }
        copy["port"] = body["port"]
        if "remark" in body:
            copy["remark"] = body["remark"]
        return self.add(copy)

    def delete(self, inbound_id) -> None:
        with db_session:
            row = self._row(inbound_id)
            row_id, before = row.id, (row.node_id, row.tag)
            detached = [a.client.email for a in row.attachments] if before[0] is not None else []
            with self._node_first(before, None):
                row.delete()
                self.store.db.flush()
                # Its history goes with it (a client's stays: see clients/usage.py).
                usage_sql.drop_inbound_history(self.store, row_id)
        self._announce(row_id, detached)

    def bulk_delete(self, ids) -> dict:
        if not isinstance(ids, list):
            raise ServiceError("ids must be an array of inbound ids")
        deleted, skipped = 0, []
        for inbound_id in ids:
            try:
                self.delete(inbound_id)
                deleted += 1
            except ServiceError as exc:
                skipped.append({"id": inbound_id, "reason": exc.msg})
        return {"deleted": deleted, "skipped": skipped}

    def set_enable(self, inbound_id, enable) -> None:
        if not isinstance(enable, bool):
            raise ServiceError("enable must be true or false")
        with db_session:
            row = self._row(inbound_id)
            if enable and not row.enable:
                self._check_free({**_record(row), "enable": True, "nodeId": row.node_id})
            with self._node_first((row.node_id, row.tag), {**record_of(row), "enable": enable}):
                row.enable = enable
                row.updated_at = int(self.clock() * 1000)
                self._check_core(row.id, record_of(row))
                row_id = row.id
        self._announce(row_id)

    def reset_traffic(self, inbound_id) -> None:
        with db_session:
            row = self._row(inbound_id)
            row.up = row.down = 0
            row_id = row.id
        self._announce(row_id)

    def reset_all_traffics(self) -> None:
        with db_session:
            for row in select(i for i in self.store.entities.Inbound if i.up > 0 or i.down > 0):
                row.up = row.down = 0
        self.notice.publish(Change("inbounds"))

    def _announce(self, inbound_id: int, emails: Iterable[str] | None = None) -> None:
        """After a commit: inbound `inbound_id` changed, and where they run, the clients
        of `emails` (the inbound first: the nodes read where inbounds are before clients)."""
        self.notice.publish(Change("inbounds", [inbound_id]))
        if emails is not None:
            self.notice.publish(Change("clients", emails))

    # ---- helpers ---------------------------------------------------------------------

    def _check_core(self, inbound_id: int, record: dict) -> None:
        """Let the core test the config with this transaction's writes to inbound
        `inbound_id` (`record`, as saved); raising rolls them back. A refusal caused by a
        certificate or key file that is not there says so in words: the core's own words
        name a JSON path of its config, not the inbound the admin edits."""
        self.store.db.flush()
        try:
            self.check_config(inbound_id)
        except ServiceError:
            absent = record.get("nodeId") is None and missing_certificate_file(record)
            if absent:
                name = record.get("remark") or record.get("tag")
                raise ServiceError(f"{absent} of inbound '{name}' does not exist") from None
            raise

    @contextlib.contextmanager
    def _node_first(self, before: tuple[int | None, str] | None, after: dict | None):
        """Apply a save on the node it concerns (before the save: the node id and tag of
        the stored inbound; after it: the record, None once deleted) before anything is
        written here: a node's refusal then changes nothing here, and no write waits for
        the node's answer. A save that fails here after the node took it leaves the node
        to be brought back in step (`node_save_failed`)."""
        if (before is None or before[0] is None) and (after is None or after["nodeId"] is None):
            yield
            return
        self.place_on_node(before, after)
        try:
            yield
        except BaseException:
            self.node_save_failed(before, after)
            raise

    def _row(self, inbound_id):
        inbound_id = parse_id(inbound_id, "inbound id")
        row = self.store.entities.Inbound.get(id=inbound_id)
        if row is None:
            raise ServiceError(f"no inbound with id {inbound_id}")
        return row

    def _placed(self, record: dict) -> dict:
        """An inbound bound to a node: the node must exist and the protocol run there,
        and its tag carries the node's prefix (`n<id>-`), so tags of different nodes
        never collide here; the node gets the tag without it."""
        node_id = record["nodeId"]
        if node_id is None:
            return record
        if not self.store.entities.Node.exists(id=node_id):
            raise ServiceError(f"nodeId {node_id}: no node with that id")
        if record["protocol"] not in NODE_PROTOCOLS:
            raise ServiceError(
                f"{record['protocol']} inbounds run on this host only, not on a node"
            )
        if record["tag"]:
            bare = NODE_TAG.sub("", record["tag"])
            record = {**record, "tag": f"n{node_id}-{bare}"[:64]}
        return record

    def _tag_for(self, record: dict, row) -> str:
        if record["tag"]:
            return record["tag"]
        same_place = row is not None and row.node_id == record["nodeId"]
        if same_place and row.port == record["port"] and row.listen == record["listen"]:
            return row.tag
        base = TAG_UNSAFE.sub("_", generated_tag(record["listen"], record["port"]))[:60]
        if record["nodeId"] is not None:
            base = f"n{record['nodeId']}-{base}"[:60]
        tag, n = base, 2
        while self.store.entities.Inbound.get(tag=tag) is not None:
            tag, n = f"{base}-{n}", n + 1
        return tag

    def port_owner(self, port: int) -> str | None:
        """Which local inbound listens on TCP `port`, for settings that move the panel."""
        with db_session:
            for other in select(
                i for i in self.store.entities.Inbound if i.port == port and i.node_id is None
            ):
                if "tcp" in inbound_rules.transports(_record(other)):
                    return f"inbound {other.id} ({other.remark or other.tag})"
        return None

    def _check_unique(self, record: dict, own_id: int | None) -> None:
        """Tags are unique; ports are unique per host: among the inbounds of this host,
        or of one node."""
        if record["tag"]:
            other = self.store.entities.Inbound.get(tag=record["tag"])
            if other is not None and other.id != own_id:
                raise ServiceError(
                    f"tag '{record['tag']}' is already used by inbound {other.id} "
                    f"({other.remark or other.tag})"
                )
        node_id = record["nodeId"]
        if _is_socket(record["listen"]) and node_id is None:
            self._check_socket(record["listen"], own_id)
            return
        wanted = inbound_rules.transports(record)
        port = record["port"]
        what = (
            None
            if node_id is not None
            else reserved_by(record["listen"], port, wanted, self.reserved_ports())
        )
        if what:
            raise ServiceError(f"port {port}/tcp is used by {what}; choose another port")
        if node_id is None:
            same_port = select(
                i for i in self.store.entities.Inbound if i.port == port and i.node_id is None
            )[:]
        else:
            same_port = select(
                i for i in self.store.entities.Inbound if i.port == port and i.node_id == node_id
            )[:]
        for other in same_port:
            if other.id == own_id or not overlap(other.listen, record["listen"]):
                continue
            shared = wanted & inbound_rules.transports(_record(other))
            if shared:
                raise ServiceError(
                    f"port {port}/{'+'.join(sorted(shared))} is already used by inbound "
                    f"{other.id} ({other.remark or other.tag})"
                )

    def _check_free(self, record: dict) -> None:
        """An inbound that runs in this host's core needs its port free of other programs:
        the core would exit on it and take every other inbound offline too."""
        if not record["enable"] or record["nodeId"] is not None or _is_socket(record["listen"]):
            return
        port = record["port"]
        wanted = inbound_rules.transports(record)
        busy = busy_transports(record["listen"], port, wanted, self.held_sockets())
        if busy:
            raise ServiceError(
                f"port {port} is in use by another program on this host "
                f"({'+'.join(busy)}); choose another port or stop that program first"
            )

    def _check_socket(self, listen: str, own_id: int | None) -> None:
        path = _socket_path(listen)
        sockets = select(
            i
            for i in self.store.entities.Inbound
            if i.node_id is None and (i.listen.startswith("/") or i.listen.startswith("@"))
        )
        for other in sockets:
            if other.id != own_id and _socket_path(other.listen) == path:
                raise ServiceError(
                    f"socket {path} is already used by inbound {other.id} "
                    f"({other.remark or other.tag})"
                )

    def _check_still_master(self, row, record: dict) -> None:
        """An update may not turn a master into an inbound that cannot hold its rules:
        the core would refuse the config at the next restart."""
        if row.fallbacks.is_empty():
            return
        if record["nodeId"] is not None:
            raise ServiceError(
                f"inbound {row.id} has fallback rules and cannot move to a node: {NOT_ON_NODES}"
            )
        problem = master_problem(record["protocol"], record["streamSettings"])
        if problem:
            raise ServiceError(
                f"inbound {row.id} has fallback rules and would no longer be able to hold "
                f"them: {problem}; remove its fallbacks first"
            )

    def _check_clients_fit(self, row, record: dict) -> None:
        """Attached clients stay attached through an update, so the new protocol must take
        clients; their secrets are re-fitted to a new cipher afterwards, as on attach."""
        if record["protocol"] in inbound_rules.CLIENT_PROTOCOLS:
            return
        count = row.attachments.count()
        if count:
            raise ServiceError(
                f"inbound {row.id} has {count} client(s) attached and {record['protocol']} "
                "takes no clients; detach them (or use delAllClients) before changing the "
                "protocol"
            )

    def _view(self, row: tuple, fallbacks: list[dict], clients: list[tuple], slim: bool) -> dict:
        record = inbound_record(row)
        inbound_id, protocol = record["id"], record["protocol"]
        settings, stream = record["settings"], record["streamSettings"]
        stats, views = [], []
        if protocol in inbound_rules.CLIENT_PROTOCOLS:
            if slim:
                settings["clients"] = [slim_entry(client) for client in clients]
            else:
                capable = inbound_rules.tls_flow_capable(
                    {"protocol": protocol, "settings": settings, "streamSettings": stream}
                )
                method = legacy_method(settings.get("method")) if protocol == "shadowsocks" else ""
                views = [client_api_view(client) for client in clients]
                settings["clients"] = [client_entry(protocol, v, capable, method) for v in views]
                stats = [client_stat(inbound_id, v, c) for v, c in zip(views, clients, strict=True)]
        if fallbacks:
            settings["fallbacks"] = fallbacks
        return {**record, "clientStats": stats, "clientRows": views}


def _object(payload) -> dict:
    if not isinstance(payload, dict):
        raise ServiceError("the inbound must be a JSON object")
    return payload


def _record(row) -> dict:
    """A stored row in the normalised shape `inbound_rules` works on."""
    return {
        "protocol": row.protocol,
        "listen": row.listen,
        "port": row.port,
        "settings": json.loads(row.settings),
        "streamSettings": json.loads(row.stream_settings),
    }


def _columns(record: dict, tag: str, now: int) -> dict:
    return {
        "remark": record["remark"],
        "tag": tag,
        "protocol": record["protocol"],
        "listen": record["listen"],
        "port": record["port"],
        "enable": record["enable"],
        "expiry_time": record["expiryTime"],
        "total": record["total"],
        "settings": _dump(record["settings"]),
        "stream_settings": _dump(record["streamSettings"]),
        "sniffing": _dump(record["sniffing"]),
        "node_id": record["nodeId"],
        "updated_at": now,
    }


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def generated_tag(listen: str, port: int) -> str:
    """The one rule for a tag the admin left empty: `inbound-PORT` when the inbound listens
    on every address (no listen address, or an unspecified one like 0.0.0.0 or ::),
    `inbound-ADDRESS:PORT` on one address, `inbound-PATH` on a unix socket. Tags stored
    under another form are kept as they are while the inbound's port and address stay."""
    if _is_socket(listen):
        return f"inbound-{_socket_path(listen)}"
    if listen and not ipaddress.ip_address(listen).is_unspecified:
        return f"inbound-{listen}:{port}"
    return f"inbound-{port}"


def _is_socket(listen: str) -> bool:
    return listen.startswith(("/", "@"))


def _socket_path(listen: str) -> str:
    """A unix socket listen address without the core's ",mode" suffix."""
    return listen.split(",", 1)[0]
