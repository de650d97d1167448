// Beside each row of the inbounds list: its clients with their usage, read a page at a
// time when the row is expanded (an inbound may hold 100,000 of them), and a copy of the
// inbound on another port, made by the panel's clone route.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { toast } from "../state.js";
import { field, Modal, numberInput, textInput } from "../components.js";
import { expiryCell, usageCell } from "./client-usage.js";
import { freePort } from "./inbound-form.js";

const PAGE_SIZE = 25;

export const InboundClients = {
  props: ["inbound", "columns"],
  setup(props) {
    const page = Vue.ref(1);
    const result = Vue.shallowRef(null);
    async function load() {
      result.value = await api.get("panel/api/clients/list/paged", {
        query: { inboundId: props.inbound.id, page: page.value, pageSize: PAGE_SIZE },
      });
    }
    Vue.onMounted(() => load().catch(() => {}));
    Vue.watch(page, () => load().catch(() => {}));
    return () => {
      const r = result.value;
      const pages = r ? Math.max(1, Math.ceil(r.filtered / r.pageSize)) : 1;
      const body = !r ? html`<p class="muted">${t("common.loading")}</p>`
        : r.items.length === 0 ? html`<p class="empty">${t("inbound.noClients")}</p>`
        : html`<table class="table" data-testid="inbound-clients">
            <thead><tr><th>${t("clients.email")}</th><th>${t("common.enabled")}</th><th>${t("clients.traffic")}</th>
              <th>${t("clients.expiry")}</th></tr></thead>
            <tbody>${r.items.map((item) => html`<tr key=${item.email} data-email=${item.email}>
              <td class="email">${item.email}</td><td>${item.enable ? "✓" : "—"}</td>
              <td>${usageCell(item)}</td><td>${expiryCell(item, 0)}</td></tr>`)}</tbody></table>
            ${pages > 1 ? html`<div class="pager">
              <button disabled=${page.value <= 1} onClick=${() => (page.value -= 1)} aria-label=${t("common.previous")}>‹</button>
              <span>${t("clients.page", { page: page.value, pages })}</span>
              <button disabled=${page.value >= pages} onClick=${() => (page.value += 1)} aria-label=${t("common.next")}>›</button>
            </div>` : null}`;
      return html`<tr class="inbound-clients" data-clients-of=${props.inbound.id}><td colspan=${props.columns}>${body}</td></tr>`;
    };
  },
};

export const CloneDialog = {
  // `taken`: the ports of the inbounds the page lists.
  props: ["inbound", "taken", "onClose", "onDone"],
  setup(props) {
    const name = props.inbound.remark || props.inbound.tag;
    const own = [Number(location.port) || (location.protocol === "https:" ? 443 : 80)];
    const model = Vue.reactive({ port: freePort([...props.taken, ...own]), remark: t("inbound.copyOf", { name }) });
    // The subscription port is the panel's too: a port that turns out to be it is chosen again.
    api.post("panel/api/setting/all", undefined, { quiet: true }).then((all) => {
      if (all && model.port === all.subPort) model.port = freePort([...props.taken, ...own, all.subPort]);
    }, () => {});
    const busy = Vue.ref(false);
    async function submit(event) {
      event.preventDefault();
      busy.value = true;
      try {
        const created = await api.post(`panel/api/inbounds/clone/${props.inbound.id}`, { port: model.port, remark: model.remark });
        toast(t("inbound.cloned", { name: created.remark || created.tag }), "success");
        props.onDone();
      } catch (error) {
        // shown as a toast; the dialog stays open to choose another port
      } finally {
        busy.value = false;
      }
    }
    return () => html`<${Modal} title=${t("inbound.cloneTitle", { name })} onClose=${props.onClose}
      body=${() => html`<form id="clone-form" class="stack" onSubmit=${submit}>
        <p class="muted small">${t("inbound.cloneHint")}</p>
        ${field(t("inbound.port"), numberInput(model, "port", { name: "clonePort", min: 1, max: 65535, required: true }))}
        ${field(t("inbound.remark"), textInput(model, "remark", { name: "cloneRemark" }))}</form>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="clone-form" disabled=${busy.value}>${t("inbound.clone")}</button>`} />`;
  },
};
