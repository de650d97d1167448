"""The panel's background jobs, in one list: which run on every instance, which once.

Several panels may share one database (services/admin/cluster.py). The jobs about this
instance's own processes (its core's and MTProto proxies' traffic, the core's metrics
and state) run on every one of them; the jobs that act for the whole panel (node
heartbeats, polls and pushes, chat-bot polling, backups and notices, outbound-
subscription refresh, pruning of history, webhook reminders and deliveries) must run
once, and run on the leader only (`LeaderJobs`). A panel alone on its database leads
from its start, so it runs them all, as it always did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.runtime.jobs import every
from appliance.services.admin.status import STEP_SECONDS
from appliance.services.admin.tgbot import SCHEDULE_CHECK_SECONDS
from appliance.services.clients.usage import HOUR
from appliance.services.nodes.health import HEARTBEAT_SECONDS

if TYPE_CHECKING:
    from appliance.app.panel import Panel

AUDIT_PRUNE_SECONDS = 3600
# How often the refresh job looks for an outbound subscription whose interval passed.
OUTBOUND_SUBS_CHECK_SECONDS = 2


def start_jobs(panel: Panel, fault) -> None:
    """Start this instance's jobs and declare the leader's (started while it leads)."""
    traffic = panel.settings.get("trafficInterval")
    every(traffic, panel.core.tick, "traffic", fault)
    every(traffic, panel.mtproto.tick, "MTProto traffic", fault)
    every(STEP_SECONDS, panel.core_metrics.collect, "core metrics", fault)
    every(STEP_SECONDS, panel.core_watch.sample, "core webhook events", fault)
    once = panel.leader_jobs.every
    once(HOUR, panel.deliverer.prune, "webhook delivery pruning", fault)
    once(traffic, panel.reminders.check, "webhook reminders", fault)
    once(STEP_SECONDS, panel.new_devices.check, "device webhook events", fault)
    once(SCHEDULE_CHECK_SECONDS, panel.chat_bot.scheduled, "chat-bot backups", fault)
    once(traffic, panel.bot_notices.check_clients, "chat-bot client notices", fault)
    once(SCHEDULE_CHECK_SECONDS, panel.bot_notices.poll_commands, "chat-bot commands", fault)
    once(AUDIT_PRUNE_SECONDS, panel.audit.prune, "audit log pruning", fault)
    once(HOUR, panel.usage.prune, "usage history pruning", fault)
    once(HEARTBEAT_SECONDS, panel.node_heartbeat, "node heartbeat", fault)
    once(HEARTBEAT_SECONDS, panel.node_tree.refresh, "node descendants", fault)
    once(
        OUTBOUND_SUBS_CHECK_SECONDS,
        panel.outbound_subs.refresh_due,
        "outbound subscription refresh",
        fault,
    )
    once(traffic, panel.node_traffic.poll_all, "node traffic", fault)
