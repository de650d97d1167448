"""Self-hosted panel for a proxy core.

One gevent process serves the panel API and UI, the subscription server and the
WebSocket push channel, and supervises the core. `appliance.cli` is the entry point,
`appliance.app` wires the parts together.
"""

__version__ = "0.1.0"
