// Where things run: the nodes (other panels this one manages) as the pages outside the
// Nodes page need them. An inbound bound to a node names it and is marked when that node
// is offline, disabled, gone or out of step (changes waiting to be replayed), and so is
// each client attached to it: nothing is out of step in silence. An online client names
// the panels it is connected through.
// The node list is read quietly: a panel without nodes, or a token that may not read
// them, simply shows no places.
import { html, Vue } from "./lib.js";
import { api } from "./api.js";
import { t } from "./i18n.js";
import { state } from "./state.js";

// Heartbeats change a node's status without a change notice: the list is read again with
// the live status pushes, at most this often.
const REFRESH_MS = 5000;

// The node list, kept fresh while the calling page is shown.
export function useNodes() {
  const nodes = Vue.ref([]);
  let loadedAt = 0;
  const load = () => {
    loadedAt = Date.now();
    return api.get("panel/api/nodes/list", { quiet: true }).then((list) => (nodes.value = list), () => {});
  };
  Vue.onMounted(load);
  Vue.watch(() => state.versions.nodes, load);
  Vue.watch(() => state.status, () => {
    if (!document.hidden && Date.now() - loadedAt >= REFRESH_MS) load();
  });
  return nodes;
}

// Why a node's inbounds may not run as stored; null when the node runs them.
function nodeTrouble(node, inbound) {
  if (!node) return { key: "nodes.mark.gone", title: t("nodes.mark.goneHint") };
  if (node.outOfStep || inbound.nodeOutOfStep) {
    return { key: "nodes.mark.outOfStep", title: t("nodes.outOfStepHint") };
  }
  if (!node.enable) return { key: "nodes.mark.disabled", title: t("nodes.mark.disabledHint") };
  if (node.status !== "online") {
    return { key: "nodes.mark.offline", title: node.lastError || t(`nodes.status.${node.status}`) };
  }
  return null;
}

// The place an inbound runs, under its name: nothing for this host, the node's name and
// any trouble for a node's inbound.
export function inboundPlace(inbound, nodes) {
  if (inbound.nodeId == null) return null;
  const node = nodes.find((item) => item.id === inbound.nodeId);
  const trouble = nodeTrouble(node, inbound);
  return html`<div class="node-place"><span class="tag node" data-testid="inbound-node">${
    t("nodes.on", { name: node ? node.name : `#${inbound.nodeId}` })}</span>${trouble
    ? html` <span class="badge core-error node-mark" data-testid="inbound-node-mark" title=${trouble.title}>${t(trouble.key)}</span>`
    : null}</div>`;
}

// A client attached to inbounds of a node that does not run them as stored: the first
// such node's trouble, under the client's name. `inbounds` are inbounds/options rows.
export function clientNodeMark(inboundIds, inbounds, nodes) {
  for (const id of inboundIds || []) {
    const inbound = inbounds.find((item) => item.id === id);
    if (!inbound || inbound.nodeId == null) continue;
    const node = nodes.find((item) => item.id === inbound.nodeId);
    const trouble = nodeTrouble(node, inbound);
    if (trouble) {
      return html`<div class="badge core-error node-mark" data-testid="client-node-mark" title=${trouble.title}>${
        node ? `${node.name}: ${t(trouble.key)}` : t(trouble.key)}</div>`;
    }
  }
  return null;
}

// Online emails with the guids of the panels they are connected through, from
// clients/onlinesByGuid; a panel that does not answer that route gives an empty map.
export async function onlineGuids() {
  let byGuid;
  try {
    byGuid = await api.post("panel/api/clients/onlinesByGuid", undefined, { quiet: true });
  } catch (error) {
    return new Map();
  }
  const guids = new Map();
  for (const [guid, emails] of Object.entries(byGuid || {})) {
    for (const email of emails || []) {
      if (!guids.has(email)) guids.set(email, []);
      guids.get(email).push(guid);
    }
  }
  return guids;
}

// A panel by its guid: this panel's (server/status) is "this host", a node's its name.
// Named when shown, so a status or node list that arrives later still names it.
export function placeName(guid, nodes) {
  if (state.status && guid === state.status.guid) return t("nodes.thisHost");
  const node = nodes.find((item) => item.guid === guid);
  return node ? node.name : guid.slice(0, 8);
}
