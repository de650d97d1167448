"""A poll round of node traffic at 10 nodes x 10,000 clients, in process.

    python bench/nodes_bench.py [--runs N]

Builds `clients_100k` (see clients_dataset.py) in a temporary directory: 100,000 clients,
split into 10 nodes of 10,000. The node side is `CounterFeed` on that database (a full
answer, and one after 1,000 of its clients moved); the central side is what
`NodeTraffic` does with each node's answer (decode it, check it, add the differences and
keep the new values in one transaction): the first round (every counter new), a round
in which every client moved, and one in which a tenth did. Figures are CPU seconds for
the whole round of 10 nodes and the size of an answer. Prints JSON; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from clients_dataset import DATASET_NAME
from harness import opened_dataset
from pony.orm import db_session

from appliance.services.clients.counters import CounterFeed, CounterJournal
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.nodes.health import NodeHealth
from appliance.services.nodes.link import Identity
from appliance.services.nodes.records import Nodes
from appliance.services.nodes.sealing import TokenSeal
from appliance.services.nodes.traffic import NodeTraffic, _checked
from appliance.store.client_writes import ClientNotes

NODES = 10


def cpu(call) -> tuple[float, object]:
    start = time.process_time()
    value = call()
    return time.process_time() - start, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="appliance-nodes-bench-"))
    try:
        store, settings = opened_dataset(DATASET_NAME, workdir)
        presence = Presence()
        journal = CounterJournal()
        store.client_writes.watch(journal.note)
        feed = CounterFeed(store, journal)
        figures: dict = {}

        with db_session:
            emails = [row[0] for row in store.rows("SELECT email FROM client ORDER BY id")]
        size = len(emails) // NODES
        shares = [emails[n * size : (n + 1) * size] for n in range(NODES)]

        full_cpu, full = cpu(lambda: json.dumps(feed.counters({"cursor": ""})))
        moved = {e.casefold() for e in emails[::100]}
        cursor = journal.cursor()
        journal.note(ClientNotes(moved=moved))
        part_cpu, part = cpu(lambda: json.dumps(feed.counters({"cursor": cursor})))
        figures["node_answer"] = {
            "full_cpu_s": round(full_cpu, 3),
            "full_clients": len(emails),
            "full_bytes": len(full),
            "after_1000_moved_cpu_s": round(part_cpu, 3),
            "after_1000_moved_bytes": len(part),
        }

        nodes = Nodes(store, TokenSeal(lambda: "a test key"))
        identity = Identity("00000000-0000-4000-8000-000000000000")
        traffic = NodeTraffic(
            nodes,
            NodeHealth(nodes, lambda: identity),
            lambda: identity,
            presence,
            ClientQuery(store, settings, presence),
            CounterJournal(),
            sweep=lambda: None,
        )

        def answer(share: list[str], value: int) -> bytes:
            clients = [{"email": e, "up": value, "down": value} for e in share]
            body = {"cursor": "x:1", "full": False, "clients": clients, "inbounds": []}
            return json.dumps({"success": True, "obj": body}).encode()

        def round_of(value: int, every: int = 1) -> float:
            """One round; each node's answer holds every `every`-th of its clients."""
            texts = [answer(share[::every], value) for share in shares]
            started = time.process_time()
            for node_id, text in enumerate(texts, start=1):
                checked = _checked(json.loads(text)["obj"], f"node {node_id}")
                traffic._count(node_id, checked)
            return time.process_time() - started

        figures["round_first"] = {"cpu_s": round(round_of(1000), 3), "nodes": NODES}
        value = 1000
        for name, every in (("round_all_moving", 1), ("round_tenth_moving", 10)):
            timings = []
            for _ in range(args.runs):
                value += 1000
                timings.append(round_of(value, every))
            figures[name] = {
                "cpu_s": round(statistics.median(timings), 3),
                "nodes": NODES,
                "moving_per_node": len(shares[0][::every]),
            }
        store.close()
        print(json.dumps(figures, indent=2))
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
