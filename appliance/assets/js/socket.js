// The WebSocket that drives the pages: status feeds the dashboard, invalidate makes the
// page showing that resource fetch it again, traffic (the core's counters moved) lets the
// pages that show traffic refresh it, notification becomes a toast and coreState the
// badge in the header. A dropped socket reconnects with growing delays (1 s up to
// 30 s), reset once a connection holds.
import { invalidate, state, toast } from "./state.js";

const MAX_DELAY = 30000;
let socket = null;
let delay = 1000;
let timer = 0;
let wanted = false;

export function openSocket() {
  wanted = true;
  if (socket) return;
  const url = new URL("ws", document.baseURI);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  socket = new WebSocket(url);
  socket.onopen = () => {
    delay = 1000;
    state.socketOpen = true;
  };
  socket.onmessage = (event) => handle(event.data);
  socket.onclose = () => {
    socket = null;
    state.socketOpen = false;
    if (!wanted) return;
    timer = setTimeout(openSocket, delay);
    delay = Math.min(delay * 2, MAX_DELAY);
  };
}

export function closeSocket() {
  wanted = false;
  clearTimeout(timer);
  if (socket) socket.close();
  socket = null;
}

function handle(text) {
  let message;
  try {
    message = JSON.parse(text);
  } catch (error) {
    return;
  }
  if (message.type === "status") {
    state.status = message.data;
    if (message.data && message.data.core) state.coreState = message.data.core.state;
  } else if (message.type === "coreState") {
    state.coreState = message.data;
  } else if (message.type === "mtprotoState") {
    const proxies = ((state.status && state.status.mtproto) || []).filter((p) => p.inboundId !== message.data.inboundId);
    if (state.status) state.status = { ...state.status, mtproto: [...proxies, { ...message.data }] };
  } else if (message.type === "invalidate") {
    invalidate(message.resource);
  } else if (message.type === "traffic") {
    state.trafficTicks += 1;
  } else if (message.type === "notification") {
    // The page already said how its own action went: the panel's notice on it adds nothing.
    const said = message.key && state.toasts.some((item) => item.key === message.key && item.severity !== "error");
    if (!said) toast(message.body || "", message.severity || "info", message.title || "", message.key || "");
  }
}
