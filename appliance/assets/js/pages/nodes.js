// Nodes: the other panels this one manages. The list shows what each node's last
// heartbeat said (status, with the reason when it is not online; latency; panel and core
// versions; CPU and memory), what runs there (inbounds, clients, online, depleted), and
// whether changes wait to be replayed on it (out of step). A row opens onto the node's
// CPU and memory charts. Nodes are added and edited with a test before saving, probed,
// enabled or disabled, deleted (their inbounds stay), and selected nodes update their
// panel. The list is read again every few seconds while the page is shown: heartbeats
// change it without a change notice.
import { html, Vue } from "../lib.js";
import { api, request } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, state, toast } from "../state.js";
import { Chart, formatDate, quantity, toggle } from "../components.js";
import { BUCKETS, COLORS } from "./dashboard.js";
import { NodeForm, UpdateResults } from "./node-form.js";

const REFRESH_MS = 5000;
const METRICS = ["cpu", "mem"];
const COLUMNS = 9;

function nodeAddress(node) {
  const host = node.address.includes(":") ? `[${node.address}]` : node.address;
  return `${node.scheme}://${host}:${node.port}${node.basePath}`;
}

function meter(value) {
  const amount = Math.max(0, Math.min(100, Number(value) || 0));
  return html`<div class="meter">${quantity(`${amount.toFixed(0)}%`)}<div class="bar"><span style=${{ width: `${amount}%` }}></span></div></div>`;
}

// CPU and memory of one node over time, as the dashboard draws the server's.
const NodeCharts = {
  props: ["node"],
  setup(props) {
    const bucket = Vue.ref(Number(localStorage.getItem("panel.bucket")) || 30);
    const history = Vue.reactive({});
    let timer = 0;
    async function load() {
      const series = await Promise.all(METRICS.map((metric) =>
        api.get(`panel/api/nodes/history/${props.node.id}/${metric}/${bucket.value}`)));
      METRICS.forEach((metric, index) => {
        history[metric] = [series[index].map((point) => point.t), series[index].map((point) => point.v)];
      });
    }
    const schedule = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        if (!document.hidden) load().catch(() => {});
        schedule();
      }, Math.max(bucket.value, 5) * 1000);
    };
    Vue.onMounted(() => {
      load().catch(() => {});
      schedule();
    });
    Vue.watch(bucket, () => {
      load().catch(() => {});
      schedule();
    });
    Vue.onUnmounted(() => clearTimeout(timer));
    return () => html`<div class="stack">
      <label class="inline">${t("dash.bucket")}
        <select value=${bucket.value} onChange=${(e) => (bucket.value = Number(e.target.value))}>
          ${BUCKETS.map((b) => html`<option value=${b} selected=${b === bucket.value}>${t("dash.seconds", { count: b })}</option>`)}
        </select></label>
      <div class="charts">${METRICS.map((metric) => html`<div class="card" key=${metric} data-testid=${`node-chart-${metric}`}>
        <h3>${t(`dash.chart.${metric}`)}</h3>
        ${history[metric] ? html`<${Chart} label=${`${props.node.name}: ${t(`dash.chart.${metric}`)}`} data=${history[metric]}
            format=${(v) => `${v.toFixed(0)}%`} series=${[{ label: t(`dash.metric.${metric}`), color: COLORS[metric] }]} />`
          : html`<p class="muted">${t("common.loading")}</p>`}</div>`)}</div></div>`;
  },
};

