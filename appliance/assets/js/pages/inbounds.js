// Inbounds: the list with traffic, the enable switch, add and edit, a client added from
// an inbound's row (attached to it), fallback rules, export and import, its links as text,
// reset and delete. An inbound bound to a node names it, marked when the node does not
// run it as stored. The list is fetched again whenever the panel says inbounds changed
// (any session) and when the traffic counters move.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, onTrafficTick, state, toast } from "../state.js";
import { formatBytes, formatDate, quantity, toggle, tq } from "../components.js";
import { staleInboundMark } from "../core-step.js";
import { inboundPlace, useNodes } from "../node-place.js";
import { ClientForm } from "./client-form.js";
import { InboundForm } from "./inbound-form.js";
import { CloneDialog, InboundClients } from "./inbound-clients.js";
import { InboundLinksDialog } from "./inbound-links.js";
import { InboundHistoryDialog } from "./usage-history.js";
import { canHoldFallbacks, exportInbound, FallbacksDialog, InboundImportDialog } from "./inbound-tools.js";

// Protocols whose inbounds carry clients (CLIENT_PROTOCOLS of appliance/domain/protocols.py).
const CLIENT_PROTOCOLS = ["vless", "vmess", "trojan", "shadowsocks", "hysteria", "hysteria2", "mtproto"];

