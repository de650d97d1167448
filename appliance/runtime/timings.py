"""Durations counted into fixed buckets, for the metrics page, at a tenth of a
microsecond each.

Hot paths (every panel request, every database statement, the traffic tick) note how
long they took. `prometheus_client`'s own histogram takes a lock per observation (a
gevent lock once threading is patched) and measured about 1-2 us here; this one is a
list increment and an add, about 0.1 us, and needs no lock because greenlets switch only
where they wait. The metrics page reads the buckets at scrape time and hands them to
`prometheus_client`, which writes the exposition format.
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds in seconds: a panel request or a tick (milliseconds to seconds)...
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# ... and a database statement (tens of microseconds to a second).
QUERY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.25, 1.0)


class Timings:
    """One histogram: how many durations fell at or under each bound, and their sum."""

    def __init__(self, bounds: tuple[float, ...] = REQUEST_BUCKETS):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound, durations at or under it) per bound, `+Inf` last: the buckets as
        the exposition format writes them."""
        found, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            found.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return found


class TimingsByName:
    """One histogram per name (a route group, say), each made at its first use."""

    def __init__(self, bounds: tuple[float, ...] = REQUEST_BUCKETS):
        self.bounds = bounds
        self.by_name: dict[str, Timings] = {}

    def named(self, name: str) -> Timings:
        timings = self.by_name.get(name)
        if timings is None:
            timings = self.by_name[name] = Timings(self.bounds)
        return timings
