// Outbounds from outside the template, on the core settings page: outbound subscriptions
// (a provider's servers fetched from a URL and merged by the panel, each with its last
// refresh and error), the WARP tunnel and the VPN provider (each builds a WireGuard
// outbound that "Add to template" writes into the template being edited, saved with it).
// `sourceOf` names where each outbound of the outbound list comes from.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, toast } from "../state.js";
import { checkbox, field, formatDate, selectInput, textInput } from "../components.js";
import { editTemplate } from "./core-tabs.js";

const SUBS = "panel/api/core/outbound-subs";
const EMPTY_SUB = { id: null, remark: "", url: "", tagPrefix: "", updateInterval: "600", enabled: true, allowPrivate: false, prepend: false };

// Where a template outbound comes from, by the tags the providers give theirs.
export function sourceOf(outbound) {
  const tag = (outbound && outbound.tag) || "";
  if (tag === "warp") return t("outsrc.warp");
  if (tag.startsWith("vpn-")) return t("outsrc.vpn");
  return t("outsrc.template");
}

// Put `outbound` into the template being edited, replacing one of the same tag.
function addToTemplate(model, outbound) {
  editTemplate(model, (template) => {
    if (!Array.isArray(template.outbounds)) template.outbounds = [];
    const at = template.outbounds.findIndex((o) => o && o.tag === outbound.tag);
    if (at >= 0) template.outbounds[at] = outbound;
    else template.outbounds.push(outbound);
  });
  toast(t("outsrc.addedToTemplate", { tag: outbound.tag }), "success");
}

