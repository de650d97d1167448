"""Every route of the spec built so far, as (method, path with :params).

The OpenAPI test checks each of these is documented and served; a route added to the
spec's tables and built gets a line here.
"""

SESSION = [
    ("POST", "/login"),
    ("POST", "/logout"),
    ("GET", "/csrf-token"),
    ("POST", "/getTwoFactorEnable"),
    ("GET", "/ws"),
]

INBOUNDS = [
    ("GET", "/panel/api/inbounds/list"),
    ("GET", "/panel/api/inbounds/list/slim"),
    ("GET", "/panel/api/inbounds/options"),
    ("GET", "/panel/api/inbounds/get/:id"),
    ("POST", "/panel/api/inbounds/add"),
    ("POST", "/panel/api/inbounds/del/:id"),
    ("POST", "/panel/api/inbounds/bulkDel"),
    ("POST", "/panel/api/inbounds/update/:id"),
    ("POST", "/panel/api/inbounds/setEnable/:id"),
    ("POST", "/panel/api/inbounds/:id/resetTraffic"),
    ("POST", "/panel/api/inbounds/:id/delAllClients"),
    ("POST", "/panel/api/inbounds/resetAllTraffics"),
    ("POST", "/panel/api/inbounds/import"),
    ("GET", "/panel/api/inbounds/:id/fallbacks"),
    ("POST", "/panel/api/inbounds/:id/fallbacks"),
]

SERVER = [
    ("GET", "/panel/api/server/status"),
    ("GET", "/panel/api/server/cpuHistory/:bucket"),
    ("GET", "/panel/api/server/history/:metric/:bucket"),
    ("GET", "/panel/api/server/getNewUUID"),
    ("GET", "/panel/api/server/getNewX25519Cert"),
    ("GET", "/panel/api/server/getWebCertFiles"),
    ("POST", "/panel/api/server/logs/:count"),
]

SETTING = [
    ("POST", "/panel/api/setting/all"),
    ("POST", "/panel/api/setting/defaultSettings"),
    ("POST", "/panel/api/setting/update"),
    ("POST", "/panel/api/setting/updateUser"),
    ("POST", "/panel/api/setting/restartPanel"),
    ("GET", "/panel/api/setting/getDefaultJsonConfig"),
    ("GET", "/panel/api/setting/apiTokens"),
    ("POST", "/panel/api/setting/apiTokens/create"),
    ("POST", "/panel/api/setting/apiTokens/delete/:id"),
    ("POST", "/panel/api/setting/apiTokens/setEnabled/:id"),
]

# clients/subLinks/:subId and clients/links/:email come with the share-link renderers.
CLIENTS = [
    ("GET", "/panel/api/clients/list"),
    ("GET", "/panel/api/clients/list/paged"),
    ("GET", "/panel/api/clients/get/:email"),
    ("POST", "/panel/api/clients/add"),
    ("POST", "/panel/api/clients/update/:email"),
    ("POST", "/panel/api/clients/del/:email"),
    ("POST", "/panel/api/clients/:email/attach"),
    ("POST", "/panel/api/clients/:email/detach"),
    ("POST", "/panel/api/clients/:email/externalLinks"),
    ("POST", "/panel/api/clients/resetAllTraffics"),
    ("POST", "/panel/api/clients/delDepleted"),
    ("POST", "/panel/api/clients/delOrphans"),
    ("GET", "/panel/api/clients/export"),
    ("POST", "/panel/api/clients/import"),
    ("POST", "/panel/api/clients/bulkAdjust"),
    ("POST", "/panel/api/clients/bulkDel"),
    ("POST", "/panel/api/clients/bulkCreate"),
    ("POST", "/panel/api/clients/groups/bulkAdd"),
    ("POST", "/panel/api/clients/groups/bulkRemove"),
    ("POST", "/panel/api/clients/bulkAttach"),
    ("POST", "/panel/api/clients/bulkDetach"),
    ("POST", "/panel/api/clients/bulkResetTraffic"),
    ("GET", "/panel/api/clients/groups"),
    ("GET", "/panel/api/clients/groups/:name/emails"),
    ("POST", "/panel/api/clients/groups/create"),
    ("POST", "/panel/api/clients/groups/rename"),
    ("POST", "/panel/api/clients/groups/delete"),
    ("POST", "/panel/api/clients/resetTraffic/:email"),
    ("POST", "/panel/api/clients/updateTraffic/:email"),
    ("POST", "/panel/api/clients/ips/:email"),
    ("POST", "/panel/api/clients/clearIps/:email"),
    ("POST", "/panel/api/clients/onlines"),
    ("POST", "/panel/api/clients/onlinesByGuid"),
    ("POST", "/panel/api/clients/clientIpsByGuid"),
    ("POST", "/panel/api/clients/activeInbounds"),
    ("POST", "/panel/api/clients/lastOnline"),
    ("GET", "/panel/api/clients/traffic/:email"),
]

CORE = [
    ("POST", "/panel/api/server/stopCoreService"),
    ("POST", "/panel/api/server/restartCoreService"),
    ("GET", "/panel/api/server/getConfigJson"),
    ("POST", "/panel/api/server/corelogs/:count"),
    ("GET", "/panel/api/server/getCoreVersion"),
    ("POST", "/panel/api/server/installCore/:version"),
    ("POST", "/panel/api/server/updateGeofile"),
    ("POST", "/panel/api/server/updateGeofile/:fileName"),
    ("POST", "/panel/api/core/"),
    ("GET", "/panel/api/core/getDefaultJsonConfig"),
    ("GET", "/panel/api/core/getOutboundsTraffic"),
    ("GET", "/panel/api/core/getCoreResult"),
    ("POST", "/panel/api/core/update"),
    ("POST", "/panel/api/core/resetOutboundsTraffic"),
]

SPEC_ROUTES = SESSION + INBOUNDS + SERVER + SETTING + CLIENTS + CORE
