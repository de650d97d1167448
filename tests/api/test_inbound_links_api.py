"""An inbound's links exported over HTTP (`inbounds/:id/links`): each attached client with
its share links on that inbound only and its subscription URL, a page at a time."""

from __future__ import annotations

from urllib.parse import quote

from helpers import create_plain_vless, free_port, ok, refused

INBOUNDS = "/panel/api/inbounds"
CLIENTS = "/panel/api/clients"


def add_client(api, email: str, inbound_ids: list[int]) -> None:
    ok(api.post(f"{CLIENTS}/add", {"client": {"email": email}, "inboundIds": inbound_ids}))


def export(api, inbound_id: int, query: str = "") -> dict:
    return ok(api.get(f"{INBOUNDS}/{inbound_id}/links{query}"))


def test_an_inbound_exports_its_clients_links_and_sub_urls(api):
    port_a, port_b = free_port(), free_port()
    inbound_a, inbound_b = create_plain_vless(api, port_a), create_plain_vless(api, port_b)
    add_client(api, "export-both@x", [inbound_a, inbound_b])
    add_client(api, "export-a@x", [inbound_a])
    add_client(api, "export-b@x", [inbound_b])

    exported = export(api, inbound_a)
    assert exported["total"] == 2 and exported["page"] == 1
    assert [item["email"] for item in exported["items"]] == ["export-both@x", "export-a@x"]
    for item in exported["items"]:
        everywhere = ok(api.get(f"{CLIENTS}/links/{quote(item['email'])}"))
        on_a = [link for link in everywhere if f":{port_a}" in link]
        # The client's links on this inbound, and none of its links on the other one.
        assert item["links"] == on_a and len(on_a) == 1
        assert item["subUrl"] == ok(api.get(f"{CLIENTS}/get/{quote(item['email'])}"))["subUrl"]
        assert item["subUrl"].startswith("http://127.0.0.1:")
    assert [item["email"] for item in export(api, inbound_b)["items"]] == [
        "export-both@x",
        "export-b@x",
    ]


def test_pages_cover_every_client_once(api):
    inbound = create_plain_vless(api, free_port())
    emails = [f"export-page-{n}@x" for n in range(5)]
    for email in emails:
        add_client(api, email, [inbound])
    pages = [export(api, inbound, f"?page={page}&pageSize=2") for page in (1, 2, 3, 4)]
    assert [page["total"] for page in pages] == [5, 5, 5, 5]
    assert [page["pageSize"] for page in pages] == [2, 2, 2, 2]
    assert [[item["email"] for item in page["items"]] for page in pages] == [
        emails[0:2],
        emails[2:4],
        emails[4:5],
        [],
    ]
    assert len(export(api, inbound, "?pageSize=1000")["items"]) == 5


def test_bad_requests_are_refused_in_words(api):
    inbound = create_plain_vless(api, free_port())
    refused(api.get(f"{INBOUNDS}/999999/links"), "no inbound with id 999999")
    refused(api.get(f"{INBOUNDS}/abc/links"), "inbound id must be a positive integer")
    refused(api.get(f"{INBOUNDS}/{inbound}/links?pageSize=1001"), "pageSize must be from 1 to 1000")
    refused(api.get(f"{INBOUNDS}/{inbound}/links?page=0"), "page must be from 1")
    refused(api.get(f"{INBOUNDS}/{inbound}/links?page=x"), "page must be a whole number")
