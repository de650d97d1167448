// An inbound's share links and its clients' subscription URLs as text, to copy or save:
// what an admin hands out for a whole inbound at once. The panel gives them a page of
// clients at a time (an inbound may hold 100,000); the dialog shows one page and a
// download fetches every page into one file.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { copyButton, Modal } from "../components.js";

const PAGE_SIZE = 1000;

function linksText(items) {
  return items.flatMap((item) => item.links).join("\n");
}

// Clients sharing a subscription id share its URL: each URL once.
function subUrlsText(items) {
  return [...new Set(items.map((item) => item.subUrl).filter(Boolean))].join("\n");
}

function inboundPage(inbound, page) {
  return api.get(`panel/api/inbounds/${inbound.id}/links`, { query: { page, pageSize: PAGE_SIZE } });
}

async function downloadAll(inbound, kind) {
  const items = [];
  for (let page = 1; ; page += 1) {
    const result = await inboundPage(inbound, page);
    items.push(...result.items);
    if (page * result.pageSize >= result.total) break;
  }
  const text = kind === "links" ? linksText(items) : subUrlsText(items);
  const url = URL.createObjectURL(new Blob([`${text}\n`], { type: "text/plain" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = `${kind === "links" ? "links" : "subscriptions"}-${inbound.tag || inbound.id}.txt`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export const InboundLinksDialog = {
  props: ["inbound", "onClose"],
  setup(props) {
    const page = Vue.ref(1);
    const result = Vue.shallowRef(null);
    const busy = Vue.ref(false);
    async function load() {
      result.value = await inboundPage(props.inbound, page.value);
    }
    Vue.onMounted(() => load().catch(() => props.onClose()));
    Vue.watch(page, () => load().catch(() => {}));

    async function download(kind) {
      busy.value = true;
      try {
        await downloadAll(props.inbound, kind);
      } catch (error) {
        // shown as a toast
      } finally {
        busy.value = false;
      }
    }

    function block(kind, label, text) {
      return html`<div class="copy-block" data-testid=${`export-${kind}`}>
        <label class="field-label" for=${`export-${kind}`}>${label}</label>
        <div class="copy-row"><textarea id=${`export-${kind}`} class="code-editor" readonly rows="8" wrap="off"
          value=${text}></textarea>${copyButton(text, label)}
          <button type="button" data-testid=${`download-${kind}`} disabled=${busy.value}
            onClick=${() => download(kind)}>${t("inbound.downloadTxt")}</button></div></div>`;
    }

    function body() {
      const r = result.value;
      if (!r) return html`<p class="muted">${t("common.loading")}</p>`;
      if (r.total === 0) return html`<p class="empty">${t("inbound.noClients")}</p>`;
      const pages = Math.max(1, Math.ceil(r.total / r.pageSize));
      return html`<div class="stack">
        ${block("links", t("inbound.shareLinks"), linksText(r.items))}
        ${block("subUrls", t("inbound.subUrls"), subUrlsText(r.items))}
        ${pages > 1 ? html`<p class="muted small">${t("inbound.linksPaged")}</p><div class="pager">
          <button disabled=${page.value <= 1} onClick=${() => (page.value -= 1)} aria-label=${t("common.previous")}>‹</button>
          <span>${t("clients.page", { page: page.value, pages })}</span>
          <button disabled=${page.value >= pages} onClick=${() => (page.value += 1)} aria-label=${t("common.next")}>›</button>
        </div>` : null}</div>`;
    }

    const name = props.inbound.remark || props.inbound.tag;
    return () => html`<${Modal} wide=${true} title=${t("inbound.linksTitle", { name })} onClose=${props.onClose}
      body=${body} footer=${() => html`<button onClick=${props.onClose}>${t("common.close")}</button>`} />`;
  },
};
