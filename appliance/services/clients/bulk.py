"""Operations over many clients: bulk create and import, bulk delete, adjust, enable,
attach, detach, traffic resets and the sweeps (depleted, orphans).

Every bulk call is sequential in meaning: items are checked one by one, a bad item is
reported in `skipped`/`errors` with its reason and never aborts the rest, and what
passed is committed in one transaction. Creating thousands of clients inserts rows with
set-based SQL rather than one entity at a time, so 10,000 clients take seconds, not
minutes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gevent.lock import Semaphore
from pony.orm import db_session, select

from appliance.domain import client_rules
from appliance.domain.client_rules import email_key
from appliance.domain.parse import parse_emails, parse_id, parse_json_text
from appliance.domain.protocols import INT64_MAX, to_int
from appliance.errors import ServiceError
from appliance.runtime.jobs import Pace
from appliance.services.clients.records import (
    Clients,
    columns_of,
    enable_event,
    inbound_ids_of,
    secret_taken,
)
from appliance.services.inbounds.views import record_of
from appliance.store import client_bulk_sql
from appliance.store.batches import chunks

DAY_MS = 86_400_000
TRAFFIC_RESET = "client.traffic_reset"
# 10,000 clients are a second or two of work, which every other request would otherwise
# wait for in one piece: each loop breathes at its `Pace`, and rows are inserted this many
# at a time, one statement taking a few milliseconds.
INSERT_STEP = 100


def in_lock_order(emails: list[str]) -> list[str]:
    """`emails` in the order of their keys, the order the traffic tick writes clients'
    rows in: two transactions that lock many of the same rows, each waiting for a row the
    other holds, would end in a deadlock on PostgreSQL and MariaDB."""
    return sorted(emails, key=email_key)


class ClientBulk:
    def __init__(self, clients: Clients, query, master_guid: Callable[[], str] = lambda: ""):
        self.clients = clients
        self.store = clients.store
        self.query = query
        # The guid of the panel managing this one as a node ("" when none): the totals it
        # pushed down decide the quota of the clients it pushed them for.
        self.master_guid = master_guid
        # One bulk creation at a time in this process, the database's only writer: on
        # PostgreSQL and MariaDB a transaction that checked its emails does not keep
        # another from checking the same ones before the first commits.
        self._creating = Semaphore()

    # ---- creation --------------------------------------------------------------------

    def bulk_create(self, items: Any) -> dict:
        if not isinstance(items, list):
            raise ServiceError("send a JSON array of {client, inboundIds}")
        return self._create_many(items, require_inbounds=True, restore=False)

    def import_(self, body: Any) -> dict:
        """`{data}`: the JSON text of an export. Unattached clients come back unattached;
        counters and timestamps come back as exported."""
        data = body.get("data") if isinstance(body, dict) else None
        items = parse_json_text(data, "data", list, "an array of {client, inboundIds}")
        return self._create_many(items, require_inbounds=False, restore=True)

    def _create_many(self, items: list, *, require_inbounds: bool, restore: bool) -> dict:
        skipped: list[dict] = []
        ready: list[tuple[dict, list[int], dict]] = []
        pace = Pace()
        with self._creating, db_session:
            inbounds: dict[int, dict] = {}  # id -> inbound record, read once per bulk call
            # (label, prepared item or its problem, its email key or "")
            prepared: list[tuple[str, Any, str]] = []
            for n, item in enumerate(items):
                pace()
                try:
                    outcome = self._prepare(item, inbounds, require_inbounds, restore)
                except ServiceError as exc:
                    prepared.append((_label(item, n), exc.msg, ""))
                    continue
                prepared.append((_label(item, n), outcome, email_key(outcome[0]["email"])))
            # From here to the commit, one write transaction (and, on every backend, this
            # process's one bulk creation): another bulk call checks its emails only after
            # this one's rows are in, so no two claim the same.
            self.store.begin_write()
            # Which emails exist, in a query per chunk rather than one per item: on a
            # networked database 20,000 round trips took longer than the inserts.
            taken = self._stored_keys([key for _, _, key in prepared if key], pace=pace)
            # MTProto secret -> the client holding it, stored or earlier in this call.
            held = self._secret_holders(
                [outcome[0]["secret"] for _, outcome, key in prepared if key], pace
            )
            for label, outcome, key in prepared:
                pace()
                if isinstance(outcome, str):
                    skipped.append({"email": label, "reason": outcome})
                    continue
                if key in taken:
                    reason = f"email '{outcome[0]['email']}' is already in use"
                    skipped.append({"email": label, "reason": reason})
                    continue
                secret = outcome[0]["secret"]
                if secret in held:
                    skipped.append({"email": label, "reason": secret_taken(secret, held[secret])})
                    continue
                taken.add(key)
                held[secret] = outcome[0]["email"]
                ready.append(outcome)
            self._insert(ready, pace)
            created = [email_key(record["email"]) for record, _, _ in ready]
            self.clients.outbox.raise_stored_clients("client.created", created)
        return {"created": len(ready), "skipped": skipped}

    def _prepare(self, item: Any, inbounds: dict, require_inbounds: bool, restore: bool):
        if not isinstance(item, dict) or not isinstance(item.get("client"), dict):
            raise ServiceError("each item must be {client: {...}, inboundIds: [...]}")
        raw_ids = item.get("inboundIds") or []
        ids = inbound_ids_of({"inboundIds": raw_ids})
        if require_inbounds and not ids:
            raise ServiceError("inboundIds must name at least one inbound")
        missing = [i for i in ids if i not in inbounds]
        for inbound, inbound_id in zip(self.clients.inbound_rows(missing), missing, strict=True):
            inbounds[inbound_id] = record_of(inbound)
        client = item["client"]
        record = client_rules.normalize_client(client, [inbounds[i] for i in ids])
        self.clients.check_flow(record["flow"], [inbounds[i] for i in ids])
        extra = _restored(client) if restore else {}
        if not ids and "method" in extra:
            # No inbound to derive the cipher from: keep the one it was exported with.
            record["method"] = extra["method"]
        return record, ids, extra

    def _insert(self, ready: list[tuple[dict, list[int], dict]], pace: Pace) -> None:
        """Insert prepared records with set-based SQL (the caller holds the session and
        its write transaction), INSERT_STEP at a time with a turn for the other requests
        between statements: readers see the rows at the commit, writers wait for it."""
        now = self.clients.now_ms()
        for start in range(0, len(ready), INSERT_STEP):
            self._insert_step(ready[start : start + INSERT_STEP], now, pace)

    def _insert_step(self, ready: list[tuple[dict, list[int], dict]], now: int, pace: Pace) -> None:
        if not ready:
            return
        pace()
        columns = list(columns_of(ready[0][0]))
        keys = [email_key(record["email"]) for record, _, _ in ready]
        client_bulk_sql.insert_clients(
            self.store,
            columns,
            _paced(
                [
                    (
                        key,
                        *columns_of(record).values(),
                        extra.get("createdAt", now),
                        extra.get("updatedAt", now),
                    )
                    for key, (record, _, extra) in zip(keys, ready, strict=True)
                ],
                pace,
            ),
        )
        self.store.client_writes.note(keys=keys, recount=True)
        pace()
        ids = self._ids_by_key(keys)
        pace()
        client_bulk_sql.insert_attachments(
            self.store,
            _paced(
                [
                    (ids[key], inbound_id)
                    for key, (_, inbound_ids, _) in zip(keys, ready, strict=True)
                    for inbound_id in inbound_ids
                ],
                pace,
            ),
        )
        pace()
        existing = self._stored_keys(keys, "client_traffic")
        pace()
        client_bulk_sql.insert_traffic(
            self.store,
            _paced(
                [
                    (key, r["email"], x.get("up", 0), x.get("down", 0), x.get("enable", True), 0)
                    for key, (r, _, x) in zip(keys, ready, strict=True)
                    if key not in existing
                ],
                pace,
            ),
        )

    def _ids_by_key(self, keys: list[str]) -> dict[str, int]:
        return client_bulk_sql.ids_by_key(self.store, keys)

    def _secret_holders(self, secrets: list[str], pace: Pace) -> dict[str, str]:
        """MTProto secret -> email of the stored client holding it, for these secrets."""
        found: dict[str, str] = {}
        for chunk in chunks(sorted(set(secrets))):
            pace()
            found.update(client_bulk_sql.secret_holders(self.store, list(chunk)))
        return found

    def _stored_keys(
        self, keys: list[str], table: str = "client", pace: Pace | None = None
    ) -> set[str]:
        """Which of these email keys `table` (client or client_traffic) holds."""
        found: set[str] = set()
        for chunk in chunks(keys):
            if pace:
                pace()
            found |= client_bulk_sql.stored_keys(self.store, table, list(chunk))
        return found

    # ---- per-email bulk operations ---------------------------------------------------------

    def bulk_delete(self, body: Any) -> dict:
        emails = in_lock_order(parse_emails(body))
        keep = body.get("keepTraffic", False)
        if not isinstance(keep, bool):
            raise ServiceError("keepTraffic must be true or false")
        deleted, skipped = 0, []
        with db_session:
            for email in emails:
                try:
                    row = self.clients.row(email)
                    self.clients.tell("client.deleted", [row])
                    self.clients.delete_row(row, keep)
                    deleted += 1
                except ServiceError as exc:
                    skipped.append({"email": email, "reason": exc.msg})
        return {"deleted": deleted, "skipped": skipped}

    def bulk_adjust(self, body: Any) -> dict:
        """Add days to expiry and bytes to quota; unlimited fields are left alone. A
        `deviceLimit` given sets that limit on each client."""
        emails = in_lock_order(parse_emails(body))
        days = _signed(body.get("addDays", 0), "addDays")
        extra_bytes = _signed(body.get("addBytes", 0), "addBytes")
        device_limit = body.get("deviceLimit")
        if device_limit is not None:
            device_limit = to_int(device_limit, "deviceLimit", -1, 100_000)
        adjusted, skipped, changed_rows = 0, [], []
        with db_session:
            for email in emails:
                try:
                    row = self.clients.row(email)
                except ServiceError as exc:
                    skipped.append({"email": email, "reason": exc.msg})
                    continue
                changed = False
                if days:
                    if row.expiry_time == 0:
                        skipped.append(
                            {"email": email, "reason": "unlimited expiry; days not added"}
                        )
                    else:
                        changed |= self._shift_expiry(row, days, email, skipped)
                if extra_bytes:
                    if row.total_bytes == 0:
                        skipped.append(
                            {"email": email, "reason": "unlimited traffic; bytes not added"}
                        )
                    elif row.total_bytes + extra_bytes <= 0:
                        skipped.append(
                            {"email": email, "reason": "the quota would drop to zero or below"}
                        )
                    elif row.total_bytes + extra_bytes > INT64_MAX:
                        skipped.append({"email": email, "reason": "the quota would overflow"})
                    else:
                        row.total_bytes += extra_bytes
                        changed = True
                if device_limit is not None and row.device_limit != device_limit:
                    row.device_limit = device_limit
                    changed = True
                if changed:
                    row.updated_at = self.clients.now_ms()
                    adjusted += 1
                    changed_rows.append(row)
            self.clients.tell("client.modified", changed_rows)
        return {"adjusted": adjusted, "skipped": skipped}

    def _shift_expiry(self, row, days: int, email: str, skipped: list) -> bool:
        delta = days * DAY_MS
        if row.expiry_time < 0:  # not started yet: the duration is stored negative
            new = row.expiry_time - delta
            if new >= 0:
                skipped.append({"email": email, "reason": "the duration would drop to zero"})
                return False
        else:
            new = row.expiry_time + delta
            if new <= 0:
                skipped.append({"email": email, "reason": "the expiry would fall before 1970"})
                return False
        if abs(new) > INT64_MAX:
            skipped.append({"email": email, "reason": "the expiry would overflow"})
            return False
        row.expiry_time = new
        return True

    def bulk_attach(self, body: Any) -> dict:
        """Unknown emails and clients the inbounds cannot take are reported in `errors`,
        clients already on every inbound in `skipped`; an unknown or client-less inbound
        refuses the whole call."""
        emails = parse_emails(body)
        inbound_ids = _some_inbound_ids(body)
        attached, skipped, errors, rows = [], [], [], []
        with db_session:
            inbounds = self.clients.inbound_rows(inbound_ids)
            for email in emails:
                try:
                    row = self.clients.row(email)
                except ServiceError as exc:
                    errors.append(f"{email}: {exc.msg}")
                    continue
                current = {a.inbound.id for a in row.attachments}
                new = [i for i in inbounds if i.id not in current]
                if not new:
                    skipped.append(email)
                    continue
                try:
                    self.clients.refit(row, [a.inbound for a in row.attachments] + new)
                except ServiceError as exc:  # e.g. a key that cannot fit both ciphers
                    errors.append(f"{email}: {exc.msg}")
                    continue
                for inbound in new:
                    self.store.entities.ClientInbound(client=row, inbound=inbound)
                row.updated_at = self.clients.now_ms()
                attached.append(email)
                rows.append(row)
            self.clients.tell("client.modified", rows)
        return {"attached": attached, "skipped": skipped, "errors": errors}

    def bulk_detach(self, body: Any) -> dict:
        emails = parse_emails(body)
        inbound_ids = set(_some_inbound_ids(body))
        detached, skipped, errors, rows = [], [], [], []
        with db_session:
            for email in emails:
                try:
                    row = self.clients.row(email)
                except ServiceError as exc:
                    errors.append(f"{email}: {exc.msg}")
                    continue
                gone = [a for a in row.attachments if a.inbound.id in inbound_ids]
                if not gone:
                    skipped.append(email)
                    continue
                for attachment in gone:
                    attachment.delete()
                row.updated_at = self.clients.now_ms()
                detached.append(email)
                rows.append(row)
            self.clients.tell("client.modified", rows)
        return {"detached": detached, "skipped": skipped, "errors": errors}

    def bulk_reset_traffic(self, body: Any) -> dict:
        emails = in_lock_order(parse_emails(body))
        reset = []
        with db_session:
            for email in emails:
                try:
                    row = self.clients.row(email)
                except ServiceError:
                    continue
                traffic = self.clients.traffic_row(row)
                traffic.up = traffic.down = 0
                traffic.enable = True
                row.enable = True
                row.updated_at = self.clients.now_ms()
                reset.append(row)
            self.clients.tell(TRAFFIC_RESET, reset)
        return {"affected": len(reset)}

    def bulk_enable(self, body: Any) -> dict:
        """Switch many clients on or off in one transaction, as the switch of each one's
        own form does; clients already in that state count as done."""
        emails = in_lock_order(parse_emails(body))
        enable = body.get("enable")
        if not isinstance(enable, bool):
            raise ServiceError("enable must be true or false")
        changed, skipped, rows = [], [], []
        with db_session:
            for email in emails:
                try:
                    row = self.clients.row(email)
                except ServiceError as exc:
                    skipped.append({"email": email, "reason": exc.msg})
                    continue
                if row.enable != enable:
                    row.enable = enable
                    row.updated_at = self.clients.now_ms()
                    changed.append(row.email)
                    rows.append(row)
            self.clients.tell(enable_event(enable), rows)
        if changed:
            self.clients.announce(changed)
        return {"affected": len(emails) - len(skipped), "skipped": skipped}

    # ---- whole-table operations -------------------------------------------------------------

    def reset_all_traffics(self) -> int:
        """Zero every counter; quotas and expiry stay. Returns the rows that moved; each
        of their clients raises client.traffic_reset, with its counters at zero."""
        with db_session:
            self.store.client_writes.note(everything=True)
            wanted = self.clients.outbox.wanted_by_any(TRAFFIC_RESET)
            moved = client_bulk_sql.keys_with_traffic(self.store) if wanted else []
            count = client_bulk_sql.reset_all_traffic(self.store)
            self.clients.outbox.raise_stored_clients(TRAFFIC_RESET, moved)
            return count

    def delete_depleted(self) -> int:
        """Delete clients whose expiry passed, and those whose quota is used up unless a
        periodic reset (`reset` days) will give them a fresh quota."""
        with db_session:
            now = self.query.now_ms()
            return self._delete_ids(client_bulk_sql.depleted_for_deletion(self.store, now))

    def renew_due(self) -> list[str]:
        """A client with a reset period (`reset` days, 3x-ui's auto-renew) whose expiry
        passed starts a new period instead of being cut off: its counters go to zero, its
        expiry moves on by whole periods until it lies ahead, and it is enabled again
        (client row and traffic row). Raises client.traffic_reset for each; returns their
        emails. Run by the sweep, before it judges anyone."""
        with db_session:
            now = self.query.now_ms()
            emails = in_lock_order(client_bulk_sql.due_for_renewal(self.store, now))
            renewed = []
            for email in emails:
                row = self.clients.row(email)
                # Read again in the write: another sweep may have renewed it meanwhile.
                if not (row.reset_days > 0 and 0 < row.expiry_time <= now):
                    continue
                period = row.reset_days * DAY_MS
                row.expiry_time += period * ((now - row.expiry_time) // period + 1)
                traffic = self.clients.traffic_row(row)
                traffic.up = traffic.down = 0
                traffic.enable = True
                row.enable = True
                row.updated_at = now
                renewed.append(row)
            self.clients.tell(TRAFFIC_RESET, renewed)
            emails = [row.email for row in renewed]
        if emails:
            self.clients.announce(emails)
        return emails

    def disable_depleted(self) -> list[str]:
        """The invalid-client sweep: clients due for a new period are renewed first
        (`renew_due`); then clients still enabled whose quota is used up or whose expiry
        passed are disabled (client row and traffic row), and the change notice told
        which. Returns their emails.

        On a node, a client its managing panel pushed totals for is judged by those
        totals (`services/nodes/master_traffic.py`), not by this node's share of them."""
        self.renew_due()
        with db_session:
            now = self.query.now_ms()
            rows = client_bulk_sql.depleted_enabled(self.store, now, self.master_guid())
            if rows:
                self.store.begin_write()
                kept = client_bulk_sql.still_enabled(self.store, [row[0] for row in rows])
                rows = [row for row in rows if row[0] in kept]
            for chunk in chunks(rows):
                ids = [row[0] for row in chunk]
                self.store.client_writes.note(ids=ids)
                client_bulk_sql.disable(self.store, ids, [row[2] for row in chunk])
            self._tell_depleted([row[2] for row in rows], now)
            disabled = [row[1] for row in rows]
        if disabled:
            # Those clients alone: the core and the nodes take them, not a full compare.
            self.clients.announce(disabled)
        return disabled

    def _tell_depleted(self, keys: list[str], now: int) -> None:
        """client.expired for the clients the sweep disabled whose expiry passed,
        client.limited for the others (their quota is used up)."""
        outbox = self.clients.outbox
        if not keys or not (
            outbox.wanted_by_any("client.expired") or outbox.wanted_by_any("client.limited")
        ):
            return
        views = outbox.stored_views(keys)
        expired = [view for view in views if 0 < view["expiryTime"] <= now]
        outbox.raise_clients("client.expired", expired)
        outbox.raise_clients("client.limited", [view for view in views if view not in expired])

    def delete_orphans(self) -> int:
        with db_session:
            return self._delete_ids(client_bulk_sql.unattached_ids(self.store))

    def delete_of_inbound(self, inbound_id: Any) -> int:
        """Remove every client from an inbound: clients attached only there are deleted
        with their traffic; clients attached elsewhere too are only detached from it."""
        inbound_id = parse_id(inbound_id, "inbound id")
        with db_session:
            if self.store.entities.Inbound.get(id=inbound_id) is None:
                raise ServiceError(f"no inbound with id {inbound_id}")
            attachments = select(
                a for a in self.store.entities.ClientInbound if a.inbound.id == inbound_id
            )[:]
            for attachment in attachments:
                client = attachment.client
                attachment.delete()
                if client.attachments.is_empty():
                    self.clients.delete_row(client, keep_traffic=False)
            return len(attachments)

    def _delete_ids(self, ids: list[int]) -> int:
        for chunk in chunks(ids):
            self.store.client_writes.note(ids=chunk, recount=True)
            keys = client_bulk_sql.keys_of_ids(self.store, list(chunk))
            client_bulk_sql.delete_clients(self.store, list(chunk))
            if keys:
                self.store.client_writes.note(keys=keys)
                client_bulk_sql.delete_traffic_and_ips(self.store, keys)
        return len(ids)


def _some_inbound_ids(body: Any) -> list[int]:
    inbound_ids = inbound_ids_of(body)
    if not inbound_ids:
        raise ServiceError("inboundIds must name at least one inbound")
    return inbound_ids


def _signed(value: Any, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**53:
        raise ServiceError(f"{name} must be a whole number (negative to subtract)")
    return value


def _paced(rows: list[tuple], pace: Pace) -> Iterable[tuple]:
    """`rows` handed to the driver one at a time with `pace` kept between them: the rows
    of one statement go into indexes SQLite may first have to read from the file, tens of
    milliseconds for a hundred rows when none of their pages is in its cache. No rows stay
    an empty list, which `execute_many` writes nothing for."""
    if not rows:
        return rows
    return _one_at_a_time(rows, pace)


def _one_at_a_time(rows: list[tuple], pace: Pace) -> Iterator[tuple]:
    for row in rows:
        pace()
        yield row


def _label(item: Any, n: int) -> str:
    if isinstance(item, dict) and isinstance(item.get("client"), dict):
        email = item["client"].get("email")
        if isinstance(email, str) and email:
            return email
    return f"item {n}"


def _restored(client: dict) -> dict:
    """Counters and timestamps an export carries, when they are sound."""
    extra: dict = {}
    traffic = client.get("traffic")
    if isinstance(traffic, dict):
        for field in ("up", "down"):
            value = traffic.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
                extra[field] = value
        if isinstance(traffic.get("enable"), bool):
            extra["enable"] = traffic["enable"]
    method = client.get("method")
    if isinstance(method, str) and method and len(method) <= 64:
        extra["method"] = method
    for field in ("createdAt", "updatedAt"):
        value = client.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63:
            extra[field] = value
    return extra
