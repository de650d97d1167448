// Dialogs opened from a client row: its subscription URL and share links with QR codes
// (from clients/get, clients/links and clients/subLinks, shown when the panel answers
// them), what it has used and until when, the devices its subscription was fetched
// from, and its recorded IPs.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { toast } from "../state.js";
import { copyButton, formatBytes, formatDate, Modal, QrCode } from "../components.js";
import { UsageHistory } from "./usage-history.js";
import { ClientDevices } from "./client-devices.js";

// A client's subscription URL (built by the panel from the subscription settings, or from
// the address this page was loaded from), its QR code and a copy button.
export function subscriptionUrl(url) {
  return html`<div class="sub-url" data-testid="sub-url">
    <span class="field-label">${t("clients.subUrl")}</span>
    <${QrCode} text=${url} />
    <div class="copy-row"><code>${url}</code>${copyButton(url, t("clients.subUrl"))}</div></div>`;
}

async function clientRecord(email) {
  try {
    return await api.get(`panel/api/clients/get/${encodeURIComponent(email)}`);
  } catch (error) {
    return null; // the toast said why
  }
}

async function optionalLinks(path) {
  try {
    return await api.get(path, { quiet: true });
  } catch (error) {
    // A panel without this route answers 404: there is nothing to show, not an error.
    if (error.status === 404) return null;
    toast(error.message, "error");
    return null;
  }
}

export const LinksDialog = {
  props: ["client", "onClose"],
  setup(props) {
    const links = Vue.ref(undefined);
    const subLinks = Vue.ref(null);
    const subUrl = Vue.ref("");
    const shown = Vue.ref(0);
    Vue.onMounted(async () => {
      const email = encodeURIComponent(props.client.email);
      const [own, sub, record] = await Promise.all([
        optionalLinks(`panel/api/clients/links/${email}`),
        props.client.subId ? optionalLinks(`panel/api/clients/subLinks/${encodeURIComponent(props.client.subId)}`) : null,
        clientRecord(props.client.email),
      ]);
      links.value = own;
      subLinks.value = sub;
      subUrl.value = (record && record.subUrl) || "";
    });
    return () => html`<${Modal} title=${t("clients.linksOf", { email: props.client.email })} onClose=${props.onClose}
      body=${() => {
        if (links.value === undefined) return html`<p class="muted">${t("common.loading")}</p>`;
        const sub = subUrl.value ? subscriptionUrl(subUrl.value) : null;
        const all = [...(links.value || []), ...(subLinks.value || []).filter((l) => !(links.value || []).includes(l))];
        if (links.value === null && subLinks.value === null) return html`${sub}<p class="empty">${t("clients.linksUnavailable")}</p>`;
        if (!all.length) return html`${sub}<p class="empty">${t("clients.noLinks")}</p>`;
        const current = all[Math.min(shown.value, all.length - 1)];
        return html`${sub}<div class="links" data-testid="share-links">
          <${QrCode} text=${current} />
          <ul class="link-list">${all.map((link, index) => html`<li key=${link}>
            <button class=${index === shown.value ? "link active" : "link"} onClick=${() => (shown.value = index)}>
              ${t("clients.qrFor", { n: index + 1 })}</button>
            <code class="link-text">${link}</code>
            ${copyButton(link, t("clients.qrFor", { n: index + 1 }))}</li>`)}</ul>
        </div>`;
      }} />`;
  },
};

// A client's deviceLimit in words: 0 takes the hwidDefaultLimit setting, -1 is none.
function deviceLimitText(limit) {
  if (!limit) return t("clients.deviceLimitDefault");
  if (limit < 0) return t("common.unlimited");
  return String(limit);
}

