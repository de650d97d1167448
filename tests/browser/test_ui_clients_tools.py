"""The clients list's usage bars, expiry tags and one-click reset, the client form's expiry
presets, the clients generator, and the inbounds list's clone and expandable client pages,
in headless Chromium against a real panel (helpers and the watch on console errors and
foreign requests come from ui_pages)."""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta

from helpers import create_inbound, free_port, ok
from ui_pages import DESKTOP, client_row, expect, go, screenshot, signed_in_page

API = "/panel/api/clients"
GB = 1024**3
DAY_MS = 86_400_000


def vless(api, remark: str) -> dict:
    payload = {"remark": remark, "protocol": "vless", "port": free_port()}
    return create_inbound(api, {**payload, "settings": {"decryption": "none"}})


def test_usage_bars_expiry_tags_and_reset_from_the_row(browser, panel, watches):
    api = panel.client()
    inbound = vless(api, "usage-in")
    now = int(time.time() * 1000)
    spec = {
        "tag-quota@ex": {"totalGB": 10 * GB, "expiryTime": now + 100 * DAY_MS},
        "tag-open@ex": {},
        "tag-expired@ex": {"expiryTime": now - DAY_MS},
        "tag-soon@ex": {"expiryTime": now + 2 * DAY_MS + 3_600_000},
        "tag-first@ex": {"expiryTime": -5 * DAY_MS},
    }
    items = [{"client": {"email": e, **c}, "inboundIds": [inbound["id"]]} for e, c in spec.items()]
    assert ok(api.post(f"{API}/bulkCreate", items))["created"] == len(spec)
    ok(api.post(f"{API}/updateTraffic/tag-quota@ex", {"upload": 2 * GB, "download": 3 * GB}))
    ok(api.post(f"{API}/updateTraffic/tag-open@ex", {"upload": 0, "download": GB}))
    ok(api.post("/panel/api/setting/update", {"expireDiff": 7}))

    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")
    page.fill("[data-testid=client-search]", "tag-")
    expect(page.locator("[data-testid=clients-table] tbody tr")).to_have_count(len(spec))
    quota = client_row(page, "tag-quota@ex")
    expect(quota.locator("[data-testid=usage]")).to_contain_text("5.00 GB / 10.00 GB")
    expect(quota.locator("[role=progressbar]")).to_have_attribute("aria-valuenow", "50")
    expect(client_row(page, "tag-open@ex").locator("[data-testid=usage]")).to_have_text(
        "1.00 GB / ∞"
    )
    assert client_row(page, "tag-open@ex").locator("[role=progressbar]").count() == 0
    kinds = {
        "tag-quota@ex": ("fine", "100 days left"),
        "tag-open@ex": ("never", "Never expires"),
        "tag-expired@ex": ("expired", "Expired"),
        "tag-soon@ex": ("expiring", "3 days left"),
        "tag-first@ex": ("firstUse", "5 days from first use"),
    }
    for email, (kind, text) in kinds.items():
        tag = client_row(page, email).locator("[data-testid=expiry-tag]")
        expect(tag).to_have_attribute("data-kind", kind)
        expect(tag).to_have_text(text)
    screenshot(page, "clients-usage.png")

    # Reset asks first; cancelling keeps the counters, confirming zeroes them.
    quota.locator("[data-testid=reset-traffic]").click()
    page.locator(".modal", has_text="tag-quota@ex").get_by_text("Cancel").click()
    assert ok(api.get(f"{API}/traffic/tag-quota@ex"))["down"] == 3 * GB
    quota.locator("[data-testid=reset-traffic]").click()
    page.locator(".modal", has_text="tag-quota@ex").get_by_role("button", name="OK").click()
    page.wait_for_selector("text=Client traffic reset")
    traffic = ok(api.get(f"{API}/traffic/tag-quota@ex"))
    assert (traffic["up"], traffic["down"]) == (0, 0)
    expect(quota.locator("[data-testid=usage]")).to_contain_text("0 B / 10.00 GB")


