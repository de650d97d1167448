"""Routes of /panel/api/server that install the core and its geo files from releases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.errors import ServiceError
from appliance.web.http import Reply, json_object
from appliance.web.routes import EGRESS, RouteTable

if TYPE_CHECKING:
    from appliance.services.control.releases import CoreReleases


@dataclass(frozen=True)
class ReleaseRouteNeeds:
    releases: CoreReleases


def release_routes(needs: ReleaseRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/server", "server")
    releases = needs.releases

    @table.get(
        "/getCoreVersion",
        "Installable core versions (release list cached 15 minutes)",
        effect=EGRESS,
    )
    def core_versions():
        return releases.versions()

    @table.post(
        "/installCore/<version>",
        "Download a core release (tag or latest), verify its SHA-256, install it, restart",
        resource="core",
        effect=EGRESS,
    )
    def install_core(version):
        return Reply(releases.install(version))

    @table.get("/getGeofiles", "The geo files in the core's folder, with their sizes and dates")
    def geofiles():
        return releases.geofiles()

    @table.post(
        "/updateGeofile",
        "Download and verify geo files (form fileName; none: all), restart the core",
        resource="core",
        effect=EGRESS,
        form=True,
        body={"fileName": "string"},
    )
    def update_geofiles():
        name = json_object(8192).get("fileName") or ""
        if not isinstance(name, str):
            raise ServiceError("fileName must be the name of a geo file, like geoip.dat")
        return Reply(releases.update_geofiles(name))

    @table.post(
        "/updateGeofile/<fileName>",
        "Download and verify one geo file, restart the core",
        resource="core",
        effect=EGRESS,
    )
    def update_geofile(fileName):
        return Reply(releases.update_geofiles(fileName))

    return table
