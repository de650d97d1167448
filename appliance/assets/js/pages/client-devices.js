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
  return [device.os, device.osVersion].filter(Boolean).join(" ");
}

// One device as a short card (the dialog is narrow, and a phone narrower): what it is,
// the app that asked, where from and when.
function deviceItem(device, remove) {
  return html`<li key=${device.hwid} class="device" data-hwid=${device.hwid}>
    <div class="row"><strong>${device.model || t("devices.unknownModel")}</strong>
      <span class="muted">${system(device)}</span><span class="spacer"></span>
      <button class="danger" data-testid="device-delete" aria-label=${t("devices.deleteOne", { model: device.model || device.hwid })}
        onClick=${() => remove(device)}>${t("common.delete")}</button></div>
    <dl class="info small">
      <div><dt>${t("devices.app")}</dt><dd>${device.userAgent || "—"}</dd></div>
      <div><dt>${t("devices.address")}</dt><dd><code>${device.address || "—"}</code></dd></div>
      <div><dt>${t("devices.firstSeen")}</dt><dd>${seen(device.firstSeen)}</dd></div>
      <div><dt>${t("devices.lastSeen")}</dt><dd>${seen(device.lastSeen)}</dd></div>
      <div><dt>${t("devices.hwid")}</dt><dd><code>${device.hwid}</code></dd></div></dl></li>`;
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
          : html`<ul class="plain" data-testid="devices-list">${list.map((device) => deviceItem(device, remove))}</ul>`}
      </section>`;
    };
  },
};
