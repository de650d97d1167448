"""Routes of /panel/api/server for the owner's tools: key generators, certificate
hashes, the panel's own updates, and the client address table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.errors import ServiceError
from appliance.services.tools import keygen
from appliance.services.tools.cert_hash import cert_hashes, remote_cert_hashes
from appliance.web.http import Reply, json_object
from appliance.web.routes import EGRESS, READ, RouteTable

CLIENT_IPS_BODY_LIMIT = 16 << 20  # a backup of a large panel's address table

if TYPE_CHECKING:
    from appliance.runtime.file_paths import FilePlaces
    from appliance.services.admin.settings import Settings
    from appliance.services.admin.update import PanelUpdate
    from appliance.services.clients.ips import ClientIps


@dataclass(frozen=True)
class ToolRouteNeeds:
    places: FilePlaces  # where certificate files may be read
    settings: Settings  # whether a remote certificate may be fetched from a private address
    panel_update: PanelUpdate
    client_ips: ClientIps


def tool_routes(needs: ToolRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/server", "server")

    @table.get("/getNewmldsa65", "A new ML-DSA-65 key (seed and public key) for REALITY")
    def new_mldsa65():
        return keygen.new_mldsa65()

    @table.get("/getNewmlkem768", "A new ML-KEM-768 key: the server's seed and the client key")
    def new_mlkem768():
        return keygen.new_mlkem768()

    @table.get("/getNewVlessEnc", "New VLESS encryption pairs (X25519 and ML-KEM-768)")
    def new_vless_encryption():
        return keygen.new_vless_encryption()

    @table.post(
        "/getNewEchCert",
        "A new ECH key set and ECHConfigList for the SNI given",
        form=True,
        effect=READ,
        body={"sni": "string"},
    )
    def new_ech_cert():
        return keygen.new_ech(json_object(8192).get("sni"))

    @table.post(
        "/getCertHash",
        "Hex SHA-256 of each certificate in a file (certificate directories only) or text",
        form=True,
        effect=READ,
        body={"certFile": "string", "certContent": "string"},
    )
    def cert_hash():
        data = json_object(1 << 20)
        return cert_hashes(data.get("certFile"), data.get("certContent"), needs.places)

    @table.post(
        "/getRemoteCertHash",
        "Hex SHA-256 of the leaf certificate a live TLS server presents",
        form=True,
        body={"server": "string"},
        effect=EGRESS,
    )
    def remote_cert_hash():
        return remote_cert_hashes(json_object(8192).get("server"), needs.settings)

    @table.get(
        "/getPanelUpdateInfo", "The newest panel release and whether it is newer", effect=EGRESS
    )
    def panel_update_info():
        return needs.panel_update.info()

    @table.post(
        "/updatePanel",
        "Install the newest panel release (binary installs only) and restart",
        effect=EGRESS,
    )
    def update_panel():
        return Reply(needs.panel_update.update())

    @table.get("/clientIps", "Every client's recorded addresses")
    def client_ips():
        return needs.client_ips.table()

    @table.post(
        "/clientIps",
        "Merge client addresses into the recorded ones; nothing is removed",
        resource="clients",
        max_body=CLIENT_IPS_BODY_LIMIT,
        body={"ips": "object[]"},
    )
    def merge_client_ips():
        data = json_object(CLIENT_IPS_BODY_LIMIT)
        if "ips" not in data:
            raise ServiceError("send {ips: [{email, ips: [{ip, timestamp}]}]}")
        result = needs.client_ips.merge(data["ips"])
        return Reply(
            f"{result['addresses']} address(es) of {result['clients']} client(s) merged", result
        )

    return table
