// The dashboard: status cards fed by the WebSocket's status messages, history charts
// from server/history/:metric/:bucket, the core's start/stop/restart, and the instances
// sharing the database (server/cluster), shown once there is more than this one.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, state, toast } from "../state.js";
import { Chart, formatBytes, formatDate, formatUptime, percent, quantity, tq } from "../components.js";

// History buckets (seconds) of server/history and nodes/history; colours of their series.
export const BUCKETS = [2, 30, 60, 120, 180, 300];
export const COLORS = { cpu: "#2563eb", mem: "#9333ea", netUp: "#16a34a", netDown: "#ea580c", online: "#0891b2" };
const CHARTS = [
  { key: "cpu", metrics: ["cpu"], format: (v) => `${v.toFixed(0)}%` },
  { key: "mem", metrics: ["mem"], format: (v) => `${v.toFixed(0)}%` },
  { key: "net", metrics: ["netUp", "netDown"], format: (v) => `${formatBytes(v)}/s` },
  { key: "online", metrics: ["online"], format: (v) => String(Math.round(v)) },
];

// How often the instance list is asked for again while the dashboard is open.
const INSTANCES_SECONDS = 10;

function instancesTable(members) {
  return html`<div class="table-wrap"><table class="table responsive" data-testid="instances-table">
    <thead><tr><th>${t("dash.instance.name")}</th><th>${t("dash.instance.address")}</th>
      <th>${t("dash.instance.version")}</th><th>${t("dash.instance.role")}</th><th>${t("dash.instance.lastSeen")}</th></tr></thead>
    <tbody>${members.map((m) => html`<tr key=${m.guid} data-testid="instance-row">
      <td data-label=${t("dash.instance.name")}>${m.name}${m.self ? html` <span class="badge">${t("dash.instance.self")}</span>` : null}</td>
      <td data-label=${t("dash.instance.address")}>${m.address}</td>
      <td data-label=${t("dash.instance.version")}>${m.version}</td>
      <td data-label=${t("dash.instance.role")}>${m.stale
        ? html`<span class="badge core-stopped">${t("dash.instance.stale")}</span>`
        : html`<span class=${m.leader ? "badge core-running" : "badge"}>${t(m.leader ? "dash.instance.leader" : "dash.instance.follower")}</span>`}</td>
      <td data-label=${t("dash.instance.lastSeen")}>${formatDate(m.lastSeen)}</td></tr>`)}</tbody></table></div>`;
}

function card(title, value, detail, fill) {
  return html`<div class="card stat">
    <div class="stat-title">${title}</div>
    <div class="stat-value">${value}</div>
    ${fill === undefined ? null : html`<div class="bar"><span style=${{ width: `${fill}%` }}></span></div>`}
    <div class="stat-detail">${detail}</div>
  </div>`;
}