export const InboundsPage = {
  setup() {
    const inbounds = Vue.ref(null);
    const editing = Vue.ref(null);
    const tool = Vue.ref(null);
    const expanded = Vue.ref(new Set());
    const nodes = useNodes();

    function toggleExpanded(id) {
      const next = new Set(expanded.value);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      expanded.value = next;
    }

    async function load() {
      inbounds.value = await api.get("panel/api/inbounds/list/slim");
    }
    Vue.onMounted(() => load().catch(() => {}));
    Vue.watch(() => state.versions.inbounds, () => load().catch(() => {}));
    onTrafficTick(() => load().catch(() => {}));

    async function edit(inbound) {
      editing.value = { inbound: await api.get(`panel/api/inbounds/get/${inbound.id}`) };
    }

    async function act(action, message) {
      try {
        await action();
        toast(message, "success");
        await load();
      } catch (error) {
        await load().catch(() => {});
      }
    }

    async function addClient(inbound) {
      try {
        const options = await api.get("panel/api/inbounds/options");
        tool.value = { kind: "client", inbound, options };
      } catch (error) {
        // shown as a toast
      }
    }

    async function remove(inbound) {
      if (!(await askConfirm(t("inbound.confirmDelete", { name: inbound.remark || inbound.tag })))) return;
      act(() => api.post(`panel/api/inbounds/del/${inbound.id}`), t("inbound.deleted"));
    }

    async function resetTraffic(inbound) {
      if (!(await askConfirm(t("inbound.confirmReset", { name: inbound.remark || inbound.tag })))) return;
      act(() => api.post(`panel/api/inbounds/${inbound.id}/resetTraffic`), t("inbound.trafficReset"));
    }

    function row(inbound) {
      const stream = inbound.streamSettings || {};
      const name = inbound.remark || inbound.tag;
      const open = expanded.value.has(inbound.id);
      const main = html`<tr key=${inbound.id} data-inbound=${inbound.id}>
        <td data-label=${t("inbound.remark")}><button class="icon" data-testid="expand-inbound" aria-expanded=${open}
          aria-label=${t("inbound.showClients", { name })} onClick=${() => toggleExpanded(inbound.id)}>${open ? "▾" : "▸"}</button>
          <strong>${name}</strong><div class="muted small">${inbound.tag}</div>${inboundPlace(inbound, nodes.value)}${staleInboundMark(inbound.id)}</td>
        <td data-label=${t("inbound.protocol")}><span class="tag">${inbound.protocol}</span>
          ${stream.network ? html` <span class="tag">${stream.network}</span>` : null}
          ${stream.security && stream.security !== "none" ? html` <span class="tag">${stream.security}</span>` : null}</td>
        <td data-label=${t("inbound.port")}>${inbound.port}</td>
        <td data-label=${t("inbound.clients")}>${(inbound.settings && inbound.settings.clients ? inbound.settings.clients.length : 0)}</td>
        <td data-label=${t("inbound.traffic")}>↑ ${quantity(formatBytes(inbound.up))} ↓ ${quantity(formatBytes(inbound.down))}
          <div class="muted small">${inbound.total ? tq("inbound.ofQuota", { total: formatBytes(inbound.total) }) : t("common.unlimited")}</div></td>
        <td data-label=${t("inbound.expiry")}>${formatDate(inbound.expiryTime)}</td>
        <td data-label=${t("common.enabled")}>${toggle(inbound.enable, (value) =>
          act(() => api.post(`panel/api/inbounds/setEnable/${inbound.id}`, { enable: value }),
            value ? t("inbound.enabledNow") : t("inbound.disabledNow")), t("inbound.enableName", { name }))}</td>
        <td class="actions">
          <button onClick=${() => edit(inbound)}>${t("common.edit")}</button>
          ${CLIENT_PROTOCOLS.includes(inbound.protocol) ? html`<button data-testid="add-client-here"
            onClick=${() => addClient(inbound)}>${t("clients.add")}</button>` : null}
          <details class="row-menu" data-testid="row-menu">
          <summary aria-label=${t("inbound.moreActions", { name })} title=${t("common.actions")}>⋯</summary>
          <div class="menu-items" onClick=${(event) => {
            if (event.target.closest("button")) event.currentTarget.closest("details").open = false;
          }}>
          ${canHoldFallbacks(inbound) ? html`<button data-testid="fallbacks"
            onClick=${() => (tool.value = { kind: "fallbacks", inbound })}>${t("fallback.button")}</button>` : null}
          <button data-testid="clone-inbound" onClick=${() => (tool.value = { kind: "clone", inbound })}>${t("inbound.clone")}</button>
          <button data-testid="export-inbound" onClick=${() => exportInbound(inbound)}>${t("inbound.export")}</button>
          ${CLIENT_PROTOCOLS.includes(inbound.protocol) ? html`<button data-testid="export-links"
            onClick=${() => (tool.value = { kind: "links", inbound })}>${t("inbound.exportLinks")}</button>` : null}
          <button data-testid="inbound-history" onClick=${() => (tool.value = { kind: "history", inbound })}>${t("inbound.history")}</button>
          <button onClick=${() => resetTraffic(inbound)}>${t("inbound.resetTraffic")}</button>
          <button class="danger" onClick=${() => remove(inbound)}>${t("common.delete")}</button>
          </div></details>
        </td>
      </tr>`;
      return open ? [main, html`<${InboundClients} key=${`clients-${inbound.id}`} inbound=${inbound} columns=${8} />`] : main;
    }

    return () => html`<section class="page">
      <div class="page-head"><h1>${t("nav.inbounds")}</h1>
        <div class="actions">
          <button data-testid="import-inbound" onClick=${() => (tool.value = { kind: "import" })}>${t("inbound.import")}</button>
          <button class="primary" data-testid="add-inbound" onClick=${() => (editing.value = { inbound: null })}>${t("inbound.add")}</button></div></div>
      ${inbounds.value === null
        ? html`<p class="muted">${t("common.loading")}</p>`
        : inbounds.value.length === 0
          ? html`<p class="empty">${t("inbound.none")}</p>`
          : html`<div class="table-wrap"><table class="table responsive">
              <thead><tr><th>${t("inbound.remark")}</th><th>${t("inbound.protocol")}</th><th>${t("inbound.port")}</th>
                <th>${t("inbound.clients")}</th><th>${t("inbound.traffic")}</th><th>${t("inbound.expiry")}</th>
                <th>${t("common.enabled")}</th><th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
              <tbody>${inbounds.value.flatMap((inbound) => [row(inbound)].flat())}</tbody></table></div>`}
      ${editing.value ? html`<${InboundForm} inbound=${editing.value.inbound} nodes=${nodes.value} onClose=${() => (editing.value = null)}
        onSaved=${() => { editing.value = null; toast(t("inbound.saved"), "success"); load().catch(() => {}); }} />` : null}
      ${tool.value && tool.value.kind === "fallbacks"
        ? html`<${FallbacksDialog} inbound=${tool.value.inbound} onClose=${() => (tool.value = null)} />` : null}
      ${tool.value && tool.value.kind === "history"
        ? html`<${InboundHistoryDialog} inbound=${tool.value.inbound} onClose=${() => (tool.value = null)} />` : null}
      ${tool.value && tool.value.kind === "links"
        ? html`<${InboundLinksDialog} inbound=${tool.value.inbound} onClose=${() => (tool.value = null)} />` : null}
      ${tool.value && tool.value.kind === "clone" ? html`<${CloneDialog} inbound=${tool.value.inbound}
        taken=${inbounds.value.map((item) => item.port)} onClose=${() => (tool.value = null)}
        onDone=${() => { tool.value = null; load().catch(() => {}); }} />` : null}
      ${tool.value && tool.value.kind === "client" ? html`<${ClientForm} inbounds=${tool.value.options}
        preselect=${[tool.value.inbound.id]} onClose=${() => (tool.value = null)}
        onSaved=${() => { tool.value = null; toast(t("clients.saved"), "success"); load().catch(() => {}); }} />` : null}
      ${tool.value && tool.value.kind === "import" ? html`<${InboundImportDialog} onClose=${() => (tool.value = null)}
        onDone=${() => { tool.value = null; load().catch(() => {}); }} />` : null}
    </section>`;
  },
};
