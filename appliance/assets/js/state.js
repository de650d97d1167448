// State shared by every page: sign-in, live status from the WebSocket, the resource
// versions that invalidation bumps, the traffic ticks, toasts, the confirm dialog, the
// theme and the panel's address after a pending restart.
import { Vue } from "./lib.js";

export const state = Vue.reactive({
  signedIn: false,
  status: null,
  coreState: "",
  socketOpen: false,
  versions: { inbounds: 0, clients: 0, settings: 0, apiTokens: 0, core: 0, hosts: 0, nodes: 0, webhooks: 0 },
  // Bumped by each WebSocket "traffic" message: the core's counters moved.
  trafficTicks: 0,
  toasts: [],
  confirm: null,
  // Where the panel answers after its next restart, when a saved setting moves it
  // (the settings save answer's panelAfterRestart): the page follows it there.
  panelAfterRestart: null,
  theme: localStorage.getItem("panel.theme") || "auto",
});

let toastId = 0;

// `key` names the action a toast reports on: one action shows one toast, so a toast
// replaces the ones of its key still shown (a success clears that action's errors).
export function toast(text, severity = "info", title = "", key = "") {
  if (key) dismissToasts(key);
  const id = ++toastId;
  state.toasts.push({ id, text, severity, title, key });
  setTimeout(() => dismissToast(id), severity === "error" ? 8000 : 4000);
}

export function dismissToasts(key) {
  state.toasts = state.toasts.filter((item) => item.key !== key);
}

export function dismissToast(id) {
  const index = state.toasts.findIndex((item) => item.id === id);
  if (index >= 0) state.toasts.splice(index, 1);
}

export function askConfirm(message) {
  return new Promise((resolve) => {
    state.confirm = {
      message,
      answer(value) {
        state.confirm = null;
        resolve(value);
      },
    };
  });
}

export function applyTheme(theme) {
  state.theme = theme;
  localStorage.setItem("panel.theme", theme);
  if (theme === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

export function invalidate(resource) {
  if (resource in state.versions) state.versions[resource] += 1;
}

// Pages that show traffic counters fetch them again when they move: on a traffic tick, at
// most once every TRAFFIC_REFRESH_MS (a tick comes every trafficInterval seconds, 1 at the
// least, and a page of clients carries the summary of every client), and only while the
// tab is visible; ticks while it is hidden make one refresh when it shows again. Call
// from a page's setup(); `refresh` updates rows in place, without a loading state.
const TRAFFIC_REFRESH_MS = 5000;

export function onTrafficTick(refresh) {
  let last = 0;
  let timer = 0;
  let missed = false;
  const run = () => {
    timer = 0;
    if (document.hidden) {
      missed = true;
      return;
    }
    missed = false;
    last = Date.now();
    refresh();
  };
  const schedule = () => {
    if (!timer) timer = setTimeout(run, Math.max(0, last + TRAFFIC_REFRESH_MS - Date.now()));
  };
  const onVisibility = () => {
    if (!document.hidden && missed) schedule();
  };
  Vue.watch(() => state.trafficTicks, schedule);
  document.addEventListener("visibilitychange", onVisibility);
  Vue.onUnmounted(() => {
    clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisibility);
  });
}
