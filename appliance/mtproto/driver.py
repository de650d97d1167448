"""The proxy processes of this host, one per MTProto inbound, kept at what they should run.

The services decide what each inbound should run (its listener and the secrets of its
clients) and hand it here; the driver makes the processes match with the least
disturbance. A new inbound starts a process (`process.MtprotoProcess`); a change of
secrets alone goes to the running process through `PUT /secrets`, so nobody else's
connection drops (the config file is rewritten too, so a process started again starts
with them); a process that does not take them is started again. A process that comes up
gets the current secrets once more, since they may have changed between its read of the
config file and now. A change of listener is the caller's to make: it reads the last
counters first, stops the process (`stop`) and runs the new listener.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import gevent

from appliance.mtproto.process import MtprotoProcess

log = logging.getLogger(__name__)


class ProxyDriver:
    def __init__(self, workdir: str, on_state: Callable[[dict], None]):
        """`workdir` holds the processes' config files; `on_state` hears every change of
        a process's state as {inboundId, state, errorMsg}."""
        self.workdir = workdir
        self.on_state = on_state
        self.processes: dict[int, MtprotoProcess] = {}
        self.listeners: dict[int, dict] = {}
        # The secrets each process should hold, and those it confirmed it holds.
        self.pushed: dict[int, dict] = {}
        self.applied: dict[int, dict] = {}

    def inbound_ids(self) -> list[int]:
        return list(self.processes)

    def runs_another_listener(self, inbound_id: int, listener: dict) -> bool:
        """Whether the process of `inbound_id` runs and listens other than `listener`."""
        return inbound_id in self.processes and self.listeners.get(inbound_id) != listener

    def run(self, inbound_id: int, listener: dict, entries: dict) -> None:
        """Have the process of `inbound_id` run `listener` with the secrets `entries`:
        started when it does not run, given the secrets when they changed."""
        process = self.processes.get(inbound_id)
        config = {**listener, "secrets": entries}
        if process is None:
            process = self.processes[inbound_id] = MtprotoProcess(
                inbound_id, self.workdir, self._state_changed
            )
            self.listeners[inbound_id] = listener
            self.pushed[inbound_id] = entries
            process.start(config)
        elif self.pushed.get(inbound_id) != entries:
            process.write(config)
            self.pushed[inbound_id] = entries
            if process.state != "running":
                return  # it gets them once it runs (`_push_current`)
            if process.put_secrets(entries):
                self.applied[inbound_id] = entries
            else:
                log.warning("MTProto inbound %d: secrets not taken; restarting", inbound_id)
                process.stop()
                process.start(config)

    def stats(self, inbound_id: int) -> dict | None:
        """The `GET /stats` answer of the process of `inbound_id`, or None."""
        process = self.processes.get(inbound_id)
        return process.stats() if process is not None else None

    def stop(self, inbound_id: int) -> None:
        self.processes.pop(inbound_id).stop()
        self.listeners.pop(inbound_id, None)
        self.pushed.pop(inbound_id, None)
        self.applied.pop(inbound_id, None)

    def info(self) -> list[dict]:
        """Each process's port, state, error, pid and the number of secrets it holds."""
        return [
            {
                "inboundId": inbound_id,
                "port": self.listeners.get(inbound_id, {}).get("port", 0),
                "state": process.state,
                "errorMsg": process.error,
                "pid": process.pid if process.state == "running" else 0,
                "secrets": len(self.applied.get(inbound_id, {})),
            }
            for inbound_id, process in self.processes.items()
        ]

    def held_sockets(self) -> list[tuple[str, int, frozenset]]:
        """(listen, port, transports) the running proxies hold: theirs, not a stranger's."""
        return [
            (self.listeners[i]["listen"], self.listeners[i]["port"], frozenset({"tcp"}))
            for i, process in self.processes.items()
            if process.state == "running" and i in self.listeners
        ]

    def _state_changed(self, inbound_id: int, state: str, error: str) -> None:
        if state == "running":
            # The process read its config file when it started, and the secrets may have
            # changed between that read and now: it gets the current set once more.
            gevent.spawn(self._push_current, inbound_id)
        self.on_state({"inboundId": inbound_id, "state": state, "errorMsg": error})

    def _push_current(self, inbound_id: int) -> None:
        process = self.processes.get(inbound_id)
        entries = self.pushed.get(inbound_id)
        if process is not None and entries is not None and process.put_secrets(entries):
            self.applied[inbound_id] = entries
