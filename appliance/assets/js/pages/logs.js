// Logs: the panel's own log (level, count, system journal) and the core's access and
// error lines (text filter, direct/blocked/proxy traffic), fetched on demand.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { checkbox, field, selectInput, textInput } from "../components.js";

const COUNTS = [["50", "50"], ["100", "100"], ["500", "500"], ["1000", "1000"]];
const LEVELS = ["debug", "info", "notice", "warning", "error"];

export const LogsPage = {
  setup() {
    const tab = Vue.ref("panel");
    const panel = Vue.reactive({ count: "100", level: "info", syslog: false });
    const core = Vue.reactive({ count: "100", filter: "", showDirect: true, showBlocked: true, showProxy: true });
    const text = Vue.ref(null);
    const busy = Vue.ref(false);
    // The newest line is the last: the log opens scrolled to it and follows new lines,
    // unless the admin scrolled up to read older ones.
    const box = Vue.ref(null);
    let following = true;
    const onScroll = () => {
      const log = box.value;
      if (log) following = log.scrollHeight - log.scrollTop - log.clientHeight < 4;
    };
    Vue.watch(text, () => Vue.nextTick(() => {
      if (following && box.value) box.value.scrollTop = box.value.scrollHeight;
    }));

    async function load() {
      busy.value = true;
      try {
        if (tab.value === "panel") {
          text.value = await api.post(`panel/api/server/logs/${panel.count}`, { level: panel.level, syslog: panel.syslog });
        } else {
          text.value = await api.postForm(`panel/api/server/corelogs/${core.count}`, {
            filter: core.filter, showDirect: String(core.showDirect),
            showBlocked: String(core.showBlocked), showProxy: String(core.showProxy),
          });
        }
      } catch (error) {
        text.value = "";
      } finally {
        busy.value = false;
      }
    }
    Vue.onMounted(load);
    Vue.watch(tab, () => {
      following = true;
      load();
    });
    Vue.watch(() => ({ ...panel }), () => tab.value === "panel" && load());
    Vue.watch(() => [core.count, core.showDirect, core.showBlocked, core.showProxy], () => tab.value === "core" && load());

    function tabButton(name) {
      return html`<button role="tab" aria-selected=${tab.value === name} class=${tab.value === name ? "tab active" : "tab"}
        onClick=${() => (tab.value = name)}>${t(`logs.${name}`)}</button>`;
    }

    return () => html`<section class="page">
      <div class="page-head"><h1>${t("nav.logs")}</h1></div>
      <div class="tabs" role="tablist">${tabButton("panel")}${tabButton("core")}</div>
      <form class="toolbar" onSubmit=${(e) => { e.preventDefault(); load(); }}>
        ${tab.value === "panel"
          ? html`${field(t("logs.count"), selectInput(panel, "count", COUNTS))}
            ${field(t("logs.level"), selectInput(panel, "level", LEVELS.map((l) => [l, t(`logs.levels.${l}`)])))}
            ${checkbox(panel, "syslog", t("logs.syslog"))}`
          : html`${field(t("logs.count"), selectInput(core, "count", COUNTS))}
            ${field(t("logs.filter"), textInput(core, "filter", { type: "search" }))}
            ${checkbox(core, "showDirect", t("logs.direct"))}
            ${checkbox(core, "showBlocked", t("logs.blocked"))}
            ${checkbox(core, "showProxy", t("logs.proxy"))}`}
        <button class="primary" type="submit" disabled=${busy.value}>${t("common.refresh")}</button>
      </form>
      ${text.value === null ? html`<p class="muted">${t("common.loading")}</p>`
        : text.value ? html`<pre class="log" data-testid="log" tabindex="0" ref=${box} onScroll=${onScroll}>${text.value}</pre>`
          : html`<p class="empty">${t("logs.empty")}</p>`}
    </section>`;
  },
};
