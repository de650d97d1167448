// The devices a client's subscription was fetched from (clients/devices: each app that
// sent a device id, with what it said of itself and where it came from), shown in the
// client's info dialog so an admin can free a place under the device limit: one device
// or all of them at once. A device removed comes back on its next fetch, if the limit
// leaves room for it.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, toast } from "../state.js";
import { formatDate } from "../components.js";

function seen(milliseconds) {
  return milliseconds ? formatDate(milliseconds) : t("common.never");
}

function system(device) {
  return [device.os, device.osVersion].filter(Boolean).join(" ") || "—";
}

function deviceRow(device, remove) {
  return html`<tr key=${device.hwid} data-hwid=${device.hwid}>
    <td data-label=${t("devices.model")}><strong>${device.model || "—"}</strong>
      <div class="muted small"><code>${device.hwid}</code></div></td>
    <td data-label=${t("devices.os")}>${system(device)}</td>
    <td data-label=${t("devices.app")} class="small">${device.userAgent || "—"}</td>
    <td data-label=${t("devices.address")}><code>${device.address || "—"}</code></td>
    <td data-label=${t("devices.firstSeen")} class="small">${seen(device.firstSeen)}</td>
    <td data-label=${t("devices.lastSeen")} class="small">${seen(device.lastSeen)}</td>
    <td class="actions"><button class="danger" data-testid="device-delete"
      aria-label=${t("devices.deleteOne", { model: device.model || device.hwid })}
      onClick=${() => remove(device)}>${t("common.delete")}</button></td></tr>`;
}

export const ClientDevices = {
  props: ["email"],
  setup(props) {
    const devices = Vue.ref(null);
    const path = `panel/api/clients/devices/${encodeURIComponent(props.email)}`;
    const load = async () => {
      devices.value = await api.get(path);
    };
    Vue.onMounted(() => load().catch(() => (devices.value = [])));

    async function act(suffix, body, message) {
      try {
        await api.post(`${path}/${suffix}`, body);
        toast(message, "success");
      } catch (error) {
        // the toast says why
      }
      load().catch(() => {});
    }
    async function remove(device) {
      if (!(await askConfirm(t("devices.confirmDelete", { model: device.model || device.hwid })))) return;
      act("del", { hwid: device.hwid }, t("devices.deleted"));
    }
    async function clear() {
      if (!(await askConfirm(t("devices.confirmClear", { email: props.email })))) return;
      act("clear", undefined, t("devices.cleared"));
    }

    return () => {
      const list = devices.value;
      return html`<section class="devices" data-testid="client-devices">
        <div class="row"><h3>${t("devices.title")}</h3><span class="spacer"></span>
          ${list && list.length ? html`<button class="danger" data-testid="devices-clear" onClick=${clear}>${t("devices.clear")}</button>` : null}</div>
        ${list === null ? html`<p class="muted">${t("common.loading")}</p>`
          : !list.length ? html`<p class="empty">${t("devices.none")}</p>`
          : html`<div class="table-wrap"><table class="table responsive" data-testid="devices-table">
            <thead><tr><th>${t("devices.model")}</th><th>${t("devices.os")}</th><th>${t("devices.app")}</th>
              <th>${t("devices.address")}</th><th>${t("devices.firstSeen")}</th><th>${t("devices.lastSeen")}</th>
              <th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
            <tbody>${list.map((device) => deviceRow(device, remove))}</tbody></table></div>`}
      </section>`;
    };
  },
};
