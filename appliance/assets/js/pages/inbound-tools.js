// Inbound tools beside the add/edit form: the fallback rules of a master inbound, and one
// inbound's export to a JSON file and import from one. The panel judges every rule and
// every import; its refusal (which rule, which field) is the toast the user sees, and the
// dialog stays open to fix it.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { toast } from "../state.js";
import { field, Modal, numberInput, selectInput, textArea, textInput } from "../components.js";

const ALPNS = ["", "h2", "http/1.1"];
const XVERS = ["0", "1", "2"];

// Whether the panel lets this inbound hold fallback rules: VLESS or Trojan on TCP with TLS
// or REALITY (the rule of appliance/services/inbounds/fallbacks.py).
export function canHoldFallbacks(inbound) {
  const stream = inbound.streamSettings || {};
  return ["vless", "trojan"].includes(inbound.protocol)
    && ["tcp", "raw"].includes(stream.network || "tcp")
    && ["tls", "reality"].includes(stream.security || "none");
}

function inboundLabel(inbound) {
  return `${inbound.remark || inbound.tag} (${inbound.protocol}:${inbound.port})`;
}

let rowKey = 0;
function editableRule(rule = {}) {
  return {
    key: ++rowKey,
    childId: rule.childId ? String(rule.childId) : "",
    name: rule.name || "", alpn: rule.alpn || "", path: rule.path || "",
    dest: rule.dest || "", xver: String(rule.xver || 0),
  };
}

export const FallbacksDialog = {
  props: ["inbound", "onClose"],
  setup(props) {
    const rules = Vue.ref(null);
    const children = Vue.ref([]);
    const busy = Vue.ref(false);
    const path = `panel/api/inbounds/${props.inbound.id}/fallbacks`;
    Vue.onMounted(async () => {
      try {
        const [stored, options] = await Promise.all([api.get(path), api.get("panel/api/inbounds/options")]);
        children.value = options.filter((option) => option.id !== props.inbound.id);
        rules.value = stored.map(editableRule);
      } catch (error) {
        props.onClose();
      }
    });

    function move(index, step) {
      const [rule] = rules.value.splice(index, 1);
      rules.value.splice(index + step, 0, rule);
    }

    async function save(event) {
      event.preventDefault();
      const fallbacks = rules.value.map((rule, index) => ({
        childId: rule.childId ? Number(rule.childId) : null, name: rule.name.trim(), alpn: rule.alpn,
        path: rule.path.trim(), dest: rule.dest.trim(), xver: Number(rule.xver), sortOrder: index,
      }));
      busy.value = true;
      try {
        await api.post(path, { fallbacks });
        toast(t("fallback.saved"), "success");
        props.onClose();
      } catch (error) {
        // the toast names the rule and the field that are wrong; the dialog stays open
      } finally {
        busy.value = false;
      }
    }

    function rule(item, index) {
      const n = index + 1;
      const childChoices = [["", t("fallback.noChild")], ...children.value.map((c) => [String(c.id), inboundLabel(c)])];
      const alpns = ALPNS.includes(item.alpn) ? ALPNS : [...ALPNS, item.alpn];
      return html`<fieldset key=${item.key} data-testid="fallback-row">
        <legend>${t("fallback.rule", { n })}</legend>
        ${field(t("fallback.child"), selectInput(item, "childId", childChoices, { name: "childId" }))}
        ${field(t("fallback.dest"), textInput(item, "dest", {
          name: "dest", maxlength: 255, placeholder: item.childId ? t("fallback.destOfChild") : "8080" }), t("fallback.destHint"))}
        ${field(t("inbound.sni"), textInput(item, "name", { name: "name", maxlength: 255 }), t("fallback.anyHint"))}
        ${field(t("inbound.alpn"), selectInput(item, "alpn", alpns.map((a) => [a, a || t("fallback.any")]), { name: "alpn" }))}
        ${field(t("inbound.path"), textInput(item, "path", { name: "path", maxlength: 255 }), t("fallback.anyHint"))}
        ${field(t("fallback.xver"), selectInput(item, "xver", XVERS.map((x) => [x, x === "0" ? t("fallback.xverOff") : x]), { name: "xver" }))}
        <div class="row span-all">
          <button type="button" class="icon" data-testid="move-up" aria-label=${t("fallback.moveUp", { n })}
            disabled=${index === 0} onClick=${() => move(index, -1)}>↑</button>
          <button type="button" class="icon" data-testid="move-down" aria-label=${t("fallback.moveDown", { n })}
            disabled=${index === rules.value.length - 1} onClick=${() => move(index, 1)}>↓</button>
          <span class="spacer"></span>
          <button type="button" class="danger" data-testid="remove-fallback" aria-label=${t("fallback.remove", { n })}
            onClick=${() => rules.value.splice(index, 1)}>${t("common.delete")}</button></div>
      </fieldset>`;
    }

    const name = props.inbound.remark || props.inbound.tag;
    return () => html`<${Modal} wide=${true} title=${t("fallback.title", { name })} onClose=${props.onClose}
      body=${() => rules.value === null ? html`<p class="muted">${t("common.loading")}</p>`
        : html`<form id="fallback-form" class="stack" onSubmit=${save}>
          <p class="muted small">${t("fallback.intro")}</p>
          ${rules.value.length === 0 ? html`<p class="empty">${t("fallback.none")}</p>` : rules.value.map(rule)}
          <div><button type="button" data-testid="add-fallback" onClick=${() => rules.value.push(editableRule())}>
            ${t("fallback.add")}</button></div></form>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="fallback-form" disabled=${busy.value || rules.value === null}>${t("common.save")}</button>`} />`;
  },
};

