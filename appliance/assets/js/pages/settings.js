// Settings: the panel settings form (only changed keys are sent, so redacted secrets are
// never written back) with its subscription, chat-bot and mail sections and their test
// buttons, the admin account, two-factor setup with a QR code, API tokens with their scope
// and expiry (whose value is shown once, right after creation), the audit log, backups and
// the key and certificate tools.
import { html, Vue } from "../lib.js";
import { api, request } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, state, toast } from "../state.js";
import { checkbox, copyText, DateInput, field, formatDate, Modal, numberInput, QrCode, selectInput, textArea, textInput, toggle } from "../components.js";
import { BackupsCard, ToolsCard } from "./settings-tools.js";
import { AuditCard } from "./settings-audit.js";
import { TemplatesCard } from "./settings-templates.js";
import { WebhooksCard } from "./settings-webhooks.js";
import { followRestart, restartMoves } from "../restart.js";

const SECTIONS = {
  panel: ["webListen", "webDomain", "webAllowedHosts", "webPort", "webBasePath", "webCertFile", "webKeyFile", "sessionMaxAge", "trustedProxies", "allowPrivateDestinations", "pageSize", "timeLocation", "auditRetentionDays", "metricsEnable"],
  clients: ["expireDiff", "trafficDiff", "webhookUsagePercents", "trafficInterval", "ipLimitEnable", "hwidEnable", "hwidDefaultLimit", "hwidRequired", "hwidAnnounce", "mtprotoDataCenters"],
  subscription: ["subEnable", "subListen", "subPort", "subPath", "subDomain", "subCertFile", "subKeyFile", "subUpdates", "subTitle", "subSupportUrl", "subProfileUrl", "subAnnounce", "subJsonEnable", "subJsonPath", "subYamlEnable", "subYamlPath", "subFormatRules", "remarkModel", "subEnableRouting", "subRoutingRules"],
  chatBot: ["tgBotEnable", "tgBotToken", "tgBotChatId", "tgBotBackup", "tgRunTime", "tgCpuAlert", "tgBotAPIServer"],
  smtp: ["smtpEnable", "smtpHost", "smtpPort", "smtpSecurity", "smtpUsername", "smtpPassword", "smtpFrom"],
};
const SECRETS = new Set(["tgBotToken", "smtpPassword"]);
const LONG_TEXT = new Set(["hwidAnnounce", "subAnnounce", "subFormatRules", "subRoutingRules"]);
const HINTS = {
  remarkModel: "settings.remarkModelHint",
  allowPrivateDestinations: "settings.allowPrivateDestinationsHint",
  webAllowedHosts: "settings.webAllowedHostsHint",
  hwidEnable: "settings.hwidEnableHint",
  hwidDefaultLimit: "settings.hwidDefaultLimitHint",
  hwidRequired: "settings.hwidRequiredHint",
  hwidAnnounce: "settings.hwidAnnounceHint",
};
const SMTP_SECURITY = [["none", "none"], ["starttls", "STARTTLS"], ["tls", "TLS"]];
const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

function newSecret() {
  return Array.from(crypto.getRandomValues(new Uint8Array(32)), (b) => BASE32[b % 32]).join("");
}

// A flag or environment variable of this run beats the stored value: say which, and
// what is in effect, so a saved change that seems to do nothing is explained.
function overrideNote(key, override) {
  return html`<span class="override" data-testid=${`override-${key}`}>${t("settings.overridden",
    { flag: override.flag, env: override.env, value: String(override.value) })}</span>`;
}

function settingInput(model, key, override) {
  const value = model[key];
  if (typeof value === "boolean") {
    const box = checkbox(model, key, t(`settings.key.${key}`), { name: key });
    return HINTS[key] ? html`<div class="field">${box}<small class="hint">${t(HINTS[key])}</small></div>` : box;
  }
  let input;
  if (key === "smtpSecurity") input = selectInput(model, key, SMTP_SECURITY, { name: key });
  else if (LONG_TEXT.has(key)) input = textArea(model, key, { name: key, rows: 3 });
  else if (typeof value === "number") input = numberInput(model, key, { name: key });
  else input = textInput(model, key, { name: key, type: SECRETS.has(key) ? "password" : "text", autocomplete: SECRETS.has(key) ? "off" : null });
  const hint = HINTS[key] ? t(HINTS[key]) : "";
  return field(t(`settings.key.${key}`), input, override ? html`${overrideNote(key, override)} ${hint}` : hint);
}