// What one client has used and may use, until when, its subscription URL and devices.
export const ClientInfoDialog = {
  props: ["client", "onClose"],
  setup(props) {
    const record = Vue.ref(undefined);
    const traffic = Vue.ref(null);
    Vue.onMounted(async () => {
      const [found, counters] = await Promise.all([
        clientRecord(props.client.email),
        api.get(`panel/api/clients/traffic/${encodeURIComponent(props.client.email)}`).catch(() => null),
      ]);
      record.value = found;
      traffic.value = counters;
    });
    function rows(client, counters) {
      const up = counters ? counters.up : 0;
      const down = counters ? counters.down : 0;
      const used = up + down;
      const total = client.totalGB || 0;
      return [
        ["enabled", t("common.enabled"), t(`clients.status.${client.enable ? "active" : "deactive"}`)],
        ["up", t("clients.uploaded"), formatBytes(up)],
        ["down", t("clients.downloaded"), formatBytes(down)],
        ["used", t("clients.used"), total ? `${formatBytes(used)} / ${formatBytes(total)}` : formatBytes(used)],
        ["remaining", t("clients.remaining"), total ? formatBytes(Math.max(total - used, 0)) : t("common.unlimited")],
        ["expiry", t("clients.expiry"), formatDate(client.expiryTime)],
        ["deviceLimit", t("clients.deviceLimit"), deviceLimitText(client.deviceLimit)],
        ["lastOnline", t("clients.lastOnline"), counters && counters.lastOnline ? formatDate(counters.lastOnline) : t("common.never")],
      ];
    }
    return () => html`<${Modal} title=${t("clients.infoOf", { email: props.client.email })} onClose=${props.onClose}
      body=${() => {
        if (record.value === undefined) return html`<p class="muted">${t("common.loading")}</p>`;
        if (record.value === null) return html`<p class="empty">${t("clients.infoUnavailable")}</p>`;
        const { client, subUrl } = record.value;
        return html`<dl class="info" data-testid="client-details">${rows(client, traffic.value).map(([key, label, value]) =>
          html`<div key=${key} data-field=${key}><dt>${label}</dt><dd>${value}</dd></div>`)}</dl>
          ${subUrl ? subscriptionUrl(subUrl) : null}
          <${ClientDevices} email=${props.client.email} />
          <${UsageHistory} path=${`panel/api/clients/history/${encodeURIComponent(props.client.email)}`} />`;
      }}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.close")}</button>`} />`;
  },
};

// The panel lists each address as "ip (unix seconds it was last seen)".
const IP_SEEN = /^(.*) \((\d+)\)$/;

function ipItem(entry) {
  const match = IP_SEEN.exec(entry);
  if (!match) return html`<li key=${entry}><code>${entry}</code></li>`;
  return html`<li key=${entry}><code>${match[1]}</code> <span class="muted">${
    t("clients.ipSeen", { when: formatDate(Number(match[2]) * 1000) })}</span></li>`;
}

export const IpsDialog = {
  props: ["client", "onClose"],
  setup(props) {
    const ips = Vue.ref(null);
    const email = encodeURIComponent(props.client.email);
    const load = async () => {
      ips.value = await api.post(`panel/api/clients/ips/${email}`);
    };
    Vue.onMounted(() => load().catch(() => (ips.value = [])));
    async function clear() {
      try {
        await api.post(`panel/api/clients/clearIps/${email}`);
        toast(t("clients.ipsCleared"), "success");
        await load();
      } catch (error) {
        // shown as a toast
      }
    }
    return () => html`<${Modal} title=${t("clients.ipsOf", { email: props.client.email })} onClose=${props.onClose}
      body=${() => ips.value === null ? html`<p class="muted">${t("common.loading")}</p>`
        : ips.value.length ? html`<ul class="plain" data-testid="client-ips">${ips.value.map((entry) => ipItem(entry))}</ul>`
          : html`<p class="empty">${t("clients.noIps")}</p>`}
      footer=${() => html`<button class="danger" onClick=${clear}>${t("clients.clearIps")}</button>
        <button onClick=${props.onClose}>${t("common.close")}</button>`} />`;
  },
};
