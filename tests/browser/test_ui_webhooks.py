"""Webhooks in the browser: the settings card adds an endpoint, sends it a test event,
shows the delivery with its status, attempts and the receiver's answer code, and edits
the endpoint keeping its secret."""

from __future__ import annotations

import pytest
from helpers import ok
from ui_pages import DESKTOP, expect, go, new_page, sign_in
from webhook_receiver import Receiver, verified

pytestmark = pytest.mark.ui


def test_the_webhooks_card_adds_an_endpoint_and_shows_its_deliveries(browser, panel, watches):
    receiver = Receiver().start()
    try:
        page = new_page(browser, panel, watches, viewport=DESKTOP)
        sign_in(page, panel)
        go(page, "settings")
        card = page.locator("[data-testid=webhooks]")
        card.locator("input[name=webhookName]").fill("shop")
        card.locator("input[name=webhookUrl]").fill(receiver.url)
        card.locator("input[name=webhookSecret]").fill("shop-secret-0123456789")
        card.locator("input[name=webhookEvents]").fill("client.created")
        card.locator("label", has_text="private or loopback").click()
        card.locator("button:has-text('Add webhook')").click()
        endpoint = card.locator("[data-testid=webhook]", has_text="shop")
        expect(endpoint).to_contain_text("client.created")
        stored = [
            e for e in ok(panel.client().get("/panel/api/webhooks/list")) if e["name"] == "shop"
        ]
        assert stored[0]["hasSecret"] and stored[0]["allowPrivate"]
        assert "shop-secret-0123456789" not in page.content()

        endpoint.locator("button:has-text('Test')").click()
        receiver.wait_for(1)
        endpoint.locator("button:has-text('Deliveries')").click()
        deliveries = card.locator("[data-testid=webhook-deliveries]")
        row = deliveries.locator("tr", has_text="endpoint.test")
        expect(row).to_contain_text("delivered")
        expect(row).to_contain_text("200")
        expect(endpoint.locator("[data-testid=webhook-counts]")).to_contain_text("1 delivered")

        # Edited in the same form: the secret left empty stays the stored one.
        endpoint.locator("button:has-text('Edit')").click()
        expect(card.locator("input[name=webhookUrl]")).to_have_value(receiver.url)
        card.locator("input[name=webhookEvents]").fill("client.created, client.deleted")
        card.locator("button:has-text('Save')").click()
        expect(endpoint).to_contain_text("client.deleted")
        expect(card.locator("button:has-text('Add webhook')")).to_be_visible()
        [edited] = [
            e for e in ok(panel.client().get("/panel/api/webhooks/list")) if e["name"] == "shop"
        ]
        assert edited["events"] == ["client.created", "client.deleted"]
        assert edited["hasSecret"] and edited["allowPrivate"]
        endpoint.locator("button:has-text('Test')").click()
        receiver.wait_for(2)
        headers, body, _ = receiver.requests[-1]
        assert verified("shop-secret-0123456789", headers, body)
    finally:
        receiver.stop()
