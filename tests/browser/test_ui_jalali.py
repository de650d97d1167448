"""Dates in the Persian UI: the date fields (a client's expiry, an inbound's, an API
token's) are written and shown in the Jalali calendar, with Persian or Latin digits, and
saved as the exact Unix time of the end of that local day; other languages keep the
browser's date input. The conversion is checked in the browser against known pairs and
against the browser's own Persian calendar, which shows every other date of the UI.
Headless Chromium against a real panel (helpers and the watch on console errors and
foreign requests come from ui_pages)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from helpers import create_inbound, free_port, ok
from ui_pages import DESKTOP, client_row, expect, go, signed_in_page

API = "/panel/api/clients"
TEHRAN = "Asia/Tehran"
PERSIAN_DIGITS = str.maketrans("0123456789", "".join(chr(0x06F0 + d) for d in range(10)))
ARABIC_DIGITS = str.maketrans("0123456789", "".join(chr(0x0660 + d) for d in range(10)))
# Jalali day, Gregorian day: Nowruz either side of leap years (1399 and 1403 are leap,
# 1398 and 1404 are not) and dates everyone in Iran knows.
KNOWN = [
    ("1348/10/11", "1970-01-01"),
    ("1357/11/22", "1979-02-11"),
    ("1375/12/30", "1997-03-20"),
    ("1376/01/01", "1997-03-21"),
    ("1379/10/12", "2001-01-01"),
    ("1398/12/29", "2020-03-19"),
    ("1399/01/01", "2020-03-20"),
    ("1399/12/30", "2021-03-20"),
    ("1400/01/01", "2021-03-21"),
    ("1403/06/31", "2024-09-21"),
    ("1403/07/01", "2024-09-22"),
    ("1403/12/30", "2025-03-20"),
    ("1404/01/01", "2025-03-21"),
    ("1404/12/29", "2026-03-20"),
    ("1405/01/01", "2026-03-21"),
    ("1405/09/07", "2026-11-28"),
]
# Days that do not exist: Esfand 30 of a common year, Mehr 31, a 13th month, a day 0.
NO_SUCH_DAY = [
    "1404/12/30",
    "1398/12/30",
    "1403/07/31",
    "1403/13/01",
    "1403/01/00",
    "1403/1",
    "now",
]
CONVERT = "(m, days) => days.map(m.parseJalali)"


def vless(api, remark: str) -> dict:
    payload = {"remark": remark, "protocol": "vless", "port": free_port()}
    return create_inbound(api, {**payload, "settings": {"decryption": "none"}})


def jalali_module(page):
    """The page's own conversion module, as a handle the test calls functions of."""
    return page.evaluate_handle("import(new URL('assets/js/jalali.js', document.baseURI).href)")


def persian(text: str) -> str:
    """The text with Persian digits, as the Persian UI writes numbers."""
    return text.translate(PERSIAN_DIGITS)


def end_of_day_ms(day: str, zone: str = TEHRAN) -> int:
    year, month, date = map(int, day.split("-"))
    return int(datetime(year, month, date, 23, 59, 59, tzinfo=ZoneInfo(zone)).timestamp() * 1000)


def stored_expiry_of(api, email: str) -> int:
    return ok(api.get(f"{API}/get/{email}"))["client"]["expiryTime"]


def test_jalali_conversion_agrees_with_known_days_and_the_browser_calendar(browser, panel, watches):
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    module = jalali_module(page)
    both_ways = module.evaluate(
        """(m, pairs) => pairs.map(([jalali, gregorian]) => [m.parseJalali(jalali),
             m.gregorianToJalali(gregorian).join("/"), m.jalaliText(gregorian)])""",
        KNOWN,
    )
    for (jalali, gregorian), (parsed, back, text) in zip(KNOWN, both_ways, strict=True):
        year, month, day = jalali.split("/")
        assert parsed == gregorian, jalali
        assert back == f"{int(year)}/{int(month)}/{int(day)}", gregorian
        assert text == persian(jalali), gregorian
    assert module.evaluate(CONVERT, NO_SUCH_DAY) == [None] * len(NO_SUCH_DAY)
    written = [
        persian("1405/09/07"),
        "1405/09/07".translate(ARABIC_DIGITS),
        "1405-9-7",
        " 1405.09.07 ",
    ]
    assert module.evaluate(CONVERT, written) == ["2026-11-28"] * len(written)
    # Every day from 1300 to 1500 comes back from Jalali as the day the browser showed.
    mismatches = module.evaluate(
        """m => {
             const wrong = [];
             for (let time = Date.UTC(1921, 2, 21); time < Date.UTC(2121, 2, 21); time += 864e5) {
               const day = new Date(time).toISOString().slice(0, 10);
               const [year, month, date] = m.gregorianToJalali(day);
               if (m.jalaliToGregorian(year, month, date) !== day) wrong.push(day);
             }
             return wrong;
           }"""
    )
    assert mismatches == []


