"""Client groups: labels on clients, plus persisted names so an empty group can exist.

A group's name is stored on each client (`group_name`) so filtering a page by group is
one indexed comparison. The `client_group` table keeps the names users created, even
with no client in them yet; the list is the union of both, sorted case-insensitively.
Names compare case-insensitively for uniqueness, like emails.
"""

from __future__ import annotations

from typing import Any

from pony.orm import db_session, select

from appliance.services.client_rules import check_group, email_key
from appliance.services.errors import ServiceError
from appliance.services.parse import parse_emails


class Groups:
    def __init__(self, store):
        self.store = store

    def list(self) -> list[dict]:
        with db_session:
            counts = dict(
                self.store.rows(
                    "SELECT group_name, COUNT(*) FROM client WHERE group_name <> '' "
                    "GROUP BY group_name"
                )
            )
            names = {name: int(count) for name, count in counts.items()}
            for (name,) in self.store.rows("SELECT name FROM client_group"):
                names.setdefault(name, 0)
        return [
            {"name": name, "clientCount": names[name]}
            for name in sorted(names, key=lambda n: (n.casefold(), n))
        ]

    def emails(self, name: Any) -> list[str]:
        name = _name(name, "name")
        with db_session:
            return [
                row[0]
                for row in self.store.rows(
                    "SELECT email FROM client WHERE group_name = ? ORDER BY email_key", [name]
                )
            ]

    def create(self, body: Any) -> dict:
        name = _name(_field(body, "name"), "name")
        with db_session:
            if self._exists(name):
                raise ServiceError(f"group '{name}' already exists")
            self.store.ClientGroup(name=name, name_key=email_key(name))
        return {"name": name}

    def rename(self, body: Any) -> dict:
        old = _name(_field(body, "oldName"), "oldName")
        new = _name(_field(body, "newName"), "newName")
        with db_session:
            if not self._exists(old):
                raise ServiceError(f"no group named '{old}'")
            if email_key(old) != email_key(new) and self._exists(new):
                raise ServiceError(f"group '{new}' already exists")
            stored = self.store.ClientGroup.get(name_key=email_key(old))
            if stored is not None:
                stored.set(name=new, name_key=email_key(new))
            affected = self.store.execute(
                "UPDATE client SET group_name = ? WHERE group_name = ?", [new, old]
            )
        return {"affected": affected}

    def delete(self, body: Any) -> dict:
        name = _name(_field(body, "name"), "name")
        with db_session:
            if not self._exists(name):
                raise ServiceError(f"no group named '{name}'")
            select(g for g in self.store.ClientGroup if g.name_key == email_key(name)).delete(
                bulk=True
            )
            affected = self.store.execute(
                "UPDATE client SET group_name = '' WHERE group_name = ?", [name]
            )
        return {"affected": affected}

    def bulk_add(self, body: Any) -> dict:
        emails = parse_emails(body)
        name = _name(_field(body, "group"), "group")
        with db_session:
            if self.store.ClientGroup.get(name_key=email_key(name)) is None:
                self.store.ClientGroup(name=name, name_key=email_key(name))
            return {"affected": self._label(emails, name)}

    def bulk_remove(self, body: Any) -> dict:
        emails = parse_emails(body)
        with db_session:
            return {"affected": self._label(emails, "")}

    def _label(self, emails: list[str], name: str) -> int:
        affected = 0
        for email in emails:
            row = self.store.Client.get(email_key=email_key(email))
            if row is not None and row.group_name != name:
                row.group_name = name
                affected += 1
        return affected

    def _exists(self, name: str) -> bool:
        if self.store.ClientGroup.get(name_key=email_key(name)) is not None:
            return True
        return bool(self.store.rows("SELECT 1 FROM client WHERE group_name = ? LIMIT 1", [name]))


def _field(body: Any, key: str) -> Any:
    if not isinstance(body, dict):
        raise ServiceError("send a JSON object")
    return body.get(key)


def _name(value: Any, field: str) -> str:
    name = check_group(value, field)
    if not name:
        raise ServiceError(f"{field} is required")
    return name
