// The core out of step with what is stored (it refused the config built from it and runs
// an older one, or none): the header's core badge says so with the core's reason, the
// inbounds it does not run as stored carry a mark, as do the clients attached to any of
// them (what their users get is not what is saved), and a save that the core will not run
// says so instead of a plain "saved". All of it reads the core part of the live status
// (inStep, errorMsg, staleInbounds). An MTProto inbound runs in a proxy process of its
// own: while that process is down (it exited and could not start again: a port another
// program took), its row and its clients' rows carry the same kind of mark, with the
// proxy's reason (the `mtproto` part of the status, kept current by mtprotoState pushes).
import { html } from "./lib.js";
import { t } from "./i18n.js";
import { state, toast } from "./state.js";

// Why the core does not run what is stored; null while it does.
function outOfStep() {
  const core = state.status && state.status.core;
  return core && core.inStep === false ? core.errorMsg || "" : null;
}

export function coreBadge() {
  const name = (state.coreState || "unknown").replace(" ", "_");
  const label = `${t("core.label")}: ${t(`core.state.${name}`)}`;
  const reason = outOfStep();
  if (reason === null) return html`<span class=${`badge core-${name}`} data-testid="core-badge" title=${label}>${label}</span>`;
  return html`<span class="badge core-error core-out-of-step" data-testid="core-badge" title=${reason}>${
    t("coreStep.badge", { label, reason })}</span>`;
}

// Why the proxy of an MTProto inbound is not running; null while it runs (or starts).
function proxyDown(inboundId) {
  const proxies = (state.status && state.status.mtproto) || [];
  const proxy = proxies.find((each) => each.inboundId === inboundId);
  return proxy && proxy.state === "error" ? proxy.errorMsg || "" : null;
}

function proxyMark(reason, kind) {
  return html`<div class=${`badge core-error stale-${kind}`} data-testid=${`proxy-down-${kind}`} title=${reason}>${
    t("coreStep.proxyDown", { reason })}</div>`;
}

export function staleInboundMark(inboundId) {
  const down = proxyDown(inboundId);
  if (down !== null) return proxyMark(down, "inbound");
  const reason = outOfStep();
  if (reason === null || !(state.status.core.staleInbounds || []).includes(inboundId)) return null;
  return html`<div class="badge core-error stale-inbound" data-testid="stale-inbound" title=${reason}>${
    t("coreStep.inbound")}</div>`;
}

export function staleClientMark(inboundIds) {
  const down = (inboundIds || []).map(proxyDown).find((reason) => reason !== null);
  if (down !== undefined) return proxyMark(down, "client");
  const reason = outOfStep();
  const stale = reason === null ? [] : state.status.core.staleInbounds || [];
  if (!(inboundIds || []).some((id) => stale.includes(id))) return null;
  return html`<div class="badge core-error stale-client" data-testid="stale-client" title=${reason}>${
    t("coreStep.client")}</div>`;
}

export function savedToast(text) {
  const reason = outOfStep();
  if (reason === null) toast(text, "success");
  else toast(t("coreStep.saved", { saved: text, reason }), "warning");
}
