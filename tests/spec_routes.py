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

SPEC_ROUTES = SESSION + INBOUNDS + SERVER + SETTING
