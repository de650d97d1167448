"""The jobs that run once among the panels on one database: they run only while this
process leads, start when it becomes the leader and stop, one mid-run included, the
moment it stops being one."""

from __future__ import annotations

import gevent

from appliance.runtime.jobs import LeaderJobs


def test_declared_jobs_wait_for_the_leadership_and_stop_with_it():
    jobs = LeaderJobs()
    ticks: list[str] = []
    jobs.every(0.01, lambda: ticks.append("tick"), "counting")
    gevent.sleep(0.05)
    assert ticks == []
    jobs.lead()
    gevent.sleep(0.05)
    assert ticks
    jobs.follow()
    gevent.sleep(0)
    seen = len(ticks)
    gevent.sleep(0.05)
    assert len(ticks) == seen and not jobs.leading


def test_a_job_mid_run_is_stopped_and_a_job_declared_while_leading_starts_at_once():
    jobs = LeaderJobs()
    jobs.lead()
    started: list[bool] = []
    finished: list[bool] = []

    def slow() -> None:
        started.append(True)
        gevent.sleep(0.2)
        finished.append(True)

    jobs.every(1, slow, "slow")
    gevent.sleep(0.05)
    jobs.follow()
    gevent.sleep(0.3)
    assert started == [True] and finished == []