// The test buttons check the saved settings: the panel reads its stored values.
async function testChatBot() {
  try {
    await api.post("panel/api/setting/testTgBot");
    toast(t("settings.chatBotOk"), "success");
  } catch (error) {
    // the toast says what the chat-bot API answered
  }
}

async function sendBackupNow() {
  try {
    await api.post("panel/api/backuptotgbot");
    toast(t("settings.backupSent"), "success");
  } catch (error) {
    // shown as a toast
  }
}

async function testSmtp() {
  try {
    await api.post("panel/api/setting/testSmtp", undefined, { quiet: true });
    toast(t("settings.smtpOk"), "success");
  } catch (error) {
    const stage = error.reply && error.reply.stage;
    toast(stage ? t("settings.smtpFailedAt", { stage, msg: error.message }) : error.message, "error");
  }
}

function sectionActions(section) {
  if (section === "chatBot") {
    return html`<div class="actions span-all"><span class="muted small">${t("settings.testsSaved")}</span>
      <button type="button" data-testid="test-chat-bot" onClick=${testChatBot}>${t("settings.test")}</button>
      <button type="button" data-testid="send-backup" onClick=${sendBackupNow}>${t("settings.sendBackupNow")}</button></div>`;
  }
  if (section === "smtp") {
    return html`<div class="actions span-all"><span class="muted small">${t("settings.testsSaved")}</span>
      <button type="button" data-testid="test-smtp" onClick=${testSmtp}>${t("settings.test")}</button></div>`;
  }
  return null;
}

const TwoFactor = {
  props: ["enabled", "onChanged"],
  setup(props) {
    const setup = Vue.reactive({ secret: "", code: "" });
    const busy = Vue.ref(false);
    async function submit(enable) {
      busy.value = true;
      try {
        await api.post("panel/api/setting/update", {
          twoFactorEnable: enable, twoFactorToken: enable ? setup.secret : "", twoFactorCode: setup.code,
        });
        toast(enable ? t("settings.twoFactorOn") : t("settings.twoFactorOff"), "success");
        setup.secret = "";
        setup.code = "";
        props.onChanged();
      } catch (error) {
        setup.code = "";
      } finally {
        busy.value = false;
      }
    }
    return () => {
      const uri = setup.secret
        ? `otpauth://totp/${encodeURIComponent(`Panel:${location.hostname}`)}?secret=${setup.secret}&issuer=Panel`
        : "";
      return html`<div class="card">
        <h2>${t("settings.twoFactor")}</h2>
        <p>${props.enabled ? t("settings.twoFactorIsOn") : t("settings.twoFactorIsOff")}</p>
        ${props.enabled
          ? html`<form class="toolbar" onSubmit=${(e) => { e.preventDefault(); submit(false); }}>
              ${field(t("login.code"), textInput(setup, "code", { inputmode: "numeric", autocomplete: "one-time-code", required: true }))}
              <button class="danger" type="submit" disabled=${busy.value}>${t("settings.disableTwoFactor")}</button></form>`
          : setup.secret
            ? html`<form class="two-factor" onSubmit=${(e) => { e.preventDefault(); submit(true); }}>
                <p>${t("settings.scanQr")}</p>
                <${QrCode} text=${uri} />
                <p>${t("settings.secret")}: <code data-testid="totp-secret">${setup.secret}</code></p>
                ${field(t("login.code"), textInput(setup, "code", { inputmode: "numeric", autocomplete: "one-time-code", required: true, name: "totp-code" }))}
                <button class="primary" type="submit" disabled=${busy.value}>${t("settings.enableTwoFactor")}</button>
                <button type="button" onClick=${() => (setup.secret = "")}>${t("common.cancel")}</button></form>`
            : html`<button class="primary" onClick=${() => (setup.secret = newSecret())}>${t("settings.setUpTwoFactor")}</button>`}
      </div>`;
    };
  },
};

