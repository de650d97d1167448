"""What the core reads of inbounds: every inbound as the config builder takes it, and the
ports the panel itself holds.

It is an object of its own, apart from `Inbounds`, because the two point at each other
otherwise: an inbound save asks the core to test the config before it commits, and the
core reads the inbounds to build that config. With the reads here, the core is built
first and handed to the inbound service like any other collaborator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pony.orm import db_session

from appliance.runtime.file_paths import FilePlaces
from appliance.services.inbounds.fallbacks import Fallbacks
from appliance.services.inbounds.views import inbound_record
from appliance.store import inbound_rows

# (listen, port, what) of sockets the panel itself holds.
ReservedPorts = Callable[[], list[tuple[str, int, str]]]
# inbound id -> its client views for the core, see ClientQuery.core_clients.
CoreClientsOf = Callable[[int], Iterable[dict]]


class CoreInbounds:
    def __init__(self, store, places: FilePlaces, reserved_ports: ReservedPorts):
        self.store = store
        self.fallbacks = Fallbacks(store, places)
        self.reserved_ports = reserved_ports

    def for_core(self, core_clients: CoreClientsOf) -> list[dict]:
        """Every inbound view with `clientRows`, the views of its attached clients as the
        config builder reads them (`ClientQuery.core_clients`, read as the builder goes).
        The builder renders the entries itself, so they and clientStats are left empty."""
        with db_session:
            rows = inbound_rows.all_inbound_rows(self.store)
            fallbacks = self.fallbacks.by_master()
        views = []
        for row in rows:
            record = inbound_record(row)
            record["settings"].pop("clients", None)
            if fallbacks.get(row[0]):
                record["settings"]["fallbacks"] = fallbacks[row[0]]
            views.append({**record, "clientStats": [], "clientRows": core_clients(row[0])})
        return views
