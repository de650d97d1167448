// The settings page's subscription templates: one editor per format (sing-box, Clash,
// Xray JSON, the page), a client to preview it for, and the rendered result or the
// sandbox's, the parser's or the app's refusal. Saving checks the template the same way.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { toast } from "../state.js";

export const TemplatesCard = {
  setup() {
    const entries = Vue.ref([]);
    const chosen = Vue.ref("singbox");
    const texts = Vue.reactive({});
    const email = Vue.ref("");
    const shown = Vue.reactive({ body: "", error: "" });
    const load = async () => {
      entries.value = await api.get("panel/api/sub/templates/list");
      for (const entry of entries.value) texts[entry.format] = entry.template;
    };
    Vue.onMounted(() => load().catch(() => {}));
    const current = () => entries.value.find((entry) => entry.format === chosen.value);
    async function save() {
      try {
        await api.post(`panel/api/sub/templates/save/${chosen.value}`, { template: texts[chosen.value] || "" });
        toast(t("templates.saved"), "success");
        await load();
      } catch (error) {
        // the toast says what was refused
      }
    }
    async function reset() {
      try {
        await api.post(`panel/api/sub/templates/reset/${chosen.value}`);
        await load();
      } catch (error) {
        // shown as a toast
      }
    }
    async function preview() {
      shown.body = "";
      shown.error = "";
      try {
        const reply = await api.post(`panel/api/sub/templates/preview/${chosen.value}`,
          { email: email.value, template: texts[chosen.value] || "" }, { quiet: true });
        shown.body = reply.body;
      } catch (error) {
        shown.error = error.message;
      }
    }
    return () => {
      const entry = current();
      return html`<div class="card" data-testid="templates">
        <h2>${t("templates.title")}</h2>
        <p class="muted small">${t("templates.intro")}</p>
        <div class="toolbar">${entries.value.map((item) => html`<button type="button" key=${item.format}
          class=${item.format === chosen.value ? "primary" : ""} data-testid=${`template-tab-${item.format}`}
          onClick=${() => { chosen.value = item.format; shown.body = ""; shown.error = ""; }}>${item.title}</button>`)}</div>
        ${entry ? html`<label class="field"><span class="field-label">${entry.title}</span>
          <textarea name="template" rows="12" spellcheck="false" value=${texts[entry.format] ?? ""}
            placeholder=${t("templates.builtIn")}
            onInput=${(event) => (texts[entry.format] = event.target.value)}></textarea>
          <small class="hint">${t("templates.values", { values: entry.values.join(", "), file: entry.file })}</small></label>` : null}
        <div class="actions">
          <button type="button" class="primary" data-testid="template-save" onClick=${save}>${t("common.save")}</button>
          <button type="button" data-testid="template-reset" onClick=${reset}>${t("templates.reset")}</button>
          <input aria-label=${t("templates.client")} placeholder=${t("templates.client")} name="templateEmail"
            value=${email.value} onInput=${(event) => (email.value = event.target.value)} />
          <button type="button" data-testid="template-preview" onClick=${preview}>${t("templates.preview")}</button>
        </div>
        ${shown.error ? html`<p class="error" data-testid="template-error">${shown.error}</p>` : null}
        ${shown.body ? html`<pre class="code" data-testid="template-result">${shown.body}</pre>` : null}
      </div>`;
    };
  },
};
