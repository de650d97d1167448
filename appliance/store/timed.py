"""A Pony database that counts how long its statements take, for the metrics page.

Pony already times every statement it runs (for its per-statement statistics, kept per
greenlet) and calls `_update_local_stat` with the start time once the driver returned:
the one place every query of the panel passes, entity queries and raw SQL alike. Only
`Store.execute_many`, which drives the cursor itself for bulk writes, goes around it.
Adding the duration to a histogram there costs one clock read and a list increment.
"""

from __future__ import annotations

from time import time

from pony.orm import Database

from appliance.runtime.timings import QUERY_BUCKETS, Timings


class TimedDatabase(Database):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.query_timings = Timings(QUERY_BUCKETS)

    def _update_local_stat(self, sql, query_start_time):
        super()._update_local_stat(sql, query_start_time)
        self.query_timings.observe(time() - query_start_time)
