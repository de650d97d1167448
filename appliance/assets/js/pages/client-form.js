// The add/edit form of a client: identity, the inbounds it is attached to, quota and
// expiry, limits (IPs, devices) and labels. Editing replaces the record (the API's update is not a
// patch) and then attaches or detaches inbounds whose boxes changed. A new client starts
// on the inbound it was added from, else the only inbound, else the inbounds the last
// new client got.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { toast } from "../state.js";
import { checkbox, DateInput, field, localDay, Modal, numberInput, selectInput, textInput } from "../components.js";
import { subscriptionUrl } from "./client-extras.js";

const GB = 1024 ** 3;
const DAY = 86400000;
const FLOWS = ["", "xtls-rprx-vision", "xtls-rprx-vision-udp443"];
const LAST_INBOUNDS = "panel.clientInbounds";

function lastInbounds() {
  try {
    const ids = JSON.parse(localStorage.getItem(LAST_INBOUNDS) || "[]");
    return Array.isArray(ids) ? ids.filter(Number.isInteger) : [];
  } catch (error) {
    return [];
  }
}

// The inbounds a new client starts with, among those that exist.
function startingInbounds(inbounds, preselect) {
  const known = new Set(inbounds.map((inbound) => inbound.id));
  if (preselect && preselect.length) return preselect.filter((id) => known.has(id));
  if (inbounds.length === 1) return [inbounds[0].id];
  return lastInbounds().filter((id) => known.has(id));
}

// A random (version 4) UUID; crypto.randomUUID exists only in a secure context, and a
// fresh server is often reached at http://<its address>.
function randomUuid() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// 16 letters and digits, like the passwords the panel generates.
function randomPassword() {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bytes = crypto.getRandomValues(new Uint32Array(16));
  return Array.from(bytes, (b) => alphabet[b % alphabet.length]).join("");
}

