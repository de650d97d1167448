"""Long lists sent to the database a slice at a time.

SQLite allows at most 32,766 bound parameters per statement and the networked servers
slow down on very long IN lists, so a query over many keys is run once per slice of
IN_CHUNK keys.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

IN_CHUNK = 500


def chunks(values: Sequence, size: int = IN_CHUNK) -> Iterator[Sequence]:
    """`values` in consecutive slices of at most `size`."""
    for start in range(0, len(values), size):
        yield values[start : start + size]
