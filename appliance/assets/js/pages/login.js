// Sign-in: username and password, then (when two-factor is on) a second step asking for
// the six-digit code; the panel checks all three in one POST /login.
import { html, Vue } from "../lib.js";
import { api, request } from "../api.js";
import { LOCALES, locale, setLocale, t } from "../i18n.js";
import { toast } from "../state.js";

// Plain HTTP to an address other than this machine: the password crosses the network
// unencrypted, which the admin should know before typing it.
export function passwordTravelsInClear(where = window.location) {
  if (where.protocol !== "http:") return false;
  const host = where.hostname.replace(/^\[|\]$/g, "");
  return !(host === "localhost" || host.endsWith(".localhost") || host === "::1" || /^127\./.test(host));
}

export const LoginPage = {
  props: ["onSignedIn"],
  setup(props) {
    const form = Vue.reactive({ username: "", password: "", code: "" });
    const step = Vue.ref("password");
    const busy = Vue.ref(false);
    const twoFactor = Vue.ref(false);
    Vue.onMounted(async () => {
      twoFactor.value = await api.post("getTwoFactorEnable").catch(() => false);
    });

    async function submit(event) {
      event.preventDefault();
      if (twoFactor.value && step.value === "password") {
        step.value = "code";
        await Vue.nextTick();
        document.getElementById("login-code").focus();
        return;
      }
      busy.value = true;
      const payload = { username: form.username, password: form.password };
      if (twoFactor.value) payload.twoFactorCode = form.code;
      try {
        await request("POST", "login", { json: payload, signIn: true });
        await props.onSignedIn();
      } catch (error) {
        if (twoFactor.value) {
          form.code = "";
          step.value = "password";
        }
      } finally {
        busy.value = false;
      }
    }

    return () => html`<main class="login">
      <form class="card login-card" onSubmit=${submit} aria-label=${t("login.title")}>
        <h1>${t("login.title")}</h1>
        ${passwordTravelsInClear()
          ? html`<p class="warning-text" role="alert" data-testid="plain-http-warning">${t("login.plainHttp")}</p>`
          : null}
        ${step.value === "password"
          ? html`
            <label class="field"><span class="field-label">${t("login.username")}</span>
              <input id="login-username" name="username" autocomplete="username" required autofocus
                value=${form.username} onInput=${(e) => (form.username = e.target.value)} /></label>
            <label class="field"><span class="field-label">${t("login.password")}</span>
              <input id="login-password" name="password" type="password" autocomplete="current-password" required
                value=${form.password} onInput=${(e) => (form.password = e.target.value)} /></label>`
          : html`
            <p>${t("login.codePrompt")}</p>
            <label class="field"><span class="field-label">${t("login.code")}</span>
              <input id="login-code" name="twoFactorCode" inputmode="numeric" autocomplete="one-time-code"
                pattern="[0-9]{6}" maxlength="6" required
                value=${form.code} onInput=${(e) => (form.code = e.target.value)} /></label>
            <button type="button" class="link" onClick=${() => (step.value = "password")}>${t("login.back")}</button>`}
        <button class="primary" type="submit" disabled=${busy.value}>
          ${twoFactor.value && step.value === "password" ? t("login.next") : t("login.signIn")}</button>
        <select aria-label=${t("app.language")} value=${locale.value}
          onChange=${(e) => setLocale(e.target.value).catch((error) => toast(error.message, "error"))}>
          ${LOCALES.map((entry) => html`<option value=${entry.code} selected=${entry.code === locale.value}>${entry.name}</option>`)}
        </select>
      </form>
    </main>`;
  },
};
