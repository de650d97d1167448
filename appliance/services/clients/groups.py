"""Client groups: labels on clients, plus persisted names so an empty group can exist.

A group's name is stored on each client (`group_name`) so filtering a page by group is
one indexed comparison. The `client_group` table keeps the names users created, even
with no client in them yet; the list is the union of both, sorted case-insensitively.

Names compare case-insensitively, like emails (`NFKC(name).casefold()`), everywhere: a
label set on a client as "VIP" belongs to the persisted group "vip", is counted with it,
renamed and deleted with it, and putting clients in "Vip" files them under the spelling
the group already has. The comparison runs in Python over the distinct labels (few, and
read from the index on `group_name`), so every backend applies the same rule.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from pony.orm import db_session, select

from appliance.domain.client_rules import check_group, email_key
from appliance.domain.parse import parse_emails
from appliance.errors import ServiceError
from appliance.store import client_group_sql
from appliance.store.client_group_sql import label_counts

group_key = email_key


class Groups:
    def __init__(self, store):
        self.store = store

    def list(self) -> list[dict]:
        with db_session:
            counts = label_counts(self.store)
            stored = {
                email_key(name): name for name in client_group_sql.saved_group_names(self.store)
            }
        groups: dict[str, dict] = {
            key: {"name": name, "clientCount": 0} for key, name in stored.items()
        }
        # Most-used spelling first, so a group known only from labels shows that one.
        for label, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            group = groups.setdefault(group_key(label), {"name": label, "clientCount": 0})
            group["clientCount"] += count
        return sorted(groups.values(), key=lambda g: (g["name"].casefold(), g["name"]))

    def emails(self, name: Any) -> list[str]:
        name = _name(name, "name")
        with db_session:
            labels = labels_of(self.store, name)
            if not labels:
                return []
            return client_group_sql.emails_labelled(self.store, labels)

    def create(self, body: Any) -> dict:
        name = _new_name(_field(body, "name"), "name")
        with db_session:
            existing = self._spelling(name)
            if existing is not None:
                raise ServiceError(f"group '{existing}' already exists")
            self.store.entities.ClientGroup(name=name, name_key=group_key(name))
        return {"name": name}

    def rename(self, body: Any) -> dict:
        old = _name(_field(body, "oldName"), "oldName")
        new = _new_name(_field(body, "newName"), "newName")
        with db_session:
            if self._spelling(old) is None:
                raise ServiceError(f"no group named '{old}'")
            if group_key(old) != group_key(new):
                taken = self._spelling(new)
                if taken is not None:
                    raise ServiceError(f"group '{taken}' already exists")
            stored = self.store.entities.ClientGroup.get(name_key=group_key(old))
            if stored is not None:
                stored.set(name=new, name_key=group_key(new))
            return {"affected": self._relabel(labels_of(self.store, old), new)}

    def delete(self, body: Any) -> dict:
        name = _name(_field(body, "name"), "name")
        with db_session:
            if self._spelling(name) is None:
                raise ServiceError(f"no group named '{name}'")
            key = group_key(name)
            select(g for g in self.store.entities.ClientGroup if g.name_key == key).delete(
                bulk=True
            )
            return {"affected": self._relabel(labels_of(self.store, name), "")}

    def bulk_add(self, body: Any) -> dict:
        emails = parse_emails(body)
        name = _new_name(_field(body, "group"), "group")
        with db_session:
            name = self._spelling(name) or name
            if self.store.entities.ClientGroup.get(name_key=group_key(name)) is None:
                self.store.entities.ClientGroup(name=name, name_key=group_key(name))
            return {"affected": self._label(emails, name)}

    def bulk_remove(self, body: Any) -> dict:
        emails = parse_emails(body)
        with db_session:
            return {"affected": self._label(emails, "")}

    def _label(self, emails: list[str], name: str) -> int:
        affected = 0
        for email in emails:
            row = self.store.entities.Client.get(email_key=email_key(email))
            if row is not None and row.group_name != name:
                row.group_name = name
                affected += 1
        return affected

    def _relabel(self, labels: list[str], name: str) -> int:
        if not labels:
            return 0
        return client_group_sql.relabel(self.store, labels, name)

    def _spelling(self, name: str) -> str | None:
        """How an existing group with this name is spelled (persisted name first, then
        the most used label), or None when there is no such group."""
        stored = self.store.entities.ClientGroup.get(name_key=group_key(name))
        if stored is not None:
            return stored.name
        counts = label_counts(self.store)
        labels = sorted(labels_of(self.store, name), key=lambda label: (-counts[label], label))
        return labels[0] if labels else None


def labels_of(store, name: str) -> list[str]:
    """The labels on clients that name this group, in any case or Unicode form."""
    key = group_key(name)
    return sorted(label for label in label_counts(store) if group_key(label) == key)


def _field(body: Any, key: str) -> Any:
    if not isinstance(body, dict):
        raise ServiceError("send a JSON object")
    return body.get(key)


def _name(value: Any, field: str) -> str:
    name = check_group(value, field)
    if not name:
        raise ServiceError(f"{field} is required")
    return name


def _new_name(value: Any, field: str) -> str:
    """A name a group may be given: it must also be addressable as groups/:name/emails."""
    name = _name(value, field)
    if "/" in name or any(unicodedata.category(c)[0] == "C" for c in name):
        raise ServiceError(f"{field} may not contain '/' or control characters")
    return name
