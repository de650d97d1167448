"""Webhooks: signed HTTP notices of what happened in the panel, for the shops and chat
bots integrators run beside it.

The approach is a transactional outbox. An event is written as rows of the outbox in
the same transaction as the change it reports (`outbox.py`), so a crash can lose neither
the change nor its notice, and a rolled-back change sends nothing. A background job
(`deliverer.py`) takes due rows with a lease, posts them through the egress guard,
signed, and records what the receiver answered; a failure is retried with backoff for a
day. Delivery is at least once: the event id lets a receiver drop a repeat.
"""