export const DashboardPage = {
  setup() {
    const bucket = Vue.ref(Number(localStorage.getItem("panel.bucket")) || 30);
    const history = Vue.reactive({});
    const busy = Vue.ref(false);
    const members = Vue.ref([]);
    let fetchedAt = 0;
    let instancesTimer = 0;

    async function loadInstances() {
      members.value = await api.get("panel/api/server/cluster");
    }

    async function loadHistory() {
      fetchedAt = Date.now();
      const metrics = CHARTS.flatMap((chart) => chart.metrics);
      const series = await Promise.all(
        metrics.map((metric) => api.get(`panel/api/server/history/${metric}/${bucket.value}`)),
      );
      for (const chart of CHARTS) {
        const first = series[metrics.indexOf(chart.metrics[0])];
        const data = [first.map((point) => point.t)];
        for (const metric of chart.metrics) {
          data.push(series[metrics.indexOf(metric)].map((point) => point.v));
        }
        history[chart.key] = data;
      }
    }

    async function loadStatus() {
      const status = await api.get("panel/api/server/status");
      state.status = status;
      state.coreState = status.core.state;
    }

    Vue.onMounted(() => {
      loadStatus().catch(() => {});
      loadHistory().catch(() => {});
      loadInstances().catch(() => {});
      instancesTimer = setInterval(() => loadInstances().catch(() => {}), INSTANCES_SECONDS * 1000);
    });
    Vue.onUnmounted(() => clearInterval(instancesTimer));
    Vue.watch(bucket, (value) => {
      localStorage.setItem("panel.bucket", String(value));
      loadHistory().catch(() => {});
    });
    // Every status push is a new sample; the charts follow at their bucket's pace.
    Vue.watch(
      () => state.status,
      () => {
        if (Date.now() - fetchedAt >= Math.max(bucket.value, 4) * 1000) loadHistory().catch(() => {});
      },
    );

    async function coreAction(action) {
      if (action === "stop" && !(await askConfirm(t("core.confirmStop")))) return;
      busy.value = true;
      try {
        const path = action === "stop" ? "stopCoreService" : "restartCoreService";
        await api.post(`panel/api/server/${path}`);
        toast(t(`core.done.${action}`), "success", "", "core");
        await loadStatus();
      } catch (error) {
        await loadStatus().catch(() => {});
      } finally {
        busy.value = false;
      }
    }

    return () => {
      const s = state.status;
      const core = (state.coreState || "unknown").replace(" ", "_");
      const running = core === "running";
      const me = members.value.find((m) => m.self);
      return html`<section class="page">
        <div class="page-head"><h1>${t("nav.dashboard")}</h1></div>
        ${me && me.writesRefused ? html`<div class="card error-text" role="alert" data-testid="writes-refused">${me.writesRefused}</div>` : null}
        ${s
          ? html`<div class="cards">
            ${card(t("dash.cpu"), quantity(`${s.cpu.toFixed(1)}%`), t("dash.cores", { count: s.cpuCores }), s.cpu)}
            ${card(t("dash.memory"), quantity(formatBytes(s.mem.current)), tq("dash.ofTotal", { total: formatBytes(s.mem.total) }), percent(s.mem.current, s.mem.total))}
            ${card(t("dash.swap"), quantity(formatBytes(s.swap.current)), tq("dash.ofTotal", { total: formatBytes(s.swap.total) }), percent(s.swap.current, s.swap.total))}
            ${card(t("dash.disk"), quantity(formatBytes(s.disk.current)), tq("dash.ofTotal", { total: formatBytes(s.disk.total) }), percent(s.disk.current, s.disk.total))}
            ${card(t("dash.network"), html`↑ ${quantity(`${formatBytes(s.netIO.up)}/s`)}`, html`↓ ${quantity(`${formatBytes(s.netIO.down)}/s`)}`)}
            ${card(t("dash.traffic"), html`↑ ${quantity(formatBytes(s.netTraffic.sent))}`, html`↓ ${quantity(formatBytes(s.netTraffic.recv))}`)}
            ${card(t("dash.connections"), `TCP ${s.tcpCount}`, `UDP ${s.udpCount}`)}
            ${card(t("dash.load"), s.load.load1.toFixed(2), quantity(`${s.load.load5.toFixed(2)} · ${s.load.load15.toFixed(2)}`))}
            ${card(t("dash.uptime"), formatUptime(s.uptime), t("dash.panelVersion", { version: s.panelVersion }))}
            <div class="card stat core-card">
              <div class="stat-title">${t("core.label")}</div>
              <div class="stat-value"><span class=${`badge core-${core}`}>${t(`core.state.${core}`)}</span></div>
              <div class="stat-detail">${s.core.version ? t("core.version", { version: s.core.version }) : t("core.noVersion")}</div>
              ${s.core.errorMsg ? html`<div class="error-text">${s.core.errorMsg}</div>` : null}
              <div class="actions">
                <button disabled=${busy.value} onClick=${() => coreAction(running ? "restart" : "start")}>
                  ${running ? t("core.restart") : t("core.start")}</button>
                <button disabled=${busy.value || !running} onClick=${() => coreAction("stop")}>${t("core.stop")}</button>
              </div>
            </div>
          </div>`
          : html`<p class="muted">${t("common.loading")}</p>`}
        ${members.value.length > 1 ? html`<div class="page-head"><h2>${t("dash.instances")}</h2></div>
          <p class="muted">${t("dash.instancesIntro")}</p>${instancesTable(members.value)}` : null}
        <div class="page-head">
          <h2>${t("dash.history")}</h2>
          <label class="inline">${t("dash.bucket")}
            <select value=${bucket.value} onChange=${(e) => (bucket.value = Number(e.target.value))}>
              ${BUCKETS.map((b) => html`<option value=${b} selected=${b === bucket.value}>${t("dash.seconds", { count: b })}</option>`)}
            </select></label>
        </div>
        <div class="charts">
          ${CHARTS.map((chart) => html`<div class="card" key=${chart.key}>
            <h3>${t(`dash.chart.${chart.key}`)}</h3>
            ${history[chart.key]
              ? html`<${Chart} label=${t(`dash.chart.${chart.key}`)} data=${history[chart.key]} format=${chart.format}
                  series=${chart.metrics.map((m) => ({ label: t(`dash.metric.${m}`), color: COLORS[m] }))} />`
              : html`<p class="muted">${t("common.loading")}</p>`}
          </div>`)}
        </div>
      </section>`;
    };
  },
};
