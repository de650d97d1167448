// The settings page's audit log: recent admin actions newest first (who, what, which
// record, from where, when, how it ended), a page at a time, filtered by who acted and by
// route, with a download of every entry the filters select.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { apiUrl } from "../prefetch.js";
import { t } from "../i18n.js";
import { formatDate } from "../components.js";

const PAGE_SIZE = 20;

function outcome(entry) {
  if (entry.success) return html`<span class="badge core-running">${t("audit.success")}</span>`;
  return html`<span class="badge core-error" title=${entry.msg}>${entry.status}</span> <span class="small">${entry.msg}</span>`;
}

export const AuditCard = {
  setup() {
    const filters = Vue.reactive({ actor: "", route: "" });
    const applied = Vue.reactive({ actor: "", route: "" });
    const page = Vue.ref(1);
    const result = Vue.ref(null);
    const query = () => ({ actor: applied.actor, route: applied.route });
    const load = async () => {
      result.value = await api.get("panel/api/audit/list", { query: { ...query(), page: page.value, pageSize: PAGE_SIZE } });
    };
    Vue.onMounted(() => load().catch(() => {}));
    Vue.watch(page, () => load().catch(() => {}));
    function filter(event) {
      event.preventDefault();
      applied.actor = filters.actor.trim();
      applied.route = filters.route.trim();
      if (page.value === 1) load().catch(() => {});
      else page.value = 1;
    }
    return () => {
      const r = result.value;
      const pages = r ? Math.max(1, Math.ceil(r.total / r.pageSize)) : 1;
      return html`<div class="card" data-testid="audit">
        <h2>${t("audit.title")}</h2>
        <form class="toolbar" onSubmit=${filter}>
          <input aria-label=${t("audit.actor")} placeholder=${t("audit.actor")} maxlength="64" name="auditActor"
            value=${filters.actor} onInput=${(e) => (filters.actor = e.target.value)} />
          <input aria-label=${t("audit.route")} placeholder=${t("audit.route")} maxlength="255" name="auditRoute"
            value=${filters.route} onInput=${(e) => (filters.route = e.target.value)} />
          <button type="submit">${t("audit.filter")}</button>
          <button type="button" onClick=${() => load().catch(() => {})}>${t("common.refresh")}</button>
          <a class="button" href=${apiUrl("panel/api/audit/export", query()).href} download>${t("audit.export")}</a></form>
        ${!r ? html`<p class="muted">${t("common.loading")}</p>`
          : r.items.length === 0 ? html`<p class="empty">${t("audit.none")}</p>`
          : html`<div class="table-wrap"><table class="table responsive" data-testid="audit-table">
            <thead><tr><th>${t("audit.when")}</th><th>${t("audit.actor")}</th><th>${t("audit.action")}</th>
              <th>${t("audit.record")}</th><th>${t("audit.address")}</th><th>${t("audit.outcome")}</th></tr></thead>
            <tbody>${r.items.map((entry) => html`<tr key=${entry.id}>
              <td data-label=${t("audit.when")}>${formatDate(entry.at)}</td>
              <td data-label=${t("audit.actor")}>${entry.actor} <span class="muted small">${entry.actorKind === "token" ? t("audit.token") : ""}</span></td>
              <td data-label=${t("audit.action")}><code>${entry.method} ${entry.path}</code>${entry.fields.length
                ? html`<div class="muted small">${t("audit.fields", { fields: entry.fields.join(", ") })}</div>` : null}</td>
              <td data-label=${t("audit.record")}>${entry.target}</td>
              <td data-label=${t("audit.address")}>${entry.address}</td>
              <td data-label=${t("audit.outcome")}>${outcome(entry)}</td></tr>`)}</tbody></table></div>`}
        ${r ? html`<div class="pager">
          <span data-testid="audit-count">${t("audit.count", { total: r.total })}</span>
          <span class="spacer"></span>
          <button disabled=${page.value <= 1} onClick=${() => (page.value -= 1)} aria-label=${t("common.previous")}>‹</button>
          <span>${t("clients.page", { page: page.value, pages })}</span>
          <button disabled=${page.value >= pages} onClick=${() => (page.value += 1)} aria-label=${t("common.next")}>›</button>
        </div>` : null}
      </div>`;
    };
  },
};