def test_expiry_presets_count_from_today_or_the_current_expiry(browser, panel, watches):
    api = panel.client()
    inbound = vless(api, "preset-in")
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")
    page.click("[data-testid=add-client]")
    form = page.locator("#client-form")
    form.locator("input[name=email]").fill("preset@ex")
    form.locator(f"input[name=inbound][value='{inbound['id']}']").check()
    date_input = form.locator("input[type=date]")
    form.locator("[data-testid=preset-plus30]").click()
    expect(date_input).to_have_value((date.today() + timedelta(days=30)).isoformat())
    form.locator("[data-testid=preset-plus90]").click()
    expect(date_input).to_have_value((date.today() + timedelta(days=90)).isoformat())

    date_input.fill("2031-03-10")
    form.locator("select[name=presetFrom]").select_option("expiry")
    form.locator("[data-testid=preset-plusYear]").click()
    expect(date_input).to_have_value("2032-03-10")
    form.locator("[data-testid=preset-plus30]").click()
    expect(date_input).to_have_value("2032-04-09")
    page.click("button[form=client-form]")
    client_row(page, "preset@ex").wait_for()
    stored = ok(api.get(f"{API}/get/preset@ex"))["client"]
    expected = datetime(2032, 4, 9, 23, 59, 59).timestamp() * 1000
    assert abs(stored["expiryTime"] - expected) < 1000


def test_generator_creates_many_and_lists_the_refusals(browser, panel, watches):
    api = panel.client()
    inbound = vless(api, "gen-in")
    ok(api.post(f"{API}/add", {"client": {"email": "gen-2@ex"}, "inboundIds": [inbound["id"]]}))
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")
    page.click("[data-testid=generate]")
    form = page.locator("#generate-form")
    form.locator("input[name=count]").fill("4")
    form.locator("input[name=prefix]").fill("gen-")
    form.locator("input[name=suffix]").fill("@ex")
    form.locator("input[name=start]").fill("1")
    form.locator("input[name=totalGB]").fill("2")
    form.locator("input[name=expiryDays]").fill("30")
    form.locator("input[name=group]").fill("generated")
    form.locator(f"input[name=inbound][value='{inbound['id']}']").check()
    expect(form).to_contain_text("The first email: gen-1@ex")
    page.click("button[form=generate-form]")
    result = page.locator("[data-testid=generate-result]")
    expect(result).to_contain_text("Created 3 clients")
    expect(result.locator("[data-testid=generate-refusals] li")).to_have_count(1)
    expect(result.locator("[data-testid=generate-refusals]")).to_contain_text("gen-2@ex")

    now = time.time() * 1000
    for n in (1, 3, 4):
        reply = ok(api.get(f"{API}/get/gen-{n}@ex"))
        client = reply["client"]
        assert reply["inboundIds"] == [inbound["id"]]
        assert (client["totalGB"], client["group"]) == (2 * GB, "generated")
        assert abs(client["expiryTime"] - (now + 30 * DAY_MS)) < 120_000
    assert ok(api.get(f"{API}/get/gen-2@ex"))["client"]["group"] == ""

    # Random emails: the prefix and suffix around a part nobody chose.
    page.keyboard.press("Escape")
    page.click("[data-testid=generate]")
    form = page.locator("#generate-form")
    form.locator("select[name=mode]").select_option("random")
    form.locator("input[name=count]").fill("3")
    form.locator("input[name=prefix]").fill("rnd-")
    form.locator("input[name=suffix]").fill("@ex")
    form.locator(f"input[name=inbound][value='{inbound['id']}']").check()
    page.click("button[form=generate-form]")
    expect(page.locator("[data-testid=generate-result]")).to_contain_text("Created 3 clients")
    random_rows = ok(api.get(f"{API}/list/paged", params={"search": "rnd-"}))["items"]
    emails = [item["email"] for item in random_rows]
    assert len(set(emails)) == 3
    assert all(e.startswith("rnd-") and e.endswith("@ex") and len(e) > 7 for e in emails)


