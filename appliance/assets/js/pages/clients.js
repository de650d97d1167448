// Clients: a page of rows from clients/list/paged (search, status filter, group, sort and
// paging all run on the server, so 100,000 clients cost what 25 do), the enable switch,
// add and edit, links and QR codes, IPs and devices, external links, groups, import and export, and
// bulk actions on the selected rows. The rows follow the live traffic ticks in place. Once
// there are nodes, an online client names the panels it is connected through, and a client
// on inbounds of a node that does not run them as stored is marked.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { initialClientQuery } from "../prefetch.js";
import { askConfirm, onTrafficTick, state, toast } from "../state.js";
import { toggle } from "../components.js";
import { savedToast, staleClientMark } from "../core-step.js";
import { clientNodeMark, onlineGuids, placeName, useNodes } from "../node-place.js";
import { ClientForm } from "./client-form.js";
import { ClientInfoDialog, IpsDialog, LinksDialog } from "./client-extras.js";
import { GeneratorDialog } from "./client-generator.js";
import { expiryCell, usageCell } from "./client-usage.js";
import { AdjustDialog, AttachDialog, exportClients, ExternalLinksDialog, GroupsDialog, ImportDialog } from "./client-tools.js";

const FILTERS = ["", "online", "active", "deactive", "depleted", "expiring"];
const SORTS = ["email", "enable", "traffic", "remaining", "expiryTime", "inboundIds"];
const PAGE_SIZES = [25, 50, 100, 200];

// One request for any number of clients: the switch of a row and the bulk buttons alike.
async function setEnabled(emails, enable) {
  const reply = await api.post("panel/api/clients/bulkEnable", { emails, enable });
  for (const item of reply.skipped || []) toast(`${item.email}: ${item.reason}`, "error");
}

