// The core's own files on the core page: which release of the core runs (with a picker of
// the published versions to install or switch to) and the geo files its routing rules
// read (with their dates and an update button). Both downloads take a while, so each shows
// that it is running and then the panel's answer in place. The geo file list is shared
// with the routing tab, whose presets say which file they need while it is missing: the
// core would otherwise refuse the template with "geoip.dat: no such file".
import { html, Vue } from "../lib.js";
import { api, request } from "../api.js";
import { t } from "../i18n.js";
import { toast } from "../state.js";
import { formatBytes, formatDate } from "../components.js";

export const geoFiles = Vue.reactive({ list: null });

export async function loadGeoFiles() {
  geoFiles.list = await api.get("panel/api/server/getGeofiles");
}

// The geo files that `rules` name (geoip:..., geosite:...) and the core's folder lacks.
export function missingGeoFiles(rules) {
  const needed = new Set();
  for (const rule of rules) {
    for (const value of [...(rule.ip || []), ...(rule.domain || [])]) {
      if (typeof value !== "string") continue;
      if (value.startsWith("geoip:")) needed.add("geoip.dat");
      if (value.startsWith("geosite:")) needed.add("geosite.dat");
    }
  }
  return (geoFiles.list || []).filter((file) => !file.installed && needed.has(file.name)).map((file) => file.name);
}

export const CoreFilesCard = {
  setup() {
    const versions = Vue.ref([]);
    const chosen = Vue.ref("");
    const listProblem = Vue.ref("");
    const running = Vue.ref("");
    // The download under way ("" when none), and the panel's answer to the last one.
    const task = Vue.reactive({ busy: "", result: "", failed: false });

    async function loadVersions() {
      try {
        versions.value = await api.get("panel/api/server/getCoreVersion", { quiet: true });
        if (!versions.value.includes(chosen.value)) chosen.value = versions.value[0] || "";
        listProblem.value = "";
      } catch (error) {
        listProblem.value = error.message;
      }
    }
    async function loadRunning() {
      running.value = (await api.get("panel/api/server/status")).core.version || "";
    }
    Vue.onMounted(() => {
      loadVersions();
      loadRunning().catch(() => {});
      loadGeoFiles().catch(() => {});
    });

    async function download(busy, path, form) {
      Object.assign(task, { busy, result: "", failed: false });
      try {
        task.result = (await request("POST", path, { form, quiet: true })).msg;
        toast(task.result, "success");
      } catch (error) {
        Object.assign(task, { result: error.message, failed: true });
      } finally {
        task.busy = "";
        loadGeoFiles().catch(() => {});
        loadRunning().catch(() => {});
      }
    }
    const install = () => download(t("core.installing", { version: chosen.value }),
      `panel/api/server/installCore/${encodeURIComponent(chosen.value)}`);
    const updateGeo = () => download(t("core.updatingGeo"), "panel/api/server/updateGeofile", {});

    function geoRows() {
      return (geoFiles.list || []).map((file) => html`<tr key=${file.name} data-geofile=${file.name}>
        <td>${file.name}</td>
        <td>${file.installed ? formatDate(file.updatedAt) : html`<span class="badge warning">${t("core.geoMissing")}</span>`}</td>
        <td>${file.installed ? formatBytes(file.size) : "-"}</td></tr>`);
    }

    return () => html`<div class="card" data-testid="core-files">
      <h2>${t("core.files")}</h2>
      <p class="muted small">${t("core.filesHint")}</p>
      <p data-testid="core-running-version">${running.value ? t("core.version", { version: running.value }) : t("core.noVersion")}</p>
      <div class="toolbar">
        <label class="field"><span class="field-label">${t("core.versionToInstall")}</span>
          <select name="coreVersion" value=${chosen.value} onChange=${(event) => (chosen.value = event.target.value)}>
            ${versions.value.map((version) => html`<option value=${version} selected=${version === chosen.value}>${version}</option>`)}</select></label>
        <button type="button" data-testid="install-core" disabled=${!!task.busy || !chosen.value} onClick=${install}>${t("core.install")}</button>
        <button type="button" onClick=${loadVersions}>${t("common.refresh")}</button></div>
      ${listProblem.value ? html`<p class="error-text" role="alert">${t("core.noVersions", { error: listProblem.value })}</p>` : null}
      <table class="table"><thead><tr><th>${t("core.geoFile")}</th><th>${t("core.geoUpdated")}</th><th>${t("core.geoSize")}</th></tr></thead>
        <tbody>${geoRows()}</tbody></table>
      <div class="actions"><button type="button" data-testid="update-geofiles" disabled=${!!task.busy} onClick=${updateGeo}>${t("core.updateGeo")}</button></div>
      ${task.busy ? html`<p role="status" data-testid="core-files-progress"><progress></progress> ${task.busy}</p>` : null}
      ${task.result ? html`<p class=${task.failed ? "error-text" : "success-text"} role=${task.failed ? "alert" : "status"}
        data-testid="core-files-result">${task.result}</p>` : null}
    </div>`;
  },
};