def test_clone_and_expand_an_inbound_to_page_its_clients(browser, panel, watches):
    api = panel.client()
    inbound = vless(api, "expand-in")
    items = [
        {"client": {"email": f"exp-{n:02d}@ex", "totalGB": 4 * GB}, "inboundIds": [inbound["id"]]}
        for n in range(30)
    ]
    assert ok(api.post(f"{API}/bulkCreate", items))["created"] == 30
    ok(api.post(f"{API}/updateTraffic/exp-00@ex", {"upload": GB, "download": 0}))

    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "inbounds")
    row = page.locator(f"tr[data-inbound='{inbound['id']}']")
    row.locator("[data-testid=expand-inbound]").click()
    clients = page.locator(f"tr[data-clients-of='{inbound['id']}']")
    expect(clients.locator("[data-testid=inbound-clients] tbody tr")).to_have_count(25)
    first = clients.locator("tr[data-email='exp-00@ex']")
    expect(first.locator("[role=progressbar]")).to_have_attribute("aria-valuenow", "25")
    expect(clients).to_contain_text("Page 1 of 2")
    screenshot(page, "inbounds-expanded.png")
    clients.get_by_role("button", name="Next").click()
    expect(clients.locator("[data-testid=inbound-clients] tbody tr")).to_have_count(5)
    expect(clients.locator("tr[data-email='exp-29@ex']")).to_be_visible()
    row.locator("[data-testid=expand-inbound]").click()
    expect(clients).to_have_count(0)

    port = free_port()
    row.locator("[data-testid=row-menu] summary").click()
    row.locator("[data-testid=clone-inbound]").click()
    dialog = page.locator("#clone-form")
    expect(dialog.locator("input[name=cloneRemark]")).to_have_value("expand-in copy")
    dialog.locator("input[name=clonePort]").fill(str(inbound["port"]))
    page.click("button[form=clone-form]")
    page.locator(".toast.error").wait_for()
    dialog.locator("input[name=clonePort]").fill(str(port))
    page.click("button[form=clone-form]")
    page.wait_for_selector("text=Inbound expand-in copy created")
    copy = next(
        i for i in ok(api.get("/panel/api/inbounds/list")) if i["remark"] == "expand-in copy"
    )
    assert copy["port"] == port and copy["protocol"] == "vless"
    assert copy["settings"]["clients"] == []
    page.locator(f"tr[data-inbound='{copy['id']}']").wait_for()


def test_enabling_and_disabling_many_clients_is_one_request(browser, panel, watches):
    api = panel.client()
    inbound = vless(api, "switch-in")
    names = [f"switch-{n:02d}@ex" for n in range(20)]
    items = [{"client": {"email": e}, "inboundIds": [inbound["id"]]} for e in names]
    assert ok(api.post(f"{API}/bulkCreate", items))["created"] == len(names)
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")
    # The search's answer is awaited before its rows are counted: on a loaded machine the
    # page of every client can still be on screen when the count's own wait runs out.
    with page.expect_response(lambda r: "list/paged" in r.url and "search=switch-" in r.url):
        page.fill("[data-testid=client-search]", "switch-")
    expect(page.locator("[data-testid=clients-table] tbody tr")).to_have_count(len(names))
    sent: list[tuple[str, str]] = []
    page.on("request", lambda request: sent.append((request.method, request.url)))

    def client_calls() -> list[tuple[str, str]]:
        """What the page asked of the clients API besides reloading its list and groups."""
        calls = [(m, u.split(API, 1)[1]) for m, u in sent if API in u]
        return [c for c in calls if not c[1].startswith(("/list/paged", "/groups"))]

    page.locator("[data-testid=clients-table] thead input[type=checkbox]").check()
    page.locator("[data-testid=bulk] button", has_text="Disable").click()
    expect(page.locator(".toast.success")).to_contain_text("Done for 20 clients")
    assert client_calls() == [("POST", "/bulkEnable")]
    assert not any(ok(api.get(f"{API}/get/{e}"))["client"]["enable"] for e in names)

    sent.clear()
    page.locator("[data-testid=bulk] button", has_text="Enable").click()
    expect(page.locator(".toast.success").last).to_contain_text("Done for 20 clients")
    assert client_calls() == [("POST", "/bulkEnable")]
    assert all(ok(api.get(f"{API}/get/{e}"))["client"]["enable"] for e in names)

    # A row's own switch: one request too, for that client alone.
    sent.clear()
    client_row(page, names[3]).get_by_role("switch").click()
    expect(page.locator(".toast.success").last).to_contain_text("disabled")
    assert client_calls() == [("POST", "/bulkEnable")]
    assert ok(api.get(f"{API}/get/{names[3]}"))["client"]["enable"] is False
    assert ok(api.get(f"{API}/get/{names[4]}"))["client"]["enable"] is True