// What each token scope may do is the route table's to say; these are its names.
const TOKEN_SCOPES = [
  ["admin", () => t("tokens.scopeAdmin")],
  ["read", () => t("tokens.scopeRead")],
  ["node", () => t("tokens.scopeNode")],
];

function scopeLabel(scope) {
  const entry = TOKEN_SCOPES.find(([value]) => value === scope);
  return entry ? entry[1]() : scope;
}

const ApiTokens = {
  setup() {
    const tokens = Vue.ref([]);
    const name = Vue.ref("");
    const scope = Vue.ref("admin");
    const expires = Vue.ref("");
    const created = Vue.ref(null);
    const load = async () => {
      tokens.value = await api.get("panel/api/setting/apiTokens");
    };
    Vue.onMounted(() => load().catch(() => {}));
    Vue.watch(() => state.versions.apiTokens, () => load().catch(() => {}));
    async function create(event) {
      event.preventDefault();
      try {
        // A date means the end of that day, here; none means the token never expires.
        const expiresAt = expires.value ? new Date(`${expires.value}T23:59:59.999`).getTime() : 0;
        created.value = await api.post("panel/api/setting/apiTokens/create", { name: name.value, scope: scope.value, expiresAt });
        name.value = "";
        expires.value = "";
      } catch (error) {
        // the toast says why
      }
      load().catch(() => {});
    }
    async function act(path, body, message) {
      try {
        await api.post(path, body);
        toast(message, "success");
      } catch (error) {
        // shown as a toast
      }
      load().catch(() => {});
    }
    async function remove(token) {
      if (!(await askConfirm(t("settings.confirmDeleteToken", { name: token.name })))) return;
      act(`panel/api/setting/apiTokens/delete/${token.id}`, undefined, t("settings.tokenDeleted"));
    }
    return () => html`<div class="card">
      <h2>${t("settings.apiTokens")}</h2>
      <form class="toolbar" onSubmit=${create}>
        <input aria-label=${t("settings.tokenName")} placeholder=${t("settings.tokenName")} maxlength="64" required
          value=${name.value} onInput=${(e) => (name.value = e.target.value)} />
        <select aria-label=${t("tokens.scope")} name="tokenScope" value=${scope.value} onChange=${(e) => (scope.value = e.target.value)}>
          ${TOKEN_SCOPES.map(([value, label]) => html`<option value=${value} selected=${scope.value === value}>${label()}</option>`)}</select>
        <${DateInput} value=${expires.value} onChange=${(day) => (expires.value = day)}
          attrs=${{ "aria-label": t("tokens.expires"), title: t("tokens.expiresHint"), name: "tokenExpires" }} />
        <button class="primary" type="submit">${t("settings.createToken")}</button></form>
      ${tokens.value.length === 0 ? html`<p class="empty">${t("settings.noTokens")}</p>`
        : html`<ul class="plain">${tokens.value.map((token) => html`<li class="row" key=${token.id}>
            <strong>${token.name}</strong>
            <span class="muted small">${new Date(token.createdAt * 1000).toLocaleDateString()}</span>
            <span class="badge" data-testid="token-scope">${scopeLabel(token.scope)}</span>
            <span class="muted small">${token.expiresAt ? t("tokens.expiresOn", { date: formatDate(token.expiresAt) }) : t("tokens.noExpiry")}</span>
            <span class="spacer"></span>
            ${toggle(token.enabled, (value) => act(`panel/api/setting/apiTokens/setEnabled/${token.id}`, { enabled: value },
              t("settings.tokenUpdated")), t("settings.enableToken", { name: token.name }))}
            <button class="danger" onClick=${() => remove(token)}>${t("common.delete")}</button></li>`)}</ul>`}
      ${created.value ? html`<${Modal} title=${t("settings.tokenCreated")} onClose=${() => (created.value = null)}
        body=${() => html`<p>${t("settings.tokenOnce")}</p><code class="token" data-testid="new-token">${created.value.token}</code>`}
        footer=${() => html`<button class="primary" data-testid="copy-token"
          onClick=${() => copyText(created.value.token, document.querySelector("[data-testid=new-token]"))}>${t("common.copy")}</button>
          <button onClick=${() => (created.value = null)}>${t("common.close")}</button>`} />` : null}
    </div>`;
  },
};

