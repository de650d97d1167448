// Many clients at once from a pattern: a count, emails made of a prefix, a number or a
// random part, and a suffix, with the same quota, expiry, device limit, inbounds and
// group for all. The panel's bulk create judges each one; the dialog then says how many
// it created and why it refused the others.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { checkbox, field, Modal, numberInput, selectInput, textInput } from "../components.js";

const GB = 1024 ** 3;
const DAY = 86400000;
const MAX_COUNT = 10000;

function randomPart() {
  const bytes = crypto.getRandomValues(new Uint8Array(5));
  return Array.from(bytes, (b) => b.toString(36).padStart(2, "0")).join("").slice(0, 8);
}

export function generatedEmails({ count, mode, prefix, suffix, start }) {
  const emails = [];
  for (let n = 0; n < count; n += 1) {
    emails.push(`${prefix}${mode === "random" ? randomPart() : Number(start) + n}${suffix}`);
  }
  return emails;
}

export const GeneratorDialog = {
  props: ["inbounds", "onClose", "onDone"],
  setup(props) {
    const model = Vue.reactive({
      count: 10, mode: "number", prefix: "user", suffix: "", start: 1,
      totalGB: 0, expiryDays: 0, firstUse: false, deviceLimit: 0, group: "",
    });
    const chosen = Vue.ref(new Set(props.inbounds.length === 1 ? [props.inbounds[0].id] : []));
    const busy = Vue.ref(false);
    const outcome = Vue.ref(null);

    function toggle(id, on) {
      const next = new Set(chosen.value);
      if (on) next.add(id);
      else next.delete(id);
      chosen.value = next;
    }

    function expiryTime() {
      const days = Number(model.expiryDays) || 0;
      if (days <= 0) return 0;
      return model.firstUse ? -days * DAY : Date.now() + days * DAY;
    }

    async function submit(event) {
      event.preventDefault();
      const count = Math.min(MAX_COUNT, Math.max(1, Math.floor(Number(model.count) || 0)));
      const client = {
        totalGB: Math.round((Number(model.totalGB) || 0) * GB), expiryTime: expiryTime(),
        deviceLimit: Number(model.deviceLimit) || 0, group: model.group.trim(), enable: true,
      };
      const inboundIds = [...chosen.value];
      const items = generatedEmails({ ...model, count }).map((email) => ({ client: { ...client, email }, inboundIds }));
      busy.value = true;
      try {
        outcome.value = await api.post("panel/api/clients/bulkCreate", items);
        props.onDone();
      } catch (error) {
        // the toast shows the panel's message; the dialog stays open to fix it
      } finally {
        busy.value = false;
      }
    }

    function result() {
      const { created, skipped } = outcome.value;
      return html`<div class="stack" data-testid="generate-result">
        <p><strong>${t("clients.generated", { count: created })}</strong></p>
        ${skipped.length ? html`<p>${t("clients.generateRefused", { count: skipped.length })}</p>
          <ul class="small" data-testid="generate-refusals">${skipped.map((item) =>
            html`<li>${item.email || item.id}: ${item.reason}</li>`)}</ul>` : null}</div>`;
    }

    function form() {
      const modes = [["number", t("clients.generateNumbered")], ["random", t("clients.generateRandom")]];
      return html`<form id="generate-form" class="form-grid" onSubmit=${submit}>
        ${field(t("clients.generateCount"), numberInput(model, "count", { name: "count", min: 1, max: MAX_COUNT, required: true }))}
        ${field(t("clients.generateMode"), selectInput(model, "mode", modes, { name: "mode" }))}
        ${field(t("clients.generatePrefix"), textInput(model, "prefix", { name: "prefix" }))}
        ${field(t("clients.generateSuffix"), textInput(model, "suffix", { name: "suffix" }), t("clients.generateSuffixHint"))}
        ${model.mode === "number" ? field(t("clients.generateStart"), numberInput(model, "start", { name: "start", min: 0 })) : null}
        ${field(t("clients.totalGB"), numberInput(model, "totalGB", { name: "totalGB", min: 0, step: "any" }), t("common.zeroUnlimited"))}
        ${field(t("clients.days"), numberInput(model, "expiryDays", { name: "expiryDays", min: 0 }), t("common.zeroUnlimited"))}
        ${checkbox(model, "firstUse", t("clients.afterFirstUseMode"), { name: "firstUse" })}
        ${field(t("clients.deviceLimit"), numberInput(model, "deviceLimit", { name: "deviceLimit", min: -1, step: 1 }), t("clients.deviceLimitHint"))}
        ${field(t("clients.group"), textInput(model, "group", { name: "group", list: "group-names" }))}
        <fieldset class="span-2"><legend>${t("clients.inbounds")}</legend>
          ${props.inbounds.length === 0 ? html`<p class="muted">${t("clients.noInbounds")}</p>` : null}
          <div class="row wrap">${props.inbounds.map((inbound) => html`<label class="check" key=${inbound.id}>
            <input type="checkbox" name="inbound" value=${inbound.id} checked=${chosen.value.has(inbound.id)}
              onChange=${(e) => toggle(inbound.id, e.target.checked)} />
            <span>${inbound.remark || inbound.tag} (${inbound.protocol}:${inbound.port})</span></label>`)}</div>
        </fieldset>
        <p class="muted small span-2">${t("clients.generateExample", { email: generatedEmails({ ...model, count: 1 })[0] })}</p>
      </form>`;
    }

    return () => html`<${Modal} wide=${true} title=${t("clients.generate")} onClose=${props.onClose}
      body=${() => (outcome.value ? result() : form())}
      footer=${() => outcome.value ? html`<button class="primary" onClick=${props.onClose}>${t("common.close")}</button>`
        : html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
          <button class="primary" type="submit" form="generate-form" disabled=${busy.value}>${t("clients.generateCreate")}</button>`} />`;
  },
};
