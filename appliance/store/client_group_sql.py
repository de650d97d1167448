"""The statements of client groups, by name: the labels clients carry, the members of a
group, relabelling, and the names groups were saved under. A group is its label on
clients (`client.group_name`, indexed) plus, optionally, a saved row of its own."""

from __future__ import annotations


def saved_group_names(store) -> list[str]:
    return [row[0] for row in store.rows("SELECT name FROM client_group")]


def label_counts(store) -> dict[str, int]:
    """Each distinct group label set on clients, with its number of clients."""
    rows = store.rows(
        "SELECT group_name, COUNT(*) FROM client WHERE group_name <> '' GROUP BY group_name"
    )
    return {label: int(count) for label, count in rows}


def emails_labelled(store, labels: list[str]) -> list[str]:
    """The emails of the clients carrying any of `labels`, in email key order."""
    rows = store.rows(
        f"SELECT email FROM client WHERE group_name IN ({_marks(labels)}) ORDER BY email_key",
        labels,
    )
    return [row[0] for row in rows]


def relabel(store, labels: list[str], name: str) -> int:
    """Every client carrying one of `labels` now carries `name`; returns how many."""
    return store.execute(
        f"UPDATE client SET group_name = ? WHERE group_name IN ({_marks(labels)})",
        [name, *labels],
    )


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))