// One inbound as inbounds/get returns it, saved as a file that Import takes back.
export async function exportInbound(inbound) {
  try {
    const full = await api.get(`panel/api/inbounds/get/${inbound.id}`);
    const blob = new Blob([JSON.stringify(full, null, 2)], { type: "application/json" });
    const url = URL.createObjectURL(blob);
    const link = document.createElement("a");
    link.href = url;
    link.download = `inbound-${full.tag || full.id}.json`;
    link.click();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
    toast(t("inbound.exported", { name: full.remark || full.tag }), "success");
  } catch (error) {
    // shown as a toast
  }
}

function parseInbound(text) {
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? { value } : { error: t("inbound.importNotObject") };
  } catch (error) {
    return { error: error.message };
  }
}

// An exported inbound comes back as a new one: the panel drops its id and counters. Its
// port and tag would clash with the original's, so both are offered for change first.
export const InboundImportDialog = {
  props: ["onClose", "onDone"],
  setup(props) {
    const model = Vue.reactive({ data: "", port: 0, tag: "" });
    const busy = Vue.ref(false);
    const parsed = Vue.computed(() => (model.data.trim() ? parseInbound(model.data) : { error: "" }));
    Vue.watch(parsed, ({ value }) => {
      if (!value) return;
      model.port = Number(value.port) || 0;
      model.tag = typeof value.tag === "string" ? value.tag : "";
    });
    async function readFile(event) {
      const file = event.target.files[0];
      if (file) model.data = await file.text();
    }
    async function submit(event) {
      event.preventDefault();
      const { value, error } = parsed.value;
      if (!value) {
        toast(t("inbound.importNotJson", { error }), "error");
        return;
      }
      busy.value = true;
      try {
        const payload = { ...value, port: model.port, tag: model.tag.trim() };
        const created = await api.postForm("panel/api/inbounds/import", { data: JSON.stringify(payload) });
        toast(t("inbound.imported", { name: created.remark || created.tag }), "success");
        props.onDone();
      } catch (error) {
        // shown as a toast; the dialog stays open to change the port or tag
      } finally {
        busy.value = false;
      }
    }
    return () => html`<${Modal} title=${t("inbound.import")} onClose=${props.onClose}
      body=${() => html`<form id="inbound-import-form" class="stack" onSubmit=${submit}>
        <p class="muted small">${t("inbound.importHint")}</p>
        ${field(t("inbound.importFile"), html`<input type="file" name="inboundFile" accept=".json,application/json" onChange=${readFile} />`)}
        ${field(t("inbound.importText"), textArea(model, "data", { name: "inboundData", rows: 8, required: true, class: "code-editor" }))}
        ${parsed.value.value ? html`<div class="form-grid">
          ${field(t("inbound.port"), numberInput(model, "port", { name: "importPort", min: 1, max: 65535 }))}
          ${field(t("inbound.tag"), textInput(model, "tag", { name: "importTag" }), t("inbound.tagHint"))}</div>`
          : parsed.value.error ? html`<p class="error-text">${t("inbound.importNotJson", { error: parsed.value.error })}</p>` : null}
      </form>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="inbound-import-form" disabled=${busy.value}>${t("inbound.import")}</button>`} />`;
  },
};