export const NodesPage = {
  setup() {
    const nodes = Vue.ref(null);
    const selected = Vue.ref(new Set());
    const expanded = Vue.ref(new Set());
    const editing = Vue.ref(null);
    const results = Vue.ref(null);
    const probing = Vue.ref(new Set());
    let timer = 0;

    async function load() {
      const list = await api.get("panel/api/nodes/list");
      nodes.value = list;
      const known = new Set(list.map((node) => node.id));
      selected.value = new Set([...selected.value].filter((id) => known.has(id)));
    }
    const reload = () => load().catch(() => {});
    Vue.onMounted(() => {
      reload();
      timer = setInterval(() => document.hidden || reload(), REFRESH_MS);
    });
    Vue.onUnmounted(() => clearInterval(timer));
    Vue.watch(() => [state.versions.nodes, state.versions.inbounds, state.versions.clients], reload);

    const flip = (set, id, on) => {
      const next = new Set(set.value);
      if (on) next.add(id);
      else next.delete(id);
      set.value = next;
    };

    async function setEnable(node, enable) {
      try {
        await api.post(`panel/api/nodes/setEnable/${node.id}`, { enable });
        toast(enable ? t("nodes.enabledNow") : t("nodes.disabledNow"), "success");
      } catch (error) {
        // shown as a toast
      }
      reload();
    }

    async function probe(node) {
      flip(probing, node.id, true);
      try {
        const fresh = await api.post(`panel/api/nodes/probe/${node.id}`);
        nodes.value = nodes.value.map((item) => (item.id === fresh.id ? fresh : item));
        if (fresh.status === "online") toast(t("nodes.probedOnline", { name: fresh.name }), "success");
        else toast(`${fresh.name}: ${fresh.lastError || t(`nodes.status.${fresh.status}`)}`, "warning");
      } catch (error) {
        // shown as a toast
      } finally {
        flip(probing, node.id, false);
      }
    }

    async function remove(node) {
      if (!(await askConfirm(t("nodes.confirmDelete", { name: node.name, count: node.inboundCount })))) return;
      try {
        const reply = await request("POST", `panel/api/nodes/del/${node.id}`);
        toast(reply.msg || t("nodes.deleted"), "success");
      } catch (error) {
        // shown as a toast
      }
      reload();
    }

    async function updatePanels() {
      const ids = [...selected.value];
      if (!ids.length || !(await askConfirm(t("nodes.confirmUpdate", { count: ids.length })))) return;
      try {
        results.value = await api.post("panel/api/nodes/updatePanel", { ids });
      } catch (error) {
        // shown as a toast
      }
      reload();
    }

    function statusCell(node) {
      const open = expanded.value.has(node.id);
      return html`<td data-label=${t("nodes.statusColumn")}><div>
        <span class=${`badge node-status ${node.status}`} data-testid="node-status" title=${node.lastError || null}>${
          t(`nodes.status.${node.status}`)}</span>
        ${node.status === "online" ? html`<div class="muted small" data-testid="node-latency">${quantity(t("nodes.latency", { ms: node.latency }))}</div>` : null}
        ${node.lastError && !open ? html`<div><button class="link small" data-testid="node-why"
          onClick=${() => flip(expanded, node.id, true)}>${t("nodes.why")}</button></div>` : null}
        ${node.outOfStep ? html`<div class="badge core-error node-mark" data-testid="node-out-of-step"
          title=${t("nodes.outOfStepHint")}>${t("nodes.mark.outOfStep")}</div>` : null}
        ${node.ignoredReports?.count ? html`<div class="badge core-error node-mark" data-testid="node-ignored-reports"
          title=${ignoredNames(node)}>${t("nodes.mark.ignoredReports", { count: node.ignoredReports.count })}</div>` : null}</div></td>`;
    }

    function ignoredNames(node) {
      const { clients, inbounds } = node.ignoredReports;
      return t("nodes.ignoredReportsHint", { names: [...clients, ...inbounds].join(", ") });
    }

    function row(node) {
      const open = expanded.value.has(node.id);
      const main = html`<tr key=${node.id} data-node=${node.id}>
        <td class="select"><input type="checkbox" aria-label=${t("nodes.select", { name: node.name })}
          checked=${selected.value.has(node.id)} onChange=${(e) => flip(selected, node.id, e.target.checked)} /></td>
        <td data-label=${t("nodes.name")}><div><button class="icon" data-testid="expand-node" aria-expanded=${open}
          aria-label=${t("nodes.details", { name: node.name })} onClick=${() => flip(expanded, node.id, !open)}>${open ? "▾" : "▸"}</button>
          <strong>${node.name}</strong>${node.remark ? html`<div class="muted small">${node.remark}</div>` : null}
          <div class="muted small"><code dir="ltr">${nodeAddress(node)}</code></div></div></td>
        ${statusCell(node)}
        <td data-label=${t("nodes.versions")} data-testid="node-versions" class="small"><div>
          <div>${t("nodes.panelVersion", { version: node.panelVersion || "—" })}</div>
          <div>${t("nodes.coreVersion", { version: node.coreVersion || "—" })}</div></div></td>
        <td data-label=${t("nodes.counts")} data-testid="node-counts" class="small"><div>
          <div>${t("nodes.inboundCount", { count: node.inboundCount })} · ${t("nodes.clientCount", { count: node.clientCount })}</div>
          <div>${t("nodes.onlineCount", { count: node.onlineCount })} · ${t("nodes.depletedCount", { count: node.depletedCount })}</div></div></td>
        <td data-label=${t("dash.cpu")}>${node.status === "online" ? meter(node.cpu) : "—"}</td>
        <td data-label=${t("dash.memory")}>${node.status === "online" ? meter(node.mem) : "—"}</td>
        <td data-label=${t("common.enabled")}>${toggle(node.enable, (value) => setEnable(node, value), t("nodes.enableName", { name: node.name }))}</td>
        <td class="actions">
          <button onClick=${() => (editing.value = { node })}>${t("common.edit")}</button>
          <button data-testid="probe-node" disabled=${probing.value.has(node.id)} onClick=${() => probe(node)}>${t("nodes.probe")}</button>
          <button class="danger" onClick=${() => remove(node)}>${t("common.delete")}</button></td>
      </tr>`;
      if (!open) return main;
      return [main, html`<tr key=${`details-${node.id}`} class="inbound-clients" data-details-of=${node.id}><td class="node-details" colspan=${COLUMNS}>
        ${node.lastError ? html`<p class="error-text" data-testid="node-error">${node.lastError}</p>` : null}
        ${node.ignoredReports?.count ? html`<p class="error-text" data-testid="node-ignored-names">${ignoredNames(node)}</p>` : null}
        <dl class="info">
          <div><dt>${t("nodes.guid")}</dt><dd><code>${node.guid || "—"}</code></dd></div>
          <div><dt>${t("nodes.lastHeartbeat")}</dt><dd>${node.lastHeartbeat ? formatDate(node.lastHeartbeat * 1000) : t("common.never")}</dd></div>
          <div><dt>${t("nodes.tlsVerifyMode")}</dt><dd>${node.scheme === "https" ? t(`nodes.tls.${node.tlsVerifyMode}`) : "http"}</dd></div>
        </dl>
        <${NodeCharts} node=${node} /></td></tr>`];
    }

    return () => html`<section class="page">
      <div class="page-head"><h1>${t("nav.nodes")}</h1>
        <button class="primary" data-testid="add-node" onClick=${() => (editing.value = { node: null })}>${t("nodes.add")}</button></div>
      <p class="muted">${t("nodes.intro")}</p>
      ${selected.value.size ? html`<div class="toolbar bulk" data-testid="node-bulk">
        <strong>${t("nodes.selected", { count: selected.value.size })}</strong>
        <button data-testid="update-panels" onClick=${updatePanels}>${t("nodes.updatePanel")}</button></div>` : null}
      ${nodes.value === null ? html`<p class="muted">${t("common.loading")}</p>`
        : nodes.value.length === 0 ? html`<p class="empty">${t("nodes.none")}</p>`
        : html`<div class="table-wrap"><table class="table responsive" data-testid="nodes-table">
          <thead><tr><th class="select"><span class="sr-only">${t("nodes.selectColumn")}</span></th>
            <th>${t("nodes.name")}</th><th>${t("nodes.statusColumn")}</th><th>${t("nodes.versions")}</th><th>${t("nodes.counts")}</th>
            <th>${t("dash.cpu")}</th><th>${t("dash.memory")}</th><th>${t("common.enabled")}</th>
            <th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
          <tbody>${nodes.value.flatMap((node) => [row(node)].flat())}</tbody></table></div>`}
      ${editing.value ? html`<${NodeForm} node=${editing.value.node} onClose=${() => (editing.value = null)}
        onSaved=${(saved) => {
          editing.value = null;
          toast(t("nodes.saved"), "success");
          if (saved && saved.status !== "online" && saved.lastError) toast(`${saved.name}: ${saved.lastError}`, "warning");
          reload();
        }} />` : null}
      ${results.value ? html`<${UpdateResults} results=${results.value} onClose=${() => (results.value = null)} />` : null}
    </section>`;
  },
};
