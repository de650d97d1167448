// State shared by every page: sign-in, live status from the WebSocket, the resource
// versions that invalidation bumps, toasts, the confirm dialog and the theme.
import { Vue } from "./lib.js";

export const state = Vue.reactive({
  signedIn: false,
  status: null,
  coreState: "",
  socketOpen: false,
  versions: { inbounds: 0, clients: 0, settings: 0, apiTokens: 0, core: 0, hosts: 0 },
  toasts: [],
  confirm: null,
  theme: localStorage.getItem("panel.theme") || "auto",
});

let toastId = 0;

export function toast(text, severity = "info", title = "") {
  const id = ++toastId;
  state.toasts.push({ id, text, severity, title });
  setTimeout(() => dismissToast(id), severity === "error" ? 8000 : 4000);
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
