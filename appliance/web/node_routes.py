"""Routes of /panel/api/nodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.web.http import Reply, json_object
from appliance.web.routes import EGRESS, RouteTable

CONNECTION = {
    "scheme": "string",
    "address": "string",
    "port": "integer",
    "basePath": "string",
    "apiToken": "string",
    "allowPrivateAddress": "boolean",
    "tlsVerifyMode": "string",
    "certFingerprint": "string",
}
NODE_BODY = {"name": "string", "remark": "string", "enable": "boolean", **CONNECTION}
MAX_BODY = 65536
TRUST_BODY = 128 << 10

if TYPE_CHECKING:
    from appliance.services.nodes.fleet import Fleet
    from appliance.services.nodes.operations import NodeOperations
    from appliance.services.nodes.trust import MutualTls


@dataclass(frozen=True)
class NodeRouteNeeds:
    fleet: Fleet
    operations: NodeOperations  # certificate paths and panel updates of nodes
    mtls: MutualTls  # this panel's CA for its nodes, and the CA it trusts as a node
    serves_https: Callable[[], bool]  # whether the panel port serves TLS in this run


def node_routes(needs: NodeRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/nodes", "nodes")
    fleet = needs.fleet
    operations = needs.operations

    @table.get("/list", "Every node with its health and counts")
    def list_nodes():
        return fleet.list()

    @table.get("/get/<id>", "One node")
    def get(id):
        return fleet.get(id)

    @table.get("/history/<id>/<metric>/<bucket>", "CPU or memory history of a node")
    def history(id, metric, bucket):
        return fleet.history(id, metric, bucket)

    @table.post(
        "/add",
        "Add a node (its API token is never shown again)",
        resource="nodes",
        body=NODE_BODY,
        effect=EGRESS,
    )
    def add():
        return Reply("node added", fleet.add(json_object(MAX_BODY)))

    @table.post(
        "/update/<id>",
        "Replace a node's fields; an empty apiToken keeps the stored one",
        resource="nodes",
        body=NODE_BODY,
        effect=EGRESS,
    )
    def update(id):
        return Reply("node updated", fleet.update(id, json_object(MAX_BODY)))

    @table.post(
        "/del/<id>", "Delete a node; inbounds bound to it stay, not migrated", resource="nodes"
    )
    def delete(id):
        return Reply(fleet.delete(id))

    @table.post(
        "/setEnable/<id>",
        "Enable or disable a node (a disabled node is neither synced nor polled)",
        resource="nodes",
        body={"enable": "boolean"},
        effect=EGRESS,
    )
    def set_enable(id):
        return Reply("node updated", fleet.set_enable(id, json_object(8192).get("enable")))

    @table.post(
        "/test",
        "Heartbeat of unsaved connection details; saves nothing",
        body=CONNECTION,
        effect=EGRESS,
    )
    def test():
        return fleet.test(json_object(MAX_BODY))

    @table.post(
        "/certFingerprint",
        "Base64 SHA-256 of the node's leaf certificate, fetched without verification",
        body=CONNECTION,
        effect=EGRESS,
    )
    def cert_fingerprint():
        return fleet.fingerprint(json_object(MAX_BODY))

    @table.post(
        "/inbounds",
        "The inbounds an unsaved node runs; saves nothing",
        body=CONNECTION,
        effect=EGRESS,
    )
    def inbounds():
        return fleet.inbounds(json_object(MAX_BODY))

    @table.post("/probe/<id>", "Heartbeat one node now and keep what it says", effect=EGRESS)
    def probe(id):
        return fleet.probe(id)

    @table.get(
        "/webCert/<id>",
        "A node's webCertFile and webKeyFile, as the node reports them",
        effect=EGRESS,
    )
    def web_cert(id):
        return operations.web_cert(id)

    @table.post(
        "/updatePanel",
        "Update the panel of enabled online nodes through their own update route",
        resource="nodes",
        body={"ids": "integer[]"},
        effect=EGRESS,
    )
    def update_panel():
        return operations.update_panels(json_object(MAX_BODY))

    @table.post(
        "/mtls/ca",
        "This panel's CA for mTLS to its nodes (minted with its client certificate on first call)",
    )
    def mtls_ca():
        return {"caCert": needs.mtls.ca_certificate()}

    @table.post(
        "/mtls/trustCA",
        "Trust a managing panel's CA (empty disables); applied at the next restart",
        body={"caCert": "string"},
        max_body=TRUST_BODY,
    )
    def mtls_trust_ca():
        ca_cert = json_object(TRUST_BODY).get("caCert")
        msg = needs.mtls.trust(ca_cert)
        if ca_cert and not needs.serves_https():
            msg += (
                "; this panel serves plain HTTP, where no client certificate can come: set "
                "webCertFile and webKeyFile, or every call with a node token is refused"
            )
        return Reply(msg)

    return table
