"""The MTProto proxy the panel runs beside the core, one process per MTProto inbound.

The core has no Telegram proxy, so the panel brings its own: the process itself (`proxy`,
started as `appliance mtproto-proxy CONFIG`), its obfuscated2 and fake-TLS wire (`wire`),
the relay of established connections on the event loop (`relay`), the panel's hold on one
such process (`process`) and the driver that keeps every process at what it should run
(`driver`). Which inbounds and secrets those are, and what their traffic counts, is the
business of the services above (services.control.mtproto, services.clients.mtproto_traffic).
"""