function randomSubId() {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export const ClientForm = {
  props: ["email", "inbounds", "preselect", "onClose", "onSaved"],
  setup(props) {
    const editing = !!props.email;
    const loaded = Vue.ref(!editing);
    const busy = Vue.ref(false);
    const model = Vue.reactive({
      email: "", enable: true, subId: randomSubId(), comment: "", group: "", limitIp: 0, deviceLimit: 0,
      tgId: 0, reset: 0, flow: "", totalGB: 0, expiryMode: "never", expiryDate: "", expiryDays: 30,
      presetFrom: "now", secret: "", adTag: "", auth: "", id: randomUuid(), password: randomPassword(),
    });
    const selected = Vue.ref(new Set());
    const subUrl = Vue.ref("");
    const missingInbound = Vue.ref(false);
    let touched = false;
    let original = null;
    let originalIds = [];

    // The list of inbounds may arrive after the form opened.
    Vue.watch(() => props.inbounds, (inbounds) => {
      if (!editing && !touched) selected.value = new Set(startingInbounds(inbounds, props.preselect));
    }, { immediate: true });

    Vue.onMounted(async () => {
      if (!editing) return;
      try {
        const reply = await api.get(`panel/api/clients/get/${encodeURIComponent(props.email)}`);
        original = reply.client;
        originalIds = reply.inboundIds;
        subUrl.value = reply.subUrl || "";
        Object.assign(model, {
          email: original.email, enable: original.enable, subId: original.subId || "",
          comment: original.comment || "", group: original.group || "", limitIp: original.limitIp || 0,
          deviceLimit: original.deviceLimit || 0, tgId: original.tgId || 0, reset: original.reset || 0, flow: original.flow || "",
          totalGB: original.totalGB ? +(original.totalGB / GB).toFixed(2) : 0,
          secret: original.secret || "", adTag: original.adTag || "", auth: original.auth || "",
          id: original.id || "", password: original.password || "",
        });
        if (original.expiryTime > 0) {
          model.expiryMode = "date";
          model.expiryDate = localDay(original.expiryTime);
        } else if (original.expiryTime < 0) {
          model.expiryMode = "afterFirstUse";
          model.expiryDays = Math.round(-original.expiryTime / DAY);
        }
        selected.value = new Set(reply.inboundIds);
        loaded.value = true;
      } catch (error) {
        props.onClose();
      }
    });

    const flowCapable = Vue.computed(() => props.inbounds.some((i) => selected.value.has(i.id) && i.tlsFlowCapable));
    // Why the running core cannot run a flow (server/coreCapabilities), when an inbound of
    // this host would carry it: the choice is greyed out, saying why.
    const visionLacking = Vue.ref("");
    api.get("panel/api/server/coreCapabilities").then((table) => {
      const vision = table.features["XTLS Vision"];
      visionLacking.value = vision && !vision.runs ? vision.reason : "";
    }).catch(() => {});
    const flowRefused = Vue.computed(() => props.inbounds.some((i) => selected.value.has(i.id)
      && i.tlsFlowCapable && i.nodeId == null) ? visionLacking.value : "");
    const onMtproto = Vue.computed(() => props.inbounds.some((i) => selected.value.has(i.id) && i.protocol === "mtproto"));
    const onUuid = Vue.computed(() => props.inbounds.some((i) => selected.value.has(i.id) && ["vless", "vmess"].includes(i.protocol)));
    const onPassword = Vue.computed(() => props.inbounds.some((i) => selected.value.has(i.id) && ["trojan", "shadowsocks"].includes(i.protocol)));
    const onHysteria = Vue.computed(() => props.inbounds.some((i) => selected.value.has(i.id) && ["hysteria", "hysteria2"].includes(i.protocol)));

    // A new MTProto key: 16 random bytes in hex, like the one the panel generates.
    function rekey() {
      const bytes = crypto.getRandomValues(new Uint8Array(16));
      model.secret = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    }

    // A new Hysteria password.
    function newAuth() {
      model.auth = randomPassword();
    }

    function expiryTime() {
      if (model.expiryMode === "date" && model.expiryDate) return new Date(`${model.expiryDate}T23:59:59`).getTime();
      if (model.expiryMode === "afterFirstUse") return -DAY * Math.max(1, Number(model.expiryDays) || 1);
      return 0;
    }

    // A preset (days, or 0 for a year) counts from today, or from the date the form shows
    // when the admin asks to extend it (a date already past counts from today).
    function applyPreset(days) {
      const shown = model.expiryMode === "date" && model.expiryDate ? new Date(`${model.expiryDate}T00:00:00`) : null;
      const base = model.presetFrom === "expiry" && shown && shown > new Date() ? shown : new Date();
      if (days) base.setDate(base.getDate() + days);
      else base.setFullYear(base.getFullYear() + 1);
      model.expiryMode = "date";
      model.expiryDate = localDay(base);
    }

    function presets() {
      const canExtend = model.expiryMode === "date" && model.expiryDate;
      return html`<div class="presets span-2" data-testid="expiry-presets">
        ${canExtend ? selectInput(model, "presetFrom", [["now", t("clients.presetFromNow")], ["expiry", t("clients.presetFromExpiry")]],
          { name: "presetFrom", "aria-label": t("clients.presetFrom") }) : null}
        ${[["plus30", 30, t("clients.plus30Days")], ["plus90", 90, t("clients.plus90Days")], ["plusYear", 0, t("clients.plusYear")]]
          .map(([key, days, label]) => html`<button type="button" data-testid=${`preset-${key}`}
            onClick=${() => applyPreset(days)}>${label}</button>`)}</div>`;
    }

    async function save() {
      const client = {
        ...(original || {}),
        email: model.email.trim(), enable: model.enable, subId: model.subId, comment: model.comment,
        group: model.group, limitIp: Number(model.limitIp) || 0, deviceLimit: Number(model.deviceLimit) || 0, tgId: Number(model.tgId) || 0,
        reset: Number(model.reset) || 0, flow: flowCapable.value ? model.flow : "",
        totalGB: Math.round((Number(model.totalGB) || 0) * GB), expiryTime: expiryTime(),
        secret: model.secret.trim(), adTag: model.adTag.trim(), auth: model.auth.trim(),
        id: model.id.trim(), password: model.password.trim(),
      };
      delete client.inboundIds;
      delete client.traffic;
      const ids = [...selected.value];
      if (!ids.length && props.inbounds.length) {
        missingInbound.value = true;
        toast(t("clients.chooseInbound"), "error");
        const first = document.querySelector("#client-form input[name=inbound]");
        if (first) first.focus();
        return;
      }
      busy.value = true;
      try {
        if (!editing) {
          await api.post("panel/api/clients/add", { client, inboundIds: ids });
          localStorage.setItem(LAST_INBOUNDS, JSON.stringify(ids));
        } else {
          await api.post(`panel/api/clients/update/${encodeURIComponent(props.email)}`, client);
          const email = encodeURIComponent(client.email);
          const added = ids.filter((id) => !originalIds.includes(id));
          const removed = originalIds.filter((id) => !ids.includes(id));
          if (added.length) await api.post(`panel/api/clients/${email}/attach`, { inboundIds: added });
          if (removed.length) await api.post(`panel/api/clients/${email}/detach`, { inboundIds: removed });
        }
        props.onSaved();
      } catch (error) {
        // the toast shows the panel's message; the form stays open to fix it
      } finally {
        busy.value = false;
      }
    }

    function toggleInbound(id, on) {
      touched = true;
      missingInbound.value = false;
      const next = new Set(selected.value);
      if (on) next.add(id);
      else next.delete(id);
      selected.value = next;
    }

    function body() {
      if (!loaded.value) return html`<p class="muted">${t("common.loading")}</p>`;
      return html`<form class="form-grid" id="client-form" onSubmit=${(e) => { e.preventDefault(); save(); }}>
        ${field(t("clients.email"), textInput(model, "email", { name: "email", required: true, autocomplete: "off" }))}
        ${field(t("clients.subId"), textInput(model, "subId", { name: "subId" }))}
        <fieldset class=${missingInbound.value ? "span-2 invalid" : "span-2"} data-testid="client-inbounds"
          aria-invalid=${missingInbound.value ? "true" : null}><legend>${t("clients.inbounds")}</legend>
          ${props.inbounds.length === 0 ? html`<p class="muted">${t("clients.noInbounds")}</p>` : null}
          ${missingInbound.value ? html`<p class="error-text span-all" role="alert">${t("clients.chooseInbound")}</p>` : null}
          <div class="row wrap">${props.inbounds.map((inbound) => html`<label class="check" key=${inbound.id}>
            <input type="checkbox" name="inbound" value=${inbound.id} checked=${selected.value.has(inbound.id)}
              onChange=${(e) => toggleInbound(inbound.id, e.target.checked)} />
            <span>${inbound.remark || inbound.tag} (${inbound.protocol}:${inbound.port})</span></label>`)}</div>
        </fieldset>
        ${field(t("clients.totalGB"), numberInput(model, "totalGB", { min: 0, step: "any" }), t("common.zeroUnlimited"))}
        ${field(t("clients.expiry"), selectInput(model, "expiryMode", [
          ["never", t("common.never")], ["date", t("clients.onDate")], ["afterFirstUse", t("clients.afterFirstUseMode")]], { name: "expiryMode" }))}
        ${model.expiryMode === "date" ? field(t("clients.expiryDate"), html`<${DateInput} value=${model.expiryDate}
          onChange=${(day) => (model.expiryDate = day)} attrs=${{ name: "expiryDate", required: true }} />`) : null}
        ${presets()}
        ${model.expiryMode === "afterFirstUse" ? field(t("clients.days"), numberInput(model, "expiryDays", { min: 1 })) : null}
        ${field(t("clients.limitIp"), numberInput(model, "limitIp", { min: 0 }), t("common.zeroUnlimited"))}
        ${field(t("clients.deviceLimit"), numberInput(model, "deviceLimit", { name: "deviceLimit", min: -1, step: 1 }), t("clients.deviceLimitHint"))}
        ${field(t("clients.reset"), numberInput(model, "reset", { min: 0 }), t("clients.resetHint"))}
        ${flowCapable.value ? field(t("clients.flow"), html`<select name="flow" value=${model.flow} onChange=${(event) => (model.flow = event.target.value)}>${
          FLOWS.map((f) => html`<option value=${f} selected=${model.flow === f} disabled=${!!f && !!flowRefused.value}
            title=${f ? flowRefused.value : ""}>${f || t("common.none")}</option>`)}</select>`, flowRefused.value) : null}
        ${onUuid.value ? field(t("clients.uuid"), html`<div class="copy-row">${textInput(model, "id", { name: "uuid", autocomplete: "off", spellcheck: "false" })}
          <button type="button" data-testid="new-uuid" onClick=${() => (model.id = randomUuid())}>${t("clients.newUuid")}</button></div>`, t("clients.uuidHint")) : null}
        ${onPassword.value ? field(t("clients.password"), html`<div class="copy-row">${textInput(model, "password", { name: "password", autocomplete: "off", spellcheck: "false" })}
          <button type="button" data-testid="new-password" onClick=${() => (model.password = randomPassword())}>${t("clients.newPassword")}</button></div>`, t("clients.passwordHint")) : null}
        ${onMtproto.value ? field(t("clients.mtSecret"), html`<div class="copy-row">${textInput(model, "secret", { name: "secret", placeholder: t("clients.secretPlaceholder"), autocomplete: "off" })}
          <button type="button" data-testid="rekey" onClick=${rekey}>${t("clients.newKey")}</button></div>`, t("clients.mtSecretHint")) : null}
        ${onMtproto.value ? field(t("clients.adTag"), textInput(model, "adTag", { name: "adTag", autocomplete: "off" }), t("clients.adTagHint")) : null}
        ${onHysteria.value ? field(t("clients.hyAuth"), html`<div class="copy-row">${textInput(model, "auth", { name: "auth", placeholder: t("clients.secretPlaceholder"), autocomplete: "off" })}
          <button type="button" data-testid="new-auth" onClick=${newAuth}>${t("clients.newAuth")}</button></div>`, t("clients.hyAuthHint")) : null}
        ${field(t("clients.group"), textInput(model, "group", { list: "group-names" }))}
        ${field(t("clients.tgId"), numberInput(model, "tgId", { min: 0 }))}
        ${field(t("clients.comment"), textInput(model, "comment"))}
        ${checkbox(model, "enable", t("common.enabled"))}
        ${subUrl.value && model.subId === original.subId ? html`<div class="span-2">${subscriptionUrl(subUrl.value)}</div>` : null}
      </form>`;
    }

    return () => html`<${Modal} wide=${true} title=${editing ? t("clients.edit") : t("clients.add")} onClose=${props.onClose}
      body=${body}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="client-form" disabled=${busy.value || !loaded.value}>${t("common.save")}</button>`} />`;
  },
};