export const SettingsPage = {
  setup() {
    const model = Vue.reactive({});
    const original = Vue.ref(null);
    const overrides = Vue.ref({});
    const account = Vue.reactive({ oldUsername: "", oldPassword: "", newUsername: "", newPassword: "" });
    const load = async () => {
      const all = await api.post("panel/api/setting/all");
      original.value = all;
      for (const key of Object.keys(model)) delete model[key];
      Object.assign(model, all);
    };
    Vue.onMounted(() => {
      load().catch(() => {});
      api.get("panel/api/setting/overrides").then((found) => (overrides.value = found), () => {});
    });
    Vue.watch(() => state.versions.settings, () => load().catch(() => {}));

    async function save(event) {
      event.preventDefault();
      const changes = {};
      for (const keys of Object.values(SECTIONS)) {
        for (const key of keys) if (key in model && model[key] !== original.value[key]) changes[key] = model[key];
      }
      if (!Object.keys(changes).length) return toast(t("settings.nothingChanged"), "info");
      try {
        const reply = await request("POST", "panel/api/setting/update", { json: changes });
        if (reply.restartNeeded) {
          state.panelAfterRestart = reply.panelAfterRestart;
          const keys = reply.restartNeeded.map((key) => t(`settings.key.${key}`)).join(", ");
          toast(t("settings.savedRestart", { keys }), "warning");
        } else {
          toast(t("settings.saved"), "success");
        }
        await load();
      } catch (error) {
        // the toast names the setting that was refused
      }
    }

    async function updateUser(event) {
      event.preventDefault();
      try {
        await api.post("panel/api/setting/updateUser", { ...account });
        toast(t("settings.accountSaved"), "success");
        Object.assign(account, { oldUsername: "", oldPassword: "", newUsername: "", newPassword: "" });
      } catch (error) {
        // shown as a toast
      }
    }

    async function restart() {
      if (!(await askConfirm(t("settings.confirmRestart")))) return;
      try {
        await api.post("panel/api/setting/restartPanel");
        const target = state.panelAfterRestart;
        if (target && restartMoves(target)) followRestart(target);
        else toast(t("settings.restarting"), "warning");
      } catch (error) {
        // shown as a toast
      }
    }

    return () => html`<section class="page">
      <div class="page-head"><h1>${t("nav.settings")}</h1>
        <button onClick=${restart}>${t("settings.restartPanel")}</button></div>
      ${original.value ? html`<form class="card" onSubmit=${save} data-testid="settings-form">
        ${Object.entries(SECTIONS).map(([section, keys]) => html`<fieldset key=${section}><legend>${t(`settings.section.${section}`)}</legend>
          <div class="form-grid">${keys.filter((key) => key in model).map((key) => settingInput(model, key, overrides.value[key]))}
          ${sectionActions(section)}</div></fieldset>`)}
        <button class="primary" type="submit">${t("common.save")}</button></form>`
        : html`<p class="muted">${t("common.loading")}</p>`}
      ${original.value ? html`<${TwoFactor} enabled=${!!original.value.twoFactorEnable} onChanged=${() => load().catch(() => {})} />` : null}
      <form class="card" onSubmit=${updateUser}>
        <h2>${t("settings.account")}</h2>
        <div class="form-grid">
          ${field(t("settings.oldUsername"), textInput(account, "oldUsername", { autocomplete: "username", required: true }))}
          ${field(t("settings.oldPassword"), textInput(account, "oldPassword", { type: "password", autocomplete: "current-password", required: true }))}
          ${field(t("settings.newUsername"), textInput(account, "newUsername", { autocomplete: "off", required: true }))}
          ${field(t("settings.newPassword"), textInput(account, "newPassword", { type: "password", autocomplete: "new-password", required: true }))}
        </div>
        <button class="primary" type="submit">${t("settings.changeAccount")}</button></form>
      <${ApiTokens} />
      <${TemplatesCard} />
      <${WebhooksCard} />
      <${AuditCard} />
      <${BackupsCard} />
      <${ToolsCard} />
    </section>`;
  },
};
