// Dialogs opened from a client row: its subscription URL and share links with QR codes
// (from clients/get, clients/links and clients/subLinks, shown when the panel answers
// them), what it has used and until when, the devices its subscription was fetched
// from, and its recorded IPs.
import { html, Vue } from "../lib.js";
import { api, request } from "../api.js";
import { t } from "../i18n.js";
import { toast } from "../state.js";
import { copyButton, formatBytes, formatDate, Modal, QrCode } from "../components.js";
import { UsageHistory } from "./usage-history.js";
import { ClientDevices } from "./client-devices.js";
import { useNodes } from "../node-place.js";

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
          <section class="addresses" data-testid="client-addresses"><h3>${t("clients.addresses")}</h3>
            <${ClientAddresses} email=${props.client.email} /></section>
          <${UsageHistory} path=${`panel/api/clients/history/${encodeURIComponent(props.client.email)}`} />`;
      }}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.close")}</button>`} />`;
  },
};

// The panel lists each address as "ip (unix seconds it was last seen)", and in `seenBy`
// each sighting with the node that saw it (null: this panel's own core).
const IP_SEEN = /^(.*) \((\d+)\)$/;

function seenWords(timestamp) {
  return t("clients.ipSeen", { when: formatDate(Number(timestamp) * 1000) });
}

function ipItem(entry) {
  const match = IP_SEEN.exec(entry);
  if (!match) return html`<li key=${entry}><code>${entry}</code></li>`;
  return html`<li key=${entry}><code>${match[1]}</code> <span class="muted">${seenWords(match[2])}</span></li>`;
}

// A sighting of a node names the node, so an address over a limit across servers shows
// where it was seen; this panel's own sightings read as they always did.
function sightingItem(entry, nodes) {
  const key = `${entry.ip} ${entry.nodeId}`;
  if (entry.nodeId == null) {
    return html`<li key=${key}><code>${entry.ip}</code> <span class="muted">${seenWords(entry.timestamp)}</span></li>`;
  }
  const node = nodes.find((item) => item.id === entry.nodeId);
  const name = node ? node.name : `#${entry.nodeId}`;
  return html`<li key=${key}><code>${entry.ip}</code> <span class="muted">${seenWords(entry.timestamp)}</span>
    <span class="tag node" data-testid="ip-node">${t("nodes.on", { name })}</span></li>`;
}

// A client's addresses, each with the node that saw it: in the IPs dialog, and in the
// info dialog beside the devices. `version` reads them again when it changes (a clear).
const ClientAddresses = {
  props: ["email", "version"],
  setup(props) {
    const ips = Vue.ref(null);
    const sightings = Vue.ref(null);
    const nodes = useNodes();
    const load = async () => {
      const reply = await request("POST", `panel/api/clients/ips/${encodeURIComponent(props.email)}`, { quiet: true });
      sightings.value = Array.isArray(reply.seenBy) ? reply.seenBy : null;
      ips.value = reply.obj || [];
    };
    const loadQuietly = () => load().catch(() => (ips.value = []));
    Vue.onMounted(loadQuietly);
    Vue.watch(() => props.version, loadQuietly);
    return () => {
      if (ips.value === null) return html`<p class="muted">${t("common.loading")}</p>`;
      if (sightings.value && sightings.value.length) {
        return html`<ul class="plain" data-testid="client-ips">${sightings.value.map((entry) => sightingItem(entry, nodes.value))}</ul>`;
      }
      if (ips.value.length) {
        return html`<ul class="plain" data-testid="client-ips">${ips.value.map((entry) => ipItem(entry))}</ul>`;
      }
      return html`<p class="empty">${t("clients.noIps")}</p>`;
    };
  },
};

export const IpsDialog = {
  props: ["client", "onClose"],
  setup(props) {
    const version = Vue.ref(0);
    const email = encodeURIComponent(props.client.email);
    async function clear() {
      try {
        await api.post(`panel/api/clients/clearIps/${email}`);
        toast(t("clients.ipsCleared"), "success");
        version.value += 1;
      } catch (error) {
        // shown as a toast
      }
    }
    return () => html`<${Modal} title=${t("clients.ipsOf", { email: props.client.email })} onClose=${props.onClose}
      body=${() => html`<${ClientAddresses} email=${props.client.email} version=${version.value} />`}
      footer=${() => html`<button class="danger" onClick=${clear}>${t("clients.clearIps")}</button>
        <button onClick=${props.onClose}>${t("common.close")}</button>`} />`;
  },
};