const SubscriptionsPart = {
  props: ["subs", "onChanged"],
  setup(props) {
    const form = Vue.reactive({ ...EMPTY_SUB });
    const preview = Vue.ref(null);
    const problem = Vue.ref("");
    const busy = Vue.ref(false);
    const body = () => ({
      remark: form.remark, url: form.url, tagPrefix: form.tagPrefix, updateInterval: form.updateInterval,
      enabled: String(form.enabled), allowPrivate: String(form.allowPrivate), prepend: String(form.prepend),
    });
    async function run(work) {
      busy.value = true;
      try {
        await work();
        problem.value = "";
      } catch (error) {
        problem.value = error.message;
      } finally {
        busy.value = false;
      }
    }
    const save = (event) => {
      event.preventDefault();
      return run(async () => {
        await api.postForm(form.id ? `${SUBS}/${form.id}` : SUBS, body(), { quiet: true });
        toast(t("outsrc.subSaved"), "success");
        Object.assign(form, EMPTY_SUB);
        preview.value = null;
        props.onChanged();
      });
    };
    const parse = () => run(async () => {
      preview.value = await api.postForm(`${SUBS}/parse`, { url: form.url, allowPrivate: String(form.allowPrivate), tagPrefix: form.tagPrefix }, { quiet: true });
    });
    const edit = (sub) => {
      Object.assign(form, { ...sub, updateInterval: String(sub.updateInterval) });
      preview.value = null;
    };
    async function act(sub, action) {
      if (action === "del" && !(await askConfirm(t("outsrc.confirmDelete", { name: sub.remark || sub.url })))) return;
      const extra = action === "up" || action === "down" ? { dir: action } : undefined;
      const path = extra ? `${SUBS}/${sub.id}/move` : `${SUBS}/${sub.id}/${action}`;
      try {
        await api.postForm(path, extra || {});
        if (action === "refresh") toast(t("outsrc.refreshed"), "success");
      } catch (error) {
        // shown as a toast; a failed refresh is also kept as the subscription's error
      }
      props.onChanged();
    }
    return () => html`<div data-testid="outbound-subs">
      <h3>${t("outsrc.subscriptions")}</h3>
      <p class="muted small">${t("outsrc.subsHint")}</p>
      ${props.subs.length === 0 ? html`<p class="empty">${t("outsrc.noSubs")}</p>` : html`<div class="table-wrap"><table class="table responsive">
        <thead><tr><th>${t("outsrc.remark")}</th><th>${t("outsrc.outbounds")}</th><th>${t("outsrc.lastRefresh")}</th><th>${t("outsrc.error")}</th>
          <th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
        <tbody>${props.subs.map((sub) => html`<tr key=${sub.id} data-sub=${sub.id}>
          <td data-label=${t("outsrc.remark")}><strong>${sub.remark || sub.url}</strong>
            <div class="muted small">${sub.enabled ? "" : t("outsrc.disabled")} ${sub.prepend ? t("outsrc.first") : ""}</div></td>
          <td data-label=${t("outsrc.outbounds")}>${sub.outboundCount}</td>
          <td data-label=${t("outsrc.lastRefresh")}>${formatDate(sub.lastRefresh * 1000)}</td>
          <td data-label=${t("outsrc.error")} class="error-text" data-testid="sub-error">${sub.lastError}</td>
          <td class="actions">
            <button type="button" aria-label=${t("core.moveUp")} onClick=${() => act(sub, "up")}>↑</button>
            <button type="button" aria-label=${t("core.moveDown")} onClick=${() => act(sub, "down")}>↓</button>
            <button type="button" onClick=${() => act(sub, "refresh")}>${t("common.refresh")}</button>
            <button type="button" onClick=${() => edit(sub)}>${t("outsrc.edit")}</button>
            <button type="button" class="danger" onClick=${() => act(sub, "del")}>${t("common.delete")}</button></td></tr>`)}</tbody></table></div>`}
      <form onSubmit=${save} data-testid="sub-form">
        <div class="form-grid">
          ${field(t("outsrc.remark"), textInput(form, "remark", { name: "subRemark" }))}
          ${field(t("outsrc.url"), textInput(form, "url", { name: "subUrl", type: "url", required: true }))}
          ${field(t("outsrc.tagPrefix"), textInput(form, "tagPrefix", { name: "subTagPrefix" }), t("outsrc.tagPrefixHint"))}
          ${field(t("outsrc.interval"), textInput(form, "updateInterval", { name: "subInterval", inputmode: "numeric" }))}
          ${checkbox(form, "enabled", t("outsrc.enabled"), { name: "subEnabled" })}
          ${checkbox(form, "prepend", t("outsrc.prepend"), { name: "subPrepend" })}
          ${checkbox(form, "allowPrivate", t("outsrc.allowPrivate"), { name: "subAllowPrivate" })}
        </div>
        ${problem.value ? html`<p class="error-text" role="alert" data-testid="sub-problem">${problem.value}</p>` : null}
        ${preview.value ? html`<p class="muted small" data-testid="sub-preview">${t("outsrc.preview", { tags: preview.value.map((o) => o.tag).join(", ") })}</p>` : null}
        <div class="actions">
          <button class="primary" type="submit" disabled=${busy.value}>${form.id ? t("common.save") : t("outsrc.addSub")}</button>
          <button type="button" disabled=${busy.value || !form.url} onClick=${parse}>${t("outsrc.parse")}</button>
          ${form.id ? html`<button type="button" onClick=${() => Object.assign(form, EMPTY_SUB)}>${t("common.cancel")}</button>` : null}</div>
      </form>
    </div>`;
  },
};

const WarpPart = {
  props: ["model"],
  setup(props) {
    const account = Vue.ref(null);
    const form = Vue.reactive({ privateKey: "", license: "" });
    const problem = Vue.ref("");
    async function act(action, body = {}) {
      try {
        const reply = await api.postForm(`panel/api/core/tunnel/${action}`, body, { quiet: true });
        account.value = action === "del" ? null : reply;
        problem.value = "";
      } catch (error) {
        problem.value = error.message;
      }
    }
    Vue.onMounted(() => act("data"));
    return () => html`<div data-testid="warp-part">
      <h3>${t("outsrc.warp")}</h3>
      ${account.value ? html`<p data-testid="warp-account">${t("outsrc.warpDevice", { id: account.value.deviceId, type: account.value.accountType || "-" })}</p>
        <div class="actions">
          <button type="button" onClick=${() => addToTemplate(props.model, account.value.outbound)}>${t("outsrc.addToTemplate")}</button>
          <button type="button" onClick=${() => act("config")}>${t("outsrc.warpConfig")}</button>
          <button type="button" class="danger" onClick=${() => act("del")}>${t("common.delete")}</button></div>
        <div class="toolbar">${field(t("outsrc.license"), textInput(form, "license", { name: "warpLicense" }))}
          <button type="button" onClick=${() => act("license", { license: form.license })}>${t("outsrc.applyLicense")}</button></div>`
      : html`<p class="muted small">${t("outsrc.warpHint")}</p>
        <div class="toolbar">${field(t("outsrc.privateKey"), textInput(form, "privateKey", { name: "warpPrivateKey", placeholder: t("outsrc.keyGenerated") }))}
          <button type="button" onClick=${() => act("reg", form.privateKey ? { privateKey: form.privateKey } : {})}>${t("outsrc.register")}</button></div>`}
      ${problem.value ? html`<p class="error-text" role="alert" data-testid="warp-problem">${problem.value}</p>` : null}
    </div>`;
  },
};