def test_persian_client_expiry_is_typed_and_shown_in_jalali(browser, panel, watches):
    api = panel.client()
    inbound = vless(api, "jalali-in")
    stored_expiry = end_of_day_ms("2025-03-20")
    client = {"email": "shown@jalali", "expiryTime": stored_expiry}
    ok(api.post(f"{API}/add", {"client": client, "inboundIds": [inbound["id"]]}))
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP, timezone_id=TEHRAN)
    go(page, "clients")
    page.select_option("[data-testid=language]", "fa")
    page.wait_for_function("() => document.documentElement.dir === 'rtl'")

    client_row(page, "shown@jalali").get_by_role("button", name="ویرایش", exact=True).click()
    form = page.locator("#client-form")
    expect(form.locator("input[name=expiryDate]")).to_have_value(persian("1403/12/30"))
    page.keyboard.press("Escape")
    expect(form).to_have_count(0)

    page.click("[data-testid=add-client]")
    form.locator("input[name=email]").fill("typed@jalali")
    form.locator(f"input[name=inbound][value='{inbound['id']}']").check()
    form.locator("select[name=expiryMode]").select_option("date")
    expiry = form.locator("input[name=expiryDate]")
    expiry.fill("1404/12/30")
    page.click("button[form=client-form]")
    assert expiry.evaluate("input => input.validationMessage").startswith("روزی از تقویم شمسی")
    assert api.get(f"{API}/get/typed@jalali")["success"] is False
    expiry.fill(persian("1405/09/07"))
    page.click("button[form=client-form]")
    client_row(page, "typed@jalali").wait_for()
    assert stored_expiry_of(api, "typed@jalali") == end_of_day_ms("2026-11-28")

    # Latin digits too, and the edit form shows the day it was given.
    client_row(page, "typed@jalali").get_by_role("button", name="ویرایش", exact=True).click()
    expect(expiry).to_have_value(persian("1405/09/07"))
    expiry.fill("1403/12/30")
    page.click("button[form=client-form]")
    expect(form).to_have_count(0)
    assert stored_expiry_of(api, "typed@jalali") == end_of_day_ms("2025-03-20")

    # The presets write Jalali days as well.
    client_row(page, "typed@jalali").get_by_role("button", name="ویرایش", exact=True).click()
    expiry.fill("1406/01/01")
    form.locator("select[name=presetFrom]").select_option("expiry")
    form.locator("[data-testid=preset-plus30]").click()
    expect(expiry).to_have_value(persian("1406/01/31"))
    page.keyboard.press("Escape")

    page.select_option("[data-testid=language]", "en")
    page.wait_for_function("() => document.documentElement.dir === 'ltr'")
    page.click("[data-testid=add-client]")
    form.locator("select[name=expiryMode]").select_option("date")
    expect(form.locator("input[name=expiryDate]")).to_have_attribute("type", "date")


def test_persian_inbound_and_token_expiry_are_jalali(browser, panel, watches):
    api = panel.client()
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP, timezone_id=TEHRAN)
    page.select_option("[data-testid=language]", "fa")
    page.wait_for_function("() => document.documentElement.dir === 'rtl'")
    go(page, "inbounds")
    page.click("[data-testid=add-inbound]")
    form = page.locator("#inbound-form")
    form.locator("input[name=remark]").fill("jalali-inbound")
    form.locator("input[name=port]").fill(str(free_port()))
    form.locator("input[name=expiry]").fill("1404/01/01")
    page.click("button[form=inbound-form]")
    expect(form).to_have_count(0)
    stored = {i["remark"]: i for i in ok(api.get("/panel/api/inbounds/list"))}["jalali-inbound"]
    assert stored["expiryTime"] == end_of_day_ms("2025-03-21")

    go(page, "settings")
    page.fill("input[name=tokenExpires]", persian("1406/01/01"))
    token_name = page.locator("form:has(input[name=tokenExpires]) input[required]")
    token_name.fill("jalali-token")
    token_name.press("Enter")
    page.locator("[data-testid=new-token]").wait_for()
    tokens = {t["name"]: t for t in ok(api.get("/panel/api/setting/apiTokens"))}
    assert tokens["jalali-token"]["expiresAt"] == end_of_day_ms("2027-03-21") + 999
    page.keyboard.press("Escape")
    page.select_option("[data-testid=language]", "en")
    page.wait_for_function("() => document.documentElement.dir === 'ltr'")