export const ClientsPage = {
  setup() {
    const query = Vue.reactive(initialClientQuery());
    // Replaced whole on each load, never changed in place: a shallow ref spares Vue from
    // wrapping the summary's lists of emails (100,000 of them on a large install).
    const result = Vue.shallowRef(null);
    const inbounds = Vue.ref([]);
    const groups = Vue.ref([]);
    const selected = Vue.ref(new Set());
    const dialog = Vue.ref(null);
    const bulkGroup = Vue.ref("");
    const expireDiff = Vue.ref(0);
    const tableBox = Vue.ref(null);
    const nodes = useNodes();
    // Where each online client of the page is connected: email to panel guids.
    const places = Vue.shallowRef(new Map());
    let searchTimer = 0;
    let sequence = 0;

    // The summary lists every depleted, expiring and disabled email: a page after the
    // first names the version it holds, and the server sends the summary only when it
    // has changed since.
    let summary = null;
    async function load() {
      const mine = ++sequence;
      const ask = { ...query };
      if (summary) ask.summaryVersion = summary.version;
      const reply = await api.get("panel/api/clients/list/paged", { query: ask });
      if (mine !== sequence) return;
      // Only the latest load gets here, and it asked with the version held.
      if (reply.summary) summary = { version: reply.summaryVersion, lists: reply.summary };
      result.value = { ...reply, summary: summary.lists };
      const visible = new Set(reply.items.map((item) => item.email));
      selected.value = new Set([...selected.value].filter((email) => visible.has(email)));
      refreshPlaces();
    }
    async function refreshPlaces() {
      const r = result.value;
      const online = new Set(r ? r.summary.online : []);
      if (!r || !nodes.value.length || !r.items.some((item) => online.has(item.email))) {
        places.value = new Map();
        return;
      }
      places.value = await onlineGuids();
    }
    async function loadSide() {
      const [options, groupList] = await Promise.all([
        api.get("panel/api/inbounds/options"), api.get("panel/api/clients/groups"),
      ]);
      inbounds.value = options;
      groups.value = groupList;
    }
    async function loadExpireDiff() {
      expireDiff.value = Number((await api.post("panel/api/setting/all")).expireDiff) || 0;
    }
    const reload = () => load().catch(() => {});
    // The page of rows first: the side lists (inbound names, groups) would otherwise
    // compete with it for the server on a large install.
    Vue.onMounted(() => load().catch(() => {}).finally(() => {
      loadSide().catch(() => {});
      loadExpireDiff().catch(() => {});
    }));
    Vue.watch(() => state.versions.clients, () => {
      reload();
      loadSide().catch(() => {});
    });
    Vue.watch(() => state.versions.inbounds, () => loadSide().catch(() => {}));
    Vue.watch(nodes, refreshPlaces);
    Vue.watch(() => state.versions.settings, () => loadExpireDiff().catch(() => {}));
    onTrafficTick(reload);
    Vue.watch(() => [query.filter, query.group, query.sort, query.order, query.pageSize], () => {
      query.page = 1;
      reload();
    });
    // A new page starts at its first row, not where the pager at the bottom left the view.
    Vue.watch(() => query.page, () => load()
      .then(() => Vue.nextTick())
      .then(() => tableBox.value && tableBox.value.scrollIntoView({ block: "start" }))
      .catch(() => {}));

    function onSearch(event) {
      query.search = event.target.value;
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => {
        query.page = 1;
        reload();
      }, 300);
    }

    function sortBy(key) {
      if (query.sort === key) query.order = query.order === "ascend" ? "descend" : "ascend";
      else {
        query.sort = key;
        query.order = "ascend";
      }
    }

    async function run(action, message) {
      try {
        await action();
        toast(message, "success");
      } catch (error) {
        // the failure was shown as a toast by the API layer
      }
      reload();
    }

    async function remove(email) {
      if (!(await askConfirm(t("clients.confirmDelete", { email })))) return;
      run(() => api.post(`panel/api/clients/del/${encodeURIComponent(email)}`), t("clients.deleted"));
    }

    async function resetTraffic(email) {
      if (!(await askConfirm(t("clients.confirmResetTraffic", { email })))) return;
      run(() => api.post(`panel/api/clients/resetTraffic/${encodeURIComponent(email)}`), t("clients.trafficReset"));
    }

    const emails = () => [...selected.value];
    async function bulk(kind) {
      const list = emails();
      if (!list.length) return;
      if (kind === "delete") {
        if (!(await askConfirm(t("clients.confirmBulkDelete", { count: list.length })))) return;
        return run(async () => {
          const reply = await api.post("panel/api/clients/bulkDel", { emails: list, keepTraffic: false });
          for (const item of reply.skipped || []) toast(`${item.email}: ${item.reason}`, "error");
        }, t("clients.bulkDone", { count: list.length }));
      }
      if (kind === "reset") {
        if (!(await askConfirm(t("clients.confirmBulkReset", { count: list.length })))) return;
        return run(() => api.post("panel/api/clients/bulkResetTraffic", { emails: list }), t("clients.bulkDone", { count: list.length }));
      }
      if (kind === "group") {
        const group = bulkGroup.value.trim();
        const path = group ? "panel/api/clients/groups/bulkAdd" : "panel/api/clients/groups/bulkRemove";
        return run(() => api.post(path, group ? { emails: list, group } : { emails: list }), t("clients.bulkDone", { count: list.length }));
      }
      run(() => setEnabled(list, kind === "enable"), t("clients.bulkDone", { count: list.length }));
    }

    function toggleRow(email, on) {
      const next = new Set(selected.value);
      if (on) next.add(email);
      else next.delete(email);
      selected.value = next;
    }

    function deviceCount(row) {
      if (!row.devices) return null;
      const limit = row.deviceLimit > 0 ? ` (${t("clients.deviceCountLimit", { limit: row.deviceLimit })})` : "";
      return html`<span class="muted small" data-testid="device-count"> · ${
        t("clients.deviceCount", { count: row.devices })}${limit}</span>`;
    }

    function statusOf(row, summary) {
      if (!row.enable) return "deactive";
      if (summary.depleted.includes(row.email)) return "depleted";
      if (summary.online.includes(row.email)) return "online";
      if (summary.expiring.includes(row.email)) return "expiring";
      return "active";
    }

    function inboundNames(ids) {
      return ids.map((id) => {
        const inbound = inbounds.value.find((item) => item.id === id);
        return inbound ? inbound.remark || inbound.tag : `#${id}`;
      }).join(", ");
    }

    function header(key, label) {
      const active = query.sort === key;
      const order = active ? (query.order === "ascend" ? "ascending" : "descending") : "none";
      return html`<th aria-sort=${order}><button class="sort" onClick=${() => sortBy(key)}>${label}${
        active ? (query.order === "ascend" ? " ▲" : " ▼") : ""}</button></th>`;
    }

    function row(item, summary) {
      const status = statusOf(item, summary);
      return html`<tr key=${item.email} data-email=${item.email}>
        <td class="select"><input type="checkbox" aria-label=${t("clients.select", { email: item.email })}
          checked=${selected.value.has(item.email)} onChange=${(e) => toggleRow(item.email, e.target.checked)} /></td>
        <td data-label=${t("clients.email")}><strong class="email">${item.email}</strong>
          ${item.group ? html` <span class="tag">${item.group}</span>` : null}
          <div><span class=${`status ${status}`}>${t(`clients.status.${status}`)}</span>${
            status === "online" && places.value.has(item.email)
              ? html`<span class="muted small" data-testid="online-where"> · ${
                places.value.get(item.email).map((guid) => placeName(guid, nodes.value)).join(", ")}</span>` : null}${
            deviceCount(item)}</div>
          ${staleClientMark(item.inboundIds)}${clientNodeMark(item.inboundIds, inbounds.value, nodes.value)}</td>
        <td data-label=${t("common.enabled")}>${toggle(item.enable, (value) =>
          run(() => setEnabled([item.email], value), value ? t("clients.enabledNow") : t("clients.disabledNow")),
          t("clients.enableName", { email: item.email }))}</td>
        <td data-label=${t("clients.traffic")}>${usageCell(item)}</td>
        <td data-label=${t("clients.expiry")}>${expiryCell(item, expireDiff.value)}</td>
        <td data-label=${t("clients.inbounds")} class="small">${inboundNames(item.inboundIds)}</td>
        <td class="actions">
          <button onClick=${() => (dialog.value = { kind: "edit", email: item.email })}>${t("common.edit")}</button>
          <button data-testid="client-info" onClick=${() => (dialog.value = { kind: "info", client: item })}>${t("clients.info")}</button>
          <button data-testid="links" onClick=${() => (dialog.value = { kind: "links", client: item })}>${t("clients.links")}</button>
          <button onClick=${() => (dialog.value = { kind: "ips", client: item })}>${t("clients.ips")}</button>
          <button data-testid="reset-traffic" onClick=${() => resetTraffic(item.email)}>${t("clients.resetTraffic")}</button>
          <button data-testid="external-links" onClick=${() => (dialog.value = { kind: "external", email: item.email })}>${t("clients.external")}</button>
          <button class="danger" onClick=${() => remove(item.email)}>${t("common.delete")}</button>
        </td>
      </tr>`;
    }

    function renderDialog() {
      const d = dialog.value;
      if (!d) return null;
      const close = () => (dialog.value = null);
      if (d.kind === "info") return html`<${ClientInfoDialog} client=${d.client} onClose=${close} />`;
      if (d.kind === "links") return html`<${LinksDialog} client=${d.client} onClose=${close} />`;
      if (d.kind === "ips") return html`<${IpsDialog} client=${d.client} onClose=${close} />`;
      if (d.kind === "external") return html`<${ExternalLinksDialog} email=${d.email} onClose=${close} />`;
      if (d.kind === "groups") {
        return html`<${GroupsDialog} groups=${groups.value} onClose=${close}
          onChanged=${() => { loadSide().catch(() => {}); reload(); }} />`;
      }
      const done = () => { close(); reload(); };
      if (d.kind === "generate") return html`<${GeneratorDialog} inbounds=${inbounds.value} onClose=${close} onDone=${reload} />`;
      if (d.kind === "import") return html`<${ImportDialog} onClose=${close} onDone=${done} />`;
      if (d.kind === "adjust") return html`<${AdjustDialog} emails=${emails()} onClose=${close} onDone=${done} />`;
      if (d.kind === "attach") return html`<${AttachDialog} emails=${emails()} inbounds=${inbounds.value} onClose=${close} onDone=${done} />`;
      return html`<${ClientForm} email=${d.email} inbounds=${inbounds.value} onClose=${close}
        onSaved=${() => { close(); savedToast(t("clients.saved")); reload(); }} />`;
    }

    return () => {
      const r = result.value;
      const pages = r ? Math.max(1, Math.ceil(r.filtered / r.pageSize)) : 1;
      const allSelected = r && r.items.length > 0 && r.items.every((item) => selected.value.has(item.email));
      return html`<section class="page">
        <div class="page-head"><h1>${t("nav.clients")}</h1>
          <div class="actions">
            <button data-testid="groups" onClick=${() => (dialog.value = { kind: "groups" })}>${t("clients.groups")}</button>
            <button data-testid="export" onClick=${exportClients}>${t("clients.export")}</button>
            <button data-testid="import" onClick=${() => (dialog.value = { kind: "import" })}>${t("clients.import")}</button>
            <button data-testid="generate" onClick=${() => (dialog.value = { kind: "generate" })}>${t("clients.generate")}</button>
            <button class="primary" data-testid="add-client" onClick=${() => (dialog.value = { kind: "edit", email: null })}>${t("clients.add")}</button></div></div>
        ${r ? html`<div class="chips" data-testid="summary">
          <span class="chip">${t("clients.total")}: ${r.summary.total}</span>
          <span class="chip">${t("clients.status.active")}: ${r.summary.active}</span>
          <span class="chip">${t("clients.status.online")}: ${r.summary.online.length}</span>
          <span class="chip">${t("clients.status.depleted")}: ${r.summary.depleted.length}</span>
          <span class="chip">${t("clients.status.expiring")}: ${r.summary.expiring.length}</span>
          <span class="chip">${t("clients.status.deactive")}: ${r.summary.deactive.length}</span></div>` : null}
        <div class="toolbar">
          <input type="search" class="grow" placeholder=${t("clients.search")} aria-label=${t("clients.search")}
            data-testid="client-search" value=${query.search} onInput=${onSearch} />
          <select aria-label=${t("clients.filter")} value=${query.filter} onChange=${(e) => (query.filter = e.target.value)}>
            ${FILTERS.map((f) => html`<option value=${f} selected=${f === query.filter}>${f ? t(`clients.status.${f}`) : t("clients.allStatuses")}</option>`)}</select>
          <select aria-label=${t("clients.group")} value=${query.group} onChange=${(e) => (query.group = e.target.value)}>
            <option value="" selected=${!query.group}>${t("clients.allGroups")}</option>
            ${groups.value.map((g) => html`<option value=${g.name} selected=${g.name === query.group}>${g.name} (${g.clientCount})</option>`)}</select>
          <select aria-label=${t("clients.sort")} value=${query.sort} onChange=${(e) => (query.sort = e.target.value)}>
            ${SORTS.map((s) => html`<option value=${s} selected=${s === query.sort}>${t(`clients.sortBy.${s}`)}</option>`)}</select>
          <button aria-label=${t("clients.order")} onClick=${() => (query.order = query.order === "ascend" ? "descend" : "ascend")}>
            ${query.order === "ascend" ? "▲" : "▼"}</button>
        </div>
        ${selected.value.size ? html`<div class="toolbar bulk" data-testid="bulk">
          <strong>${t("clients.selected", { count: selected.value.size })}</strong>
          <button onClick=${() => bulk("enable")}>${t("clients.enable")}</button>
          <button onClick=${() => bulk("disable")}>${t("clients.disable")}</button>
          <button onClick=${() => bulk("reset")}>${t("clients.resetTraffic")}</button>
          <input list="group-names" placeholder=${t("clients.group")} aria-label=${t("clients.group")}
            value=${bulkGroup.value} onInput=${(e) => (bulkGroup.value = e.target.value)} />
          <button onClick=${() => bulk("group")}>${t("clients.setGroup")}</button>
          <button onClick=${() => (dialog.value = { kind: "adjust" })}>${t("clients.adjust")}</button>
          <button onClick=${() => (dialog.value = { kind: "attach" })}>${t("clients.inbounds")}</button>
          <button class="danger" onClick=${() => bulk("delete")}>${t("common.delete")}</button>
        </div>` : null}
        <datalist id="group-names">${groups.value.map((g) => html`<option value=${g.name}></option>`)}</datalist>
        ${!r ? html`<p class="muted">${t("common.loading")}</p>`
          : r.items.length === 0 ? html`<p class="empty">${t("clients.none")}</p>`
          : html`<div class="table-wrap" ref=${tableBox}><table class="table responsive" data-testid="clients-table">
            <thead><tr><th class="select"><input type="checkbox" aria-label=${t("clients.selectAll")} checked=${allSelected}
              onChange=${(e) => (selected.value = e.target.checked ? new Set(r.items.map((i) => i.email)) : new Set())} /></th>
              ${header("email", t("clients.email"))}${header("enable", t("common.enabled"))}${header("traffic", t("clients.traffic"))}
              ${header("expiryTime", t("clients.expiry"))}${header("inboundIds", t("clients.inbounds"))}
              <th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
            <tbody>${r.items.map((item) => row(item, r.summary))}</tbody></table></div>`}
        ${r ? html`<div class="pager">
          <span data-testid="count">${t("clients.showing", { filtered: r.filtered, total: r.total })}</span>
          <span class="spacer"></span>
          <select aria-label=${t("clients.pageSize")} value=${query.pageSize} onChange=${(e) => {
            query.pageSize = Number(e.target.value);
            localStorage.setItem("panel.pageSize", e.target.value);
          }}>${PAGE_SIZES.map((n) => html`<option value=${n} selected=${n === query.pageSize}>${t("clients.perPage", { count: n })}</option>`)}</select>
          <button disabled=${query.page <= 1} onClick=${() => (query.page -= 1)} aria-label=${t("common.previous")}>‹</button>
          <span>${t("clients.page", { page: query.page, pages })}</span>
          <button disabled=${query.page >= pages} onClick=${() => (query.page += 1)} aria-label=${t("common.next")}>›</button>
        </div>` : null}
        ${renderDialog()}
      </section>`;
    };
  },
};
