// The settings page's webhooks: the endpoints events are sent to (added here with their
// secret, which is never shown again; edited in the same form, where an empty secret
// keeps the stored one), a switch and a test per endpoint, and the recent deliveries of
// the one chosen, with their status, attempts and the answer code.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, state, toast } from "../state.js";
import { checkbox, field, formatDate, listText, textInput, toggle } from "../components.js";

const STATUS_CLASS = { delivered: "core-running", pending: "core-stopped", failed: "core-error" };

function blank() {
  return { name: "", url: "", secret: "", events: [], allowPrivate: false, batch: false, withSecrets: false };
}

export const WebhooksCard = {
  setup() {
    const endpoints = Vue.ref([]);
    const form = Vue.reactive(blank());
    const editing = Vue.ref(null);
    const chosen = Vue.ref(null);
    const deliveries = Vue.ref([]);
    const load = async () => {
      endpoints.value = await api.get("panel/api/webhooks/list");
      if (chosen.value) deliveries.value = await api.get(`panel/api/webhooks/deliveries/${chosen.value.id}`);
    };
    Vue.onMounted(() => load().catch(() => {}));
    Vue.watch(() => state.versions.webhooks, () => load().catch(() => {}));
    async function act(path, body, message) {
      try {
        await api.post(path, body);
        toast(message, "success", "", "webhooks");
      } catch (error) {
        // the toast says why
      }
      load().catch(() => {});
    }
    async function submit(event) {
      event.preventDefault();
      const endpoint = editing.value;
      try {
        if (endpoint) {
          await api.post(`panel/api/webhooks/update/${endpoint.id}`, { ...form, enabled: endpoint.enabled });
        } else {
          await api.post("panel/api/webhooks/add", { ...form, enabled: true });
        }
        stopEditing();
        toast(t(endpoint ? "webhooks.updated" : "webhooks.added"), "success", "", "webhooks");
      } catch (error) {
        // the toast says why
      }
      load().catch(() => {});
    }
    function edit(endpoint) {
      const { name, url, events, allowPrivate, batch, withSecrets } = endpoint;
      Object.assign(form, blank(), { name, url, events: [...events], allowPrivate, batch, withSecrets });
      editing.value = endpoint;
    }
    function stopEditing() {
      Object.assign(form, blank());
      editing.value = null;
    }
    async function remove(endpoint) {
      if (!(await askConfirm(t("webhooks.confirmDelete", { name: endpoint.name })))) return;
      if (chosen.value?.id === endpoint.id) chosen.value = null;
      if (editing.value?.id === endpoint.id) stopEditing();
      act(`panel/api/webhooks/del/${endpoint.id}`, undefined, t("webhooks.deleted"));
    }
    function show(endpoint) {
      chosen.value = endpoint;
      load().catch(() => {});
    }
    const row = (endpoint) => html`<li class="row" key=${endpoint.id} data-testid="webhook">
      <strong>${endpoint.name}</strong>
      <code class="small">${endpoint.url}</code>
      <span class="muted small">${endpoint.events.length ? endpoint.events.join(", ") : t("webhooks.allEvents")}</span>
      <span class="badge" data-testid="webhook-counts">${t("webhooks.counts", endpoint)}</span>
      <span class="spacer"></span>
      ${toggle(endpoint.enabled, (value) => act(`panel/api/webhooks/update/${endpoint.id}`, { ...endpoint, enabled: value },
        t("webhooks.updated")), t("webhooks.enable", { name: endpoint.name }))}
      <button onClick=${() => act(`panel/api/webhooks/test/${endpoint.id}`, undefined, t("webhooks.testQueued"))}>${t("webhooks.test")}</button>
      <button onClick=${() => show(endpoint)}>${t("webhooks.deliveries")}</button>
      <button onClick=${() => edit(endpoint)}>${t("common.edit")}</button>
      <button class="danger" onClick=${() => remove(endpoint)}>${t("common.delete")}</button></li>`;
    const table = () => html`<h3>${t("webhooks.deliveriesOf", { name: chosen.value.name })}</h3>
      ${deliveries.value.length === 0 ? html`<p class="empty">${t("webhooks.noDeliveries")}</p>`
        : html`<div class="table-wrap"><table class="table responsive" data-testid="webhook-deliveries">
          <thead><tr><th>${t("webhooks.when")}</th><th>${t("webhooks.event")}</th><th>${t("webhooks.subject")}</th>
            <th>${t("webhooks.status")}</th><th>${t("webhooks.attempts")}</th><th>${t("webhooks.code")}</th></tr></thead>
          <tbody>${deliveries.value.map((d) => html`<tr key=${d.row}>
            <td data-label=${t("webhooks.when")}>${formatDate(d.createdAt)}</td>
            <td data-label=${t("webhooks.event")}><code>${d.event}</code></td>
            <td data-label=${t("webhooks.subject")}>${d.subject}</td>
            <td data-label=${t("webhooks.status")}><span class=${`badge ${STATUS_CLASS[d.status] || ""}`}>${t(`webhooks.status.${d.status}`)}</span>
              ${d.error ? html` <span class="muted small">${d.error}</span>` : null}</td>
            <td data-label=${t("webhooks.attempts")}>${d.attempts}</td>
            <td data-label=${t("webhooks.code")}>${d.code || "—"}</td></tr>`)}</tbody></table></div>`}`;
    return () => html`<div class="card" data-testid="webhooks">
      <h2>${t("webhooks.title")}</h2>
      <form onSubmit=${submit}>
        ${editing.value ? html`<h3>${t("webhooks.editing", { name: editing.value.name })}</h3>` : null}
        <div class="form-grid">
          ${field(t("webhooks.name"), textInput(form, "name", { maxlength: 64, required: true, name: "webhookName" }))}
          ${field(t("webhooks.url"), textInput(form, "url", { maxlength: 2048, required: true, name: "webhookUrl", placeholder: "https://" }))}
          ${field(t("webhooks.secret"), textInput(form, "secret", { type: "password", minlength: 16, maxlength: 256,
            required: !editing.value, autocomplete: "off", name: "webhookSecret" }),
            t(editing.value ? "webhooks.secretKeep" : "webhooks.secretHint"))}
          ${field(t("webhooks.events"), listText(form, "events", { name: "webhookEvents", placeholder: "client.created, client.expired" }),
            t("webhooks.eventsHint"))}
          ${checkbox(form, "allowPrivate", t("webhooks.allowPrivate"))}
          ${checkbox(form, "batch", t("webhooks.batch"))}
          ${checkbox(form, "withSecrets", t("webhooks.withSecrets"))}
        </div>
        <button class="primary" type="submit">${t(editing.value ? "common.save" : "webhooks.add")}</button>
        ${editing.value ? html` <button type="button" onClick=${stopEditing}>${t("common.cancel")}</button>` : null}</form>
      ${endpoints.value.length === 0 ? html`<p class="empty">${t("webhooks.none")}</p>`
        : html`<ul class="plain">${endpoints.value.map(row)}</ul>`}
      ${chosen.value ? table() : null}
    </div>`;
  },
};
