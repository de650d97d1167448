// What a row of the clients list says about a client's use, from the slim row alone (no
// request per row): a bar of traffic used against the quota, and the expiry as a coloured
// tag with the days left. "Expiring" means within the expireDiff setting's days, as the
// panel's own expiring filter counts it.
import { html } from "../lib.js";
import { t } from "../i18n.js";
import { formatBytes, formatDate, percent, quantity } from "../components.js";

const DAY = 86400000;

export function usageCell(item) {
  const used = item.traffic.up + item.traffic.down;
  if (!item.totalGB) {
    return html`<div class="usage" data-testid="usage">${quantity(formatBytes(used))} / ∞</div>`;
  }
  const share = percent(used, item.totalGB);
  const level = share >= 100 ? "full" : share >= 80 ? "high" : "";
  return html`<div class="usage" data-testid="usage" title=${`${share.toFixed(1)}%`}>
    ${quantity(formatBytes(used))} / ${quantity(formatBytes(item.totalGB))}
    <div class=${`bar ${level}`} role="progressbar" aria-valuemin="0" aria-valuemax="100"
      aria-valuenow=${Math.round(share)} aria-label=${t("clients.usage")}><span style=${{ width: `${share}%` }}></span></div></div>`;
}

// The expiry of a slim row as [kind, label]: kind is one of expired, expiring, fine,
// never, firstUse.
export function expiryState(expiryTime, expireDiffDays, now = Date.now()) {
  if (!expiryTime) return ["never", t("clients.expiryNever")];
  if (expiryTime < 0) return ["firstUse", t("clients.expiryFirstUse", { days: Math.round(-expiryTime / DAY) })];
  if (expiryTime <= now) return ["expired", t("clients.expiryExpired")];
  const days = Math.ceil((expiryTime - now) / DAY);
  const label = t("clients.daysLeft", { days });
  return [expiryTime - now <= expireDiffDays * DAY ? "expiring" : "fine", label];
}

export function expiryCell(item, expireDiffDays) {
  const [kind, label] = expiryState(item.expiryTime, expireDiffDays);
  return html`<span class=${`tag expiry ${kind}`} data-testid="expiry-tag" data-kind=${kind}>${label}</span>
    ${item.expiryTime > 0 ? html`<div class="muted small">${formatDate(item.expiryTime)}</div>` : null}`;
}
