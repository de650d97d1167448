// The application shell: sign-in check, the page router (history API under <base href>),
// the header with the core badge, language, theme and sign-out, and the live socket.
import { html, Vue } from "./lib.js";
import { api, awaitCsrfToken, request, setCsrfToken } from "./api.js";
import { initialLocale, LOCALES, locale, setLocale, t } from "./i18n.js";
import { applyTheme, state, toast } from "./state.js";
import { closeSocket, openSocket } from "./socket.js";
import { dropPrefetched } from "./prefetch.js";
import { ConfirmDialog, Toasts } from "./components.js";
import { coreBadge } from "./core-step.js";
import { LoginPage } from "./pages/login.js";
import { DashboardPage } from "./pages/dashboard.js";
import { InboundsPage } from "./pages/inbounds.js";
import { ClientsPage } from "./pages/clients.js";
import { HostsPage } from "./pages/hosts.js";
import { NodesPage } from "./pages/nodes.js";
import { CorePage } from "./pages/core.js";
import { LogsPage } from "./pages/logs.js";
import { SettingsPage } from "./pages/settings.js";

const PAGES = {
  dashboard: { component: DashboardPage, icon: "◔" },
  inbounds: { component: InboundsPage, icon: "⇄" },
  clients: { component: ClientsPage, icon: "☺" },
  hosts: { component: HostsPage, icon: "⌂" },
  nodes: { component: NodesPage, icon: "⌬" },
  core: { component: CorePage, icon: "◈" },
  logs: { component: LogsPage, icon: "☰" },
  settings: { component: SettingsPage, icon: "⚙" },
};
const THEMES = ["auto", "light", "dark"];

const route = Vue.ref(pageFromLocation());

function pageFromLocation() {
  const base = new URL(document.baseURI).pathname;
  const rest = location.pathname.startsWith(base) ? location.pathname.slice(base.length) : "";
  if (!rest.startsWith("panel")) return "login";
  const name = rest.replace(/^panel\/?/, "").split("/")[0];
  return name in PAGES ? name : "dashboard";
}

export function navigate(page) {
  const path = page === "login" ? "./" : page === "dashboard" ? "panel/" : `panel/${page}`;
  const url = new URL(path, document.baseURI);
  if (url.pathname !== location.pathname) history.pushState(null, "", url);
  dropPrefetched();
  route.value = page;
}

window.addEventListener("popstate", () => {
  dropPrefetched();
  route.value = pageFromLocation();
});

async function startSession() {
  const token = request("GET", "csrf-token", { quiet: true, signIn: true });
  awaitCsrfToken(token);
  setCsrfToken((await token).obj);
  state.signedIn = true;
  openSocket();
  // The badge shows the core's state at once, not only from the socket's next push.
  api.get("panel/api/server/status").then((status) => {
    state.status = status;
    state.coreState = status.core.state;
  }, () => {});
}

async function signOut() {
  try {
    await api.post("logout");
  } finally {
    endSession();
  }
}

function endSession() {
  state.signedIn = false;
  setCsrfToken("");
  closeSocket();
  navigate("login");
}

const Header = {
  setup() {
    const menuOpen = Vue.ref(false);
    return () => {
      const themeIndex = THEMES.indexOf(state.theme);
      return html`<header class="topbar">
        <button class="icon menu-button" aria-label=${t("nav.menu")} aria-expanded=${menuOpen.value}
          onClick=${() => (menuOpen.value = !menuOpen.value)}>☰</button>
        <strong class="brand">${t("app.name")}</strong>
        ${coreBadge()}
        <span class=${state.socketOpen ? "live on" : "live"} title=${state.socketOpen ? t("app.live") : t("app.offline")}
          aria-label=${state.socketOpen ? t("app.live") : t("app.offline")}></span>
        <span class="spacer"></span>
        <select aria-label=${t("app.language")} data-testid="language" value=${locale.value}
          onChange=${(event) => setLocale(event.target.value).catch((error) => toast(error.message, "error"))}>
          ${LOCALES.map((entry) => html`<option value=${entry.code} selected=${entry.code === locale.value}>${entry.name}</option>`)}
        </select>
        <button class="icon" data-testid="theme" aria-label=${t("app.theme")} title=${t(`theme.${state.theme}`)}
          onClick=${() => applyTheme(THEMES[(themeIndex + 1) % THEMES.length])}>${
            state.theme === "dark" ? "☾" : state.theme === "light" ? "☀" : "◐"}</button>
        <button onClick=${signOut}>${t("nav.signOut")}</button>
      </header>
      <nav class=${menuOpen.value ? "sidenav open" : "sidenav"} aria-label=${t("nav.menu")}
        onClick=${() => (menuOpen.value = false)}>
        ${Object.entries(PAGES).map(([name, page]) => html`<a href=${name === "dashboard" ? "panel/" : `panel/${name}`}
          class=${route.value === name ? "active" : ""} aria-current=${route.value === name ? "page" : null}
          data-page=${name} onClick=${(event) => {
            event.preventDefault();
            navigate(name);
          }}><span aria-hidden="true">${page.icon}</span> ${t(`nav.${name}`)}</a>`)}
      </nav>`;
    };
  },
};

const App = {
  setup() {
    const ready = Vue.ref(false);
    Vue.onMounted(async () => {
      // The server said the cookie is a live session: show the page at once and let the
      // session start alongside; a session that ended meanwhile lands on sign-in.
      if (document.documentElement.dataset.session === "1") {
        state.signedIn = true;
        if (route.value === "login") navigate("dashboard");
        startSession().catch(() => endSession());
      } else if (route.value !== "login") {
        navigate("login");
      }
      ready.value = true;
    });
    Vue.watch(
      () => state.signedIn,
      (signedIn) => {
        if (!signedIn && ready.value && route.value !== "login") endSession();
      },
    );
    return () => {
      if (!ready.value) return html`<div class="loading">${t("common.loading")}</div>`;
      let content;
      if (!state.signedIn || route.value === "login") {
        content = html`<${LoginPage} onSignedIn=${async () => {
          await startSession();
          navigate("dashboard");
        }} />`;
      } else {
        const page = PAGES[route.value] || PAGES.dashboard;
        content = html`<div class="shell"><${Header} />
          <main class="content" id="main" tabindex="-1"><${page.component} key=${route.value} /></main></div>`;
      }
      return html`${content}<${Toasts} /><${ConfirmDialog} />`;
    };
  },
};

applyTheme(state.theme);
setLocale(initialLocale())
  .catch(() => setLocale("en"))
  .finally(() => Vue.createApp(App).mount("#app"));
