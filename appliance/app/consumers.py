"""Who follows which change: the subscriptions of the change notice, in one list.

Services publish `Change(resource, ids)` after they commit (runtime/changes.py); this is
where each part that keeps a copy of a resource says which kinds it follows and what it
does with them, one line per part and kind, in the order they are told. A change made by
another panel process on the same database arrives through the same notice and reaches
the same lines, after what reloads the copy this process keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial
from typing import TYPE_CHECKING

import gevent

from appliance.runtime.changes import Change, ChangeNotice, Consumer

if TYPE_CHECKING:
    from appliance.app.panel import Panel

# What a subscription renders: its caches (here and in the sub-workers) follow these.
RENDERED = ("clients", "inbounds", "hosts", "settings", "nodes")
# What the paged client list, the core and the MTProto proxies are built from.
RUN = ("clients", "inbounds", "settings")
# What the browsers are told to read again: every resource an API call may change.
SHOWN = ("clients", "inbounds", "hosts", "settings", "nodes", "apiTokens", "core", "webhooks")


def follow_changes(notice: ChangeNotice, panel: Panel) -> None:
    """Subscribe every consumer of the panel to the kinds of change it follows."""
    follow = notice.subscribe
    # Another instance on the database changed settings: read them again before anyone
    # below reads them.
    notice.subscribe_arrived("settings", whichever(panel.settings.load))
    deploy, core = panel.deploy, panel.core
    for resource in RENDERED:
        follow(resource, by_resource(panel.subscriptions.invalidate))
        follow(resource, panel.count_change)
    follow("inbounds", whichever(deploy.forget_bound))
    follow("nodes", whichever(partial(deploy.forget_bound, nodes_changed=True)))
    # A node enabled again or pointed elsewhere is reconciled now, not at the next beat.
    follow("nodes", whichever(partial(gevent.spawn, deploy.catch_up)))
    for resource in RUN:
        follow(resource, whichever(panel.client_query.invalidate))
    # Clients named are taken one by one; anything else is compared whole.
    follow("clients", by_ids(core.mark_dirty))
    follow("inbounds", whichever(core.mark_dirty))
    follow("settings", whichever(core.mark_dirty))
    for resource in RUN:
        follow(resource, whichever(panel.mtproto.mark_dirty))
    # The nodes take what the core took: the clients named, else all of them.
    follow("clients", by_ids(deploy.clients_changed))
    for resource in SHOWN:
        follow(resource, by_resource(panel.hub.invalidate))
    follow("nodeStatus", deploy.status_changed)
    follow("outbounds", panel.subscribed_outbounds.forget)
    follow("outbounds", whichever(core.mark_dirty))
    follow("sessions", panel.close_sockets_of)
    # What raises webhook events publishes one of these once it has committed them.
    for resource in ("clients", "webhooks"):
        follow(resource, whichever(panel.deliverer.wake))


def whichever(action: Callable[[], object]) -> Consumer:
    """A consumer that acts alike on any change of the kinds it follows."""

    def consumer(change: Change) -> None:
        action()

    return _named(consumer, action)


def by_resource(action: Callable[[str], object]) -> Consumer:
    """A consumer told which resource changed."""

    def consumer(change: Change) -> None:
        action(change.resource)

    return _named(consumer, action)


def by_ids(action: Callable[[frozenset[Hashable] | None], object]) -> Consumer:
    """A consumer told which records changed (None: any of them)."""

    def consumer(change: Change) -> None:
        action(change.ids)

    return _named(consumer, action)


def _named(consumer: Consumer, action: Callable) -> Consumer:
    """`consumer` under the name of what it calls, which the log names should it fail."""
    target = action.func if isinstance(action, partial) else action
    consumer.__qualname__ = getattr(target, "__qualname__", repr(target))
    return consumer
