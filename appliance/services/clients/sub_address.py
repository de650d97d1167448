"""The address of a client's subscription, as the panel shows it to the admin.

The admin copies this address into a client app or shows its QR code to a user, so it
must be the one the subscription server answers at: the `subDomain` setting when set,
else the host name the admin reached the panel by (a fresh server is usually reached by
its IP address, which the subscription server answers to as well); the port the
subscription server listens on (a `--sub-port` flag beats the setting); https when the
subscription server has its own certificate; then `subPath` and the subscription id.
Built here once, so the API, the links dialog and the client form agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from appliance.services.admin.settings import Settings

DEFAULT_PORTS = {"http": 80, "https": 443}


class SubscriptionAddress:
    def __init__(self, settings: Settings, sub_port: Callable[[], int]):
        self.settings = settings
        # The port the subscription server listens on now (or will, before it is bound).
        self.sub_port = sub_port

    def url(self, sub_id: str, page_host: str) -> str:
        """The subscription URL of `sub_id`; "" when the client has none. `page_host` is
        the host name (without port) the panel's page was loaded from."""
        if not sub_id:
            return ""
        get = self.settings.get
        scheme = "https" if get("subCertFile") else "http"
        host = get("subDomain") or page_host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        port = self.sub_port()
        authority = host if DEFAULT_PORTS[scheme] == port else f"{host}:{port}"
        return f"{scheme}://{authority}{get('subPath')}{quote(sub_id, safe='')}"
