"""Deploying to nodes: inbounds bound to a node and their clients run there, not here.

An inbound save (add, update, enable, delete) is applied on its node through the node's
own inbound API inside the save's transaction, before it writes anything: a node that
refuses (a port in use there, its core refusing the config) fails the save with the
node's words and nothing changes here, and no write of the panel waits for the node's
answer. A save that fails here after the node took it is undone there by a reconcile
(`save_failed`). Client changes are pushed once they are committed, as the change notice
delivers them: a change that names its clients (`Change("clients", emails)`) costs those
clients' work on the nodes that hold or should hold them; any other (bulk operations, an
inbound's clients) compares each node's client list with what it should hold and sends
the differences in batches (`bulkCreate`, `bulkDel`, `bulkAttach`, `bulkDetach`).

A node that is offline, disabled or cannot be reached misses nothing: it is marked dirty
(`node.dirty`, kept in the database) and reconciled (`reconcile`) as soon as the heartbeat
sees it online again, at panel start, and after it is re-enabled. A reconcile replays the
whole wanted state: inbounds by tag, clients by email, each adopted when the node already
has it (updated, never an error).

What the central panel owns on a node, and so may change or delete there:
- the inbounds whose node-side tag is that of an inbound bound to the node here, and
  those whose tag was that of an inbound deleted, moved away or renamed here while the
  node could not be told (`retired`), until a reconcile deleted or renamed them there.
  Any other inbound on the node (one an admin made there by hand) is never touched;
- the clients attached to those inbounds: a node client on them whose email no central
  client attached there has is detached from them, and deleted when it is then attached
  to nothing on the node. Clients on the node's own inbounds alone are never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from urllib.parse import quote

import gevent
from gevent.lock import RLock
from pony.orm import db_session

from appliance.errors import ServiceError
from appliance.runtime.changes import Change
from appliance.services.nodes.health import NodeHealth
from appliance.services.nodes.link import Details, Identity, NodeError, NodeLink
from appliance.services.nodes.records import Nodes, details
from appliance.services.nodes.retired import RetiredTags
from appliance.services.nodes.wanted import (
    bare_tag,
    keys_of,
    node_clients,
    node_inbound,
    node_inbounds,
    node_tags,
    same_client,
    same_inbound,
)
from appliance.store import node_sql

log = logging.getLogger(__name__)

INBOUNDS = "/panel/api/inbounds"
CLIENTS = "/panel/api/clients"
BATCH = 1000
# Up to this many changed clients are updated one by one (their connections stay up);
# more are replaced in batches.
ONE_BY_ONE = 100
# Emails one push takes client by client; more, and comparing the node's list is cheaper.
CLIENTS_AT_ONCE = 50
NO_CLIENT = "no client with email"
# Statuses in which a node is called at once; any other waits for a reconcile.
CALLABLE = ("online", "unknown")


class Unreached(Exception):
    """A node that could not be told of a change: it is marked dirty."""


class NodeDeploy:
    def __init__(
        self,
        store,
        nodes: Nodes,
        health: NodeHealth,
        identity: Callable[[], Identity],
        settings,
    ):
        self.store = store
        self.nodes = nodes
        self.health = health
        self.identity = identity
        self.retired = RetiredTags(settings)
        self._locks: dict[int, RLock] = {}
        # Nodes whose clients are known to be as wanted since their last reconcile; the
        # email keys each holds of this panel's clients.
        self._held: dict[int, set[str]] = {}
        self._bound: set[int] | None = None  # ids of the nodes inbounds are bound to
        self._any_nodes: bool | None = None  # whether any node exists; None: read it
        self._errors: dict[int, str] = {}  # why the last push to a node failed
        # How often each node was marked dirty: a reconcile clears the flag only when no
        # mark came while it ran.
        self._marked: dict[int, int] = {}
        # How each node was reached at its last reconcile: a record pointed elsewhere is
        # reconciled anew.
        self._where: dict[int, Details] = {}
        # Each node's inbound ids by tag, kept between client pushes (see _inbound_ids).
        self._ids: dict[int, dict[str, int]] = {}

    # ---- what the views show ---------------------------------------------------------

    def marks(self, node_ids: Iterable[int]) -> dict[int, dict]:
        """For each node id: `nodeStatus` (the heartbeat's word, `deleted` for a node
        that no longer exists), `nodeOutOfStep` (changes not yet applied there) and
        `nodeError` (why the last push failed, "" when it did not)."""
        ids = sorted(set(node_ids))
        if not ids:
            return {}
        with db_session:
            dirty = node_sql.dirty_flags(self.store, ids)
        found = {}
        for node_id in ids:
            if node_id not in dirty:
                found[node_id] = {"nodeStatus": "deleted", "nodeOutOfStep": True, "nodeError": ""}
                continue
            found[node_id] = {
                "nodeStatus": self.health.snapshot(node_id)["status"],
                "nodeOutOfStep": bool(dirty[node_id]),
                "nodeError": self._errors.get(node_id, ""),
            }
        return found

    def forget_bound(self, nodes_changed: bool = False) -> None:
        """Inbounds (or nodes) changed: which nodes have inbounds (and whether there are
        nodes at all) is read again when needed. A panel without nodes reads nothing."""
        self._bound = None
        if nodes_changed:
            self._any_nodes = None

    # ---- inbounds: inside the save's transaction --------------------------------------

    def inbound_saved(self, before: tuple[int | None, str] | None, after: dict | None) -> None:
        """Apply an inbound save on its node(s): `before` is (node id, tag) of the stored
        inbound before the save (None for a new one), `after` its record as saved (None
        when deleted). Called inside the save's transaction before it writes: a node's
        refusal raises and refuses the save; a node that cannot be told is marked dirty."""
        old_node, old_tag = before if before is not None else (None, "")
        new_node = after["nodeId"] if after is not None else None
        if old_node is not None and old_node == new_node:
            applied = self._put_inbound(new_node, bare_tag(old_tag), after)
            if not applied and bare_tag(old_tag) != bare_tag(after["tag"]):
                self._retire(new_node, bare_tag(old_tag), bare_tag(after["tag"]))
            return
        if old_node is not None:
            self._drop_inbound(old_node, bare_tag(old_tag))
        if new_node is not None:
            self._put_inbound(new_node, bare_tag(after["tag"]), after)

    def save_failed(self, before: tuple[int | None, str] | None, after: dict | None) -> None:
        """A save that `inbound_saved` applied on a node failed here afterwards: the node
        is reconciled back to what is stored here. An inbound it added (or renamed) there
        is retired, so the reconcile deletes it (or renames it back). Runs once the failed
        transaction has gone, since what it writes must stay."""
        old_node, old_tag = before if before is not None else (None, "")
        new_node = after["nodeId"] if after is not None else None

        def mark() -> None:
            if new_node is not None:
                new_tag = bare_tag(after["tag"])
                if old_node != new_node:
                    self._retire(new_node, new_tag)
                elif bare_tag(old_tag) != new_tag:
                    self._retire(new_node, new_tag, bare_tag(old_tag))
                else:
                    self._mark(new_node)
            if old_node is not None and old_node != new_node:
                self._mark(old_node)

        gevent.spawn(mark)

    def _put_inbound(self, node_id: int, old_tag: str, record: dict) -> bool:
        """Add or update the node's inbound (found by its old tag, else its new one);
        False when the node could not be told."""
        body = node_inbound(record)
        try:
            with self._lock(node_id):
                self._ids.pop(node_id, None)
                link = self._link(node_id)
                ids = self._inbound_ids(link)
                found = ids.get(old_tag, ids.get(body["tag"]))
                if found is None:
                    link.call("POST", f"{INBOUNDS}/add", body)
                else:
                    link.call("POST", f"{INBOUNDS}/update/{found}", body)
            return True
        except Unreached:
            self._mark(node_id)
        except NodeError as exc:
            if exc.reached:
                raise ServiceError(exc.msg) from None
            self._mark(node_id, exc.msg)
        return False

    def _drop_inbound(self, node_id: int, tag: str) -> None:
        try:
            with self._lock(node_id):
                self._ids.pop(node_id, None)
                link = self._link(node_id)
                found = self._inbound_ids(link).get(tag)
                if found is not None:
                    link.call("POST", f"{INBOUNDS}/del/{found}")
        except Unreached:
            self._retire(node_id, tag)
        except NodeError as exc:
            if not exc.reached:
                self._retire(node_id, tag)
                self._mark(node_id, exc.msg)
                return
            raise ServiceError(exc.msg) from None

    # ---- clients: after the change committed ------------------------------------------

    def clients_changed(self, emails: Iterable[str] | None) -> None:
        """Push a committed client change to the nodes: the clients of `emails` alone, or
        (None) every client of every node, compared with what each holds. Never raises:
        a node that cannot take the change is marked dirty and reconciled later."""
        if emails is not None:
            emails = set(emails)
            if not emails:
                return
        bound = self._bound_nodes()
        if not bound and not any(self._held.values()):
            return
        nodes = bound | {n for n, held in self._held.items() if held}
        wanted: dict[int, dict] = {}
        if emails is not None:
            keys = keys_of(emails)
            with db_session:
                wanted = node_clients(self.store, None, keys)
            nodes = {
                n for n in nodes if n in wanted or not self._held.get(n, set()).isdisjoint(keys)
            } | (nodes - set(self._held))
        for node_id in sorted(nodes):
            try:
                if node_id not in self._held:
                    # Not in step since it came online: replayed whole, unless a replay
                    # just failed there (the heartbeat retries it, not every request).
                    if node_id in self._errors:
                        raise Unreached
                    self.reconcile(node_id)
                    continue
                with self._lock(node_id):
                    if node_id not in self._held:
                        raise Unreached
                    link = self._link(node_id)
                    if emails is None or len(emails) > CLIENTS_AT_ONCE:
                        self._sync_clients(node_id, link)
                    else:
                        self._push_clients(node_id, link, emails, wanted.get(node_id, {}))
            except Unreached:
                self._mark(node_id)
            except NodeError as exc:
                self._mark(node_id, exc.msg)
            except Exception:
                log.exception("pushing clients to node %s failed", node_id)
                self._mark(node_id, "pushing clients failed; the panel log has the details")

    def _push_clients(self, node_id: int, link: NodeLink, emails: set[str], wanted: dict) -> None:
        """The clients of `emails` as they should be on the node (`wanted`, by email key):
        each read from the node and changed there where it differs."""
        keys = {key: email for email in emails for key in keys_of([email])}
        with db_session:
            tags = node_tags(self.store, node_id)
        held = self._held[node_id]
        ids = self._inbound_ids(link, node_id)
        needed = set().union(*(want_tags for _, want_tags in wanted.values()))
        if not needed <= set(ids):
            self._ids.pop(node_id, None)
            ids = self._inbound_ids(link, node_id)
            if not needed <= set(ids):
                lacking = ", ".join(sorted(needed - set(ids)))
                raise NodeError(f"{link.details.label} has no inbound {lacking}", reached=True)
        owned = {ids[tag] for tag in tags if tag in ids}
        for key, email in sorted(keys.items()):
            if key not in wanted and key not in held:
                continue
            current = self._node_client(link, email)
            if key in wanted:
                payload, want_tags = wanted[key]
                want = {ids[tag] for tag in want_tags if tag in ids}
                self._put_client(link, payload, want, owned, current)
                held.add(key)
            else:
                if current is not None:
                    self._remove_client(link, current, owned)
                held.discard(key)

    def _node_client(self, link: NodeLink, email: str) -> dict | None:
        try:
            found = link.call("GET", f"{CLIENTS}/get/{quote(email, safe='')}")
        except NodeError as exc:
            if exc.reached and NO_CLIENT in exc.msg:
                return None
            raise
        client = dict(found["client"])
        client["inboundIds"] = list(found.get("inboundIds") or [])
        return client

    def _put_client(
        self, link: NodeLink, payload: dict, want: set[int], owned: set[int], current
    ) -> None:
        email = quote(payload["email"], safe="")
        if current is None:
            if want:
                link.call("POST", f"{CLIENTS}/add", {"client": payload, "inboundIds": sorted(want)})
            return
        if not same_client(payload, current):
            link.call("POST", f"{CLIENTS}/update/{email}", payload)
        have = set(current["inboundIds"])
        if want - have:
            link.call("POST", f"{CLIENTS}/{email}/attach", {"inboundIds": sorted(want - have)})
        extra = (have & owned) - want
        if extra:
            link.call("POST", f"{CLIENTS}/{email}/detach", {"inboundIds": sorted(extra)})

    def _remove_client(self, link: NodeLink, current: dict, owned: set[int]) -> None:
        email = quote(current["email"], safe="")
        have = set(current["inboundIds"])
        if have <= owned:
            link.call("POST", f"{CLIENTS}/del/{email}")
        elif have & owned:
            link.call("POST", f"{CLIENTS}/{email}/detach", {"inboundIds": sorted(have & owned)})

    # ---- reconcile ----------------------------------------------------------------------

    def catch_up(self) -> None:
        """The heartbeat's follow-up: reconcile every enabled online node that is dirty,
        not reconciled since it came online (or since this panel started), or whose
        record now points elsewhere (another address, port, path or token)."""
        self._bound_nodes()
        if not self._any_nodes:
            return
        records = self.nodes.rows()
        self.retired.keep_only(r["id"] for r in records)
        for record in records:
            node_id = record["id"]
            where = details(record)
            if self._where.get(node_id) != where:
                self._where[node_id] = where
                self._held.pop(node_id, None)
            if self.health.snapshot(node_id)["status"] != "online":
                self._held.pop(node_id, None)
                continue
            if record["enable"] and (record["outOfStep"] or node_id not in self._held):
                gevent.spawn(self._reconcile_quietly, node_id)

    def status_changed(self, change: Change) -> None:
        """The heartbeat saw nodes change status: one back online is reconciled now."""
        for node_id in change.ids or ():
            if not self.health.online(node_id):
                self._held.pop(node_id, None)
                continue
            gevent.spawn(self._reconcile_quietly, node_id)

    def _reconcile_quietly(self, node_id: int) -> None:
        lock = self._lock(node_id)
        if lock.locked():
            return
        try:
            self.reconcile(node_id)
        except (NodeError, Unreached) as exc:
            message = getattr(exc, "msg", "") or "unreachable"
            if self._errors.get(node_id) != message:
                log.warning("node %s is out of step: %s", node_id, message)
            self._mark(node_id, message)
        except Exception:
            log.exception("reconciling node %s failed", node_id)

    def reconcile(self, node_id: int) -> None:
        """Make node `node_id` hold what it should: its inbounds, retired tags deleted,
        and its clients, compared with its lists and changed in batches.

        The database is written only once the node's lock is released: an inbound save
        waits for that lock while holding its transaction, so writing under the lock could
        wait for that save forever. A node marked dirty meanwhile stays dirty."""
        marked = self._marked.get(node_id, 0)
        with self._lock(node_id):
            self._ids.pop(node_id, None)
            link = self._link(node_id)
            with db_session:
                wanted = node_inbounds(self.store, node_id)
            retired = self.retired.of(node_id)
            listed = link.call("GET", f"{INBOUNDS}/list/slim") or []
            by_tag = {row.get("tag"): row for row in listed if isinstance(row, dict)}
            # A rename made while the node could not be told: the same inbound there, with
            # its clients, under the new tag.
            for old, new in retired.items():
                if new in wanted and new not in by_tag and old not in wanted and old in by_tag:
                    found = by_tag.pop(old)["id"]
                    link.call("POST", f"{INBOUNDS}/update/{found}", wanted[new])
                    by_tag[new] = {**wanted[new], "id": found}
            for tag, body in wanted.items():
                row = by_tag.get(tag)
                if row is not None and not same_inbound(body, row):
                    link.call("POST", f"{INBOUNDS}/update/{row['id']}", body)
            retiring = {by_tag[t]["id"] for t in retired if t not in wanted and t in by_tag}
            self._held[node_id] = set()
            # Clients before the retired inbounds go: those on them alone are deleted while
            # the node can still say who is on them. Missing inbounds come after (one may
            # take the port of a retired one), and their clients with a second pass.
            self._sync_clients(node_id, link, retiring)
            for inbound_id in sorted(retiring):
                link.call("POST", f"{INBOUNDS}/del/{inbound_id}")
            missing = [body for tag, body in wanted.items() if tag not in by_tag]
            for body in missing:
                link.call("POST", f"{INBOUNDS}/add", body)
            self._ids.pop(node_id, None)
            if missing:
                self._sync_clients(node_id, link)
        self.retired.done(node_id, retired)
        self.nodes.set_dirty([node_id], False)
        if self._marked.get(node_id, 0) != marked:
            self.nodes.set_dirty([node_id], True)
            return
        self._errors.pop(node_id, None)
        log.info("node %s is in step", node_id)

    def _sync_clients(self, node_id: int, link: NodeLink, retiring: set[int] = frozenset()) -> None:
        """Compare the node's clients with the wanted ones and send the differences;
        `retiring`: ids of node inbounds about to be deleted, which no client keeps."""
        with db_session:
            wanted = node_clients(self.store, node_id).get(node_id, {})
            tags = node_tags(self.store, node_id)
        ids = self._inbound_ids(link)
        owned = {ids[tag] for tag in tags if tag in ids} | retiring
        listed = link.call("GET", f"{CLIENTS}/list") or []
        current = {keys_of([c["email"]])[0]: c for c in listed if isinstance(c, dict)}
        create, changed, attach, detach, remove = [], [], {}, {}, []
        for key, (payload, want_tags) in wanted.items():
            want = {ids[tag] for tag in want_tags if tag in ids}
            have = current.get(key)
            if have is None:
                if want:
                    create.append({"client": payload, "inboundIds": sorted(want)})
                continue
            if not same_client(payload, have):
                changed.append((payload, want))
                continue
            ids_held = set(have.get("inboundIds") or [])
            if want - ids_held:
                attach.setdefault(tuple(sorted(want - ids_held)), []).append(payload["email"])
            if (ids_held & owned) - want:
                extra = tuple(sorted((ids_held & owned) - want))
                detach.setdefault(extra, []).append(payload["email"])
        for key, have in current.items():
            ids_held = set(have.get("inboundIds") or [])
            if key in wanted or not ids_held & owned:
                continue
            if ids_held <= owned:
                remove.append(have["email"])
            else:
                detach.setdefault(tuple(sorted(ids_held & owned)), []).append(have["email"])
        self._send_changed(link, changed, current, owned)
        self._batches(link, "bulkDel", remove, lambda part: {"emails": part, "keepTraffic": False})
        for inbound_ids, emails in detach.items():
            self._batches(
                link, "bulkDetach", emails, lambda p, i=inbound_ids: {"emails": p, "inboundIds": i}
            )
        self._batches(link, "bulkCreate", create, lambda part: part)
        for inbound_ids, emails in attach.items():
            self._batches(
                link, "bulkAttach", emails, lambda p, i=inbound_ids: {"emails": p, "inboundIds": i}
            )
        self._held[node_id] = set(wanted)

    def _send_changed(self, link: NodeLink, changed: list, current: dict, owned: set[int]) -> None:
        """Clients whose fields differ: updated one by one when few (their connections
        stay up), else replaced in batches, their node-side counters kept."""
        if len(changed) <= ONE_BY_ONE:
            for payload, want in changed:
                held = current[keys_of([payload["email"]])[0]]
                held = {**held, "inboundIds": held.get("inboundIds") or []}
                self._put_client(link, payload, want, owned, held)
            return
        emails = [payload["email"] for payload, _ in changed]
        self._batches(link, "bulkDel", emails, lambda part: {"emails": part, "keepTraffic": True})
        items = [{"client": payload, "inboundIds": sorted(want)} for payload, want in changed]
        self._batches(link, "bulkCreate", items, lambda part: part)

    def _batches(self, link: NodeLink, route: str, items: list, body) -> None:
        for start in range(0, len(items), BATCH):
            answer = link.call("POST", f"{CLIENTS}/{route}", body(items[start : start + BATCH]))
            answer = answer if isinstance(answer, dict) else {}
            # bulkAttach and bulkDetach skip pairs already as asked; the others skip failures.
            failed = answer.get("errors") or (
                answer.get("skipped") if route in ("bulkCreate", "bulkDel") else None
            )
            if failed:
                first = failed[0]
                reason = first.get("reason") if isinstance(first, dict) else str(first)
                raise NodeError(
                    f"{link.details.label} did not take every client of {route}: {reason}",
                    reached=True,
                )

    # ---- the pieces ----------------------------------------------------------------------

    def _lock(self, node_id: int) -> RLock:
        return self._locks.setdefault(node_id, RLock())

    def _link(self, node_id: int) -> NodeLink:
        """The link to an enabled node the heartbeat does not know to be down."""
        try:
            record = self.nodes.stored(node_id)
        except ServiceError:
            raise Unreached from None
        if not record["enable"]:
            raise Unreached
        if self.health.snapshot(node_id)["status"] not in CALLABLE:
            raise Unreached
        return NodeLink(details(record), self.identity())

    def _inbound_ids(self, link: NodeLink, node_id: int | None = None) -> dict[str, int]:
        """The node's inbound ids by tag: read from the node, or (with `node_id`) as read
        since this panel last changed its inbounds. A stale id (an inbound an admin
        replaced on the node) fails the push, and the reconcile that follows reads anew."""
        if node_id is not None and node_id in self._ids:
            return self._ids[node_id]
        rows = link.call("GET", f"{INBOUNDS}/options") or []
        ids = {row["tag"]: row["id"] for row in rows if isinstance(row, dict)}
        if node_id is not None:
            self._ids[node_id] = ids
        return ids

    def _bound_nodes(self) -> set[int]:
        if self._any_nodes is None:
            with db_session:
                self._any_nodes = self.store.entities.Node.select().exists()
        if not self._any_nodes:
            return set()
        if self._bound is None:
            with db_session:
                self._bound = node_sql.bound_node_ids(self.store)
        return self._bound

    def _mark(self, node_id: int, reason: str = "") -> None:
        """A node that missed a change: dirty until a reconcile brings it in step. Never
        called under the node's lock (see `reconcile`)."""
        self._marked[node_id] = self._marked.get(node_id, 0) + 1
        self._ids.pop(node_id, None)
        if reason:
            self._errors[node_id] = reason
        self._held.pop(node_id, None)
        if self.nodes.exists(node_id):
            self.nodes.set_dirty([node_id], True)

    def _retire(self, node_id: int, tag: str, successor: str = "") -> None:
        """Keep `tag` as one to delete (or rename to `successor`) on the node at its next
        reconcile, and mark the node."""
        if self.nodes.exists(node_id):
            self.retired.add(node_id, tag, successor)
            self._mark(node_id)