const VpnPart = {
  props: ["model"],
  setup(props) {
    const key = Vue.ref(null);
    const countries = Vue.ref([]);
    const servers = Vue.ref([]);
    const form = Vue.reactive({ token: "", key: "", countryId: "" });
    const problem = Vue.ref("");
    async function call(action, body = {}) {
      try {
        const reply = await api.postForm(`panel/api/core/vpn/${action}`, body, { quiet: true });
        problem.value = "";
        return reply;
      } catch (error) {
        problem.value = error.message;
        return undefined;
      }
    }
    const loadKey = async () => {
      const reply = await call("data");
      if (reply !== undefined) key.value = reply;
    };
    Vue.onMounted(loadKey);
    async function setKey(action, body) {
      const reply = await call(action, body);
      if (reply !== undefined) key.value = reply;
    }
    async function loadCountries() {
      const reply = await call("countries");
      if (reply) {
        countries.value = reply;
        if (!form.countryId && reply.length) form.countryId = String(reply[0].id);
      }
    }
    async function loadServers() {
      const reply = await call("servers", { countryId: form.countryId });
      if (reply) servers.value = reply;
    }
    return () => html`<div data-testid="vpn-part">
      <h3>${t("outsrc.vpn")}</h3>
      <p class="muted small" data-testid="vpn-key">${key.value ? t("outsrc.vpnKey", { key: key.value.publicKey }) : t("outsrc.vpnNoKey")}</p>
      <div class="toolbar">
        ${field(t("outsrc.token"), textInput(form, "token", { name: "vpnToken" }))}
        <button type="button" onClick=${() => setKey("reg", { token: form.token })}>${t("outsrc.register")}</button>
        ${field(t("outsrc.privateKey"), textInput(form, "key", { name: "vpnKey" }))}
        <button type="button" onClick=${() => setKey("setKey", { key: form.key })}>${t("outsrc.setKey")}</button>
        ${key.value ? html`<button type="button" class="danger" onClick=${async () => {
          if ((await call("del")) !== undefined) key.value = null;
        }}>${t("common.delete")}</button>` : null}</div>
      <div class="toolbar">
        <button type="button" onClick=${loadCountries}>${t("outsrc.loadCountries")}</button>
        ${countries.value.length ? html`${field(t("outsrc.country"), selectInput(form, "countryId", countries.value.map((c) => [String(c.id), `${c.name} (${c.code})`]), { name: "vpnCountry" }))}
          <button type="button" onClick=${loadServers}>${t("outsrc.loadServers")}</button>` : null}</div>
      ${servers.value.length ? html`<div class="table-wrap"><table class="table responsive" data-testid="vpn-servers">
        <thead><tr><th>${t("outsrc.server")}</th><th>${t("outsrc.load")}</th><th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
        <tbody>${servers.value.map((server) => html`<tr key=${server.id}>
          <td data-label=${t("outsrc.server")}>${server.name} <span class="muted small">${server.hostname}</span></td>
          <td data-label=${t("outsrc.load")}>${server.load}%</td>
          <td class="actions">${server.outbound ? html`<button type="button" onClick=${() => addToTemplate(props.model, server.outbound)}>${t("outsrc.addToTemplate")}</button>`
            : html`<span class="muted small">${t("outsrc.vpnNoKey")}</span>`}</td></tr>`)}</tbody></table></div>` : null}
      ${problem.value ? html`<p class="error-text" role="alert" data-testid="vpn-problem">${problem.value}</p>` : null}
    </div>`;
  },
};

export const OutboundSourcesCard = {
  props: ["model", "subs", "onChanged"],
  setup(props) {
    return () => html`<div class="card" data-testid="outbound-sources">
      <h2>${t("outsrc.title")}</h2>
      <${SubscriptionsPart} subs=${props.subs} onChanged=${props.onChanged} />
      <${WarpPart} model=${props.model} />
      <${VpnPart} model=${props.model} />
    </div>`;
  },
};
