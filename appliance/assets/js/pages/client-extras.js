// Dialogs opened from a client row: its share links with QR codes (from clients/links
// and clients/subLinks, shown when the panel answers them) and its recorded IPs.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { toast } from "../state.js";
import { copyText as copy, Modal, QrCode } from "../components.js";

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
    const shown = Vue.ref(0);
    Vue.onMounted(async () => {
      const email = encodeURIComponent(props.client.email);
      const [own, sub] = await Promise.all([
        optionalLinks(`panel/api/clients/links/${email}`),
        props.client.subId ? optionalLinks(`panel/api/clients/subLinks/${encodeURIComponent(props.client.subId)}`) : null,
      ]);
      links.value = own;
      subLinks.value = sub;
    });
    return () => html`<${Modal} title=${t("clients.linksOf", { email: props.client.email })} onClose=${props.onClose}
      body=${() => {
        if (links.value === undefined) return html`<p class="muted">${t("common.loading")}</p>`;
        const all = [...(links.value || []), ...(subLinks.value || []).filter((l) => !(links.value || []).includes(l))];
        if (links.value === null && subLinks.value === null) return html`<p class="empty">${t("clients.linksUnavailable")}</p>`;
        if (!all.length) return html`<p class="empty">${t("clients.noLinks")}</p>`;
        const current = all[Math.min(shown.value, all.length - 1)];
        return html`<div class="links">
          <${QrCode} text=${current} />
          <ul class="link-list">${all.map((link, index) => html`<li key=${link}>
            <button class=${index === shown.value ? "link active" : "link"} onClick=${() => (shown.value = index)}>
              ${t("clients.qrFor", { n: index + 1 })}</button>
            <code class="link-text">${link}</code>
            <button onClick=${() => copy(link)}>${t("common.copy")}</button></li>`)}</ul>
        </div>`;
      }} />`;
  },
};

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
        : ips.value.length ? html`<ul class="plain">${ips.value.map((ip) => html`<li key=${ip}><code>${ip}</code></li>`)}</ul>`
          : html`<p class="empty">${t("clients.noIps")}</p>`}
      footer=${() => html`<button class="danger" onClick=${clear}>${t("clients.clearIps")}</button>
        <button onClick=${props.onClose}>${t("common.close")}</button>`} />`;
  },
};
