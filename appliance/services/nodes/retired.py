"""Retired tags: inbounds this panel no longer wants on a node that could not be told.

An inbound deleted, moved to another place or renamed here while its node was offline
(or could not be reached) still runs there under its old tag. Its tag is kept here, per
node, with the tag it was renamed to ("" when it is gone), in the `nodeRetiredTags`
internal setting, so it survives a restart of this panel; the node's next reconcile
deletes that inbound there, or renames it, keeping the same node inbound and its clients,
and then forgets the tag. These tags are also the only inbounds not bound here that a
reconcile may change on a node: one an admin made there by hand is never touched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

KEY = "nodeRetiredTags"


class RetiredTags:
    def __init__(self, settings):
        self.settings = settings

    def of(self, node_id: int) -> dict[str, str]:
        """{retired tag: the tag it was renamed to, or ""} of one node."""
        return dict(self._all().get(str(node_id), {}))

    def add(self, node_id: int, tag: str, successor: str = "") -> None:
        """Retire `tag` on the node, renamed to `successor` (or gone). A tag renamed
        twice while the node is away is renamed once, to the last name."""
        retired = self._all()
        tags = retired.setdefault(str(node_id), {})
        for old, new in list(tags.items()):
            if new == tag:
                tags[old] = successor
        tags[tag] = successor
        for old, new in list(tags.items()):
            if old == new:
                del tags[old]
        self._write(retired)

    def done(self, node_id: int, tags: dict[str, str]) -> None:
        """Forget the retired `tags` a reconcile carried out (unless changed since)."""
        if not tags:
            return
        retired = self._all()
        left = {
            old: new for old, new in retired.get(str(node_id), {}).items() if tags.get(old) != new
        }
        if left:
            retired[str(node_id)] = left
        else:
            retired.pop(str(node_id), None)
        self._write(retired)

    def keep_only(self, node_ids: Iterable[int]) -> None:
        """Forget the tags of nodes deleted since: nothing is deployed there any more."""
        retired = self._all()
        existing = {str(node_id) for node_id in node_ids}
        if set(retired) - existing:
            self._write({k: v for k, v in retired.items() if k in existing})

    def _all(self) -> dict[str, dict[str, str]]:
        try:
            value = json.loads(self.settings.internal(KEY) or "{}")
        except ValueError:
            return {}
        if not isinstance(value, dict):
            return {}
        return {k: v for k, v in value.items() if isinstance(v, dict)}

    def _write(self, retired: dict) -> None:
        self.settings.set_internal(KEY, json.dumps(retired))
