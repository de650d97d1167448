// The outbounds tab's form: every outbound protocol Xray has, with the transport and TLS or
// REALITY of those that take stream settings, filled by hand, from an outbound of the
// template (to edit it) or from a pasted share link (core/outboundFromLink reads it on the
// panel, with the same reader the outbound subscriptions use). The form edits a draft;
// "Add outbound" or "Apply" writes the outbound into the template, so the raw JSON follows.
// Keys of an edited outbound the form does not know (mux, sockopt, a freedom's fragment...)
// are kept as they were.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { checkbox, field, textInput } from "../components.js";

export const PROTOCOLS = ["freedom", "blackhole", "dns", "loopback", "http", "socks", "vless", "vmess", "trojan", "shadowsocks", "wireguard", "hysteria"];
// Protocols whose server is an address and a port, and those that take stream settings.
const SERVERS = ["dns", "http", "socks", "vless", "vmess", "trojan", "shadowsocks", "hysteria"];
const STREAMED = ["http", "socks", "vless", "vmess", "trojan", "shadowsocks"];
const NETWORKS = ["tcp", "ws", "grpc", "httpupgrade", "xhttp", "kcp"];
const PATHED = ["ws", "httpupgrade", "xhttp"];
const SECURITIES = ["none", "tls", "reality"];
const FINGERPRINTS = ["", "chrome", "firefox", "safari", "ios", "android", "edge", "360", "qq", "random", "randomized"];
const FREEDOM_STRATEGIES = ["AsIs", "UseIP", "UseIPv4", "UseIPv6", "ForceIP", "ForceIPv4", "ForceIPv6"];
const VMESS_SECURITIES = ["auto", "aes-128-gcm", "chacha20-poly1305", "none", "zero"];
const SS_METHODS = ["2022-blake3-aes-128-gcm", "2022-blake3-aes-256-gcm", "2022-blake3-chacha20-poly1305", "aes-128-gcm", "aes-256-gcm", "chacha20-poly1305", "xchacha20-poly1305", "none"];
// The capability (server/coreCapabilities) each choice of protocol, transport and security
// asks of the core; a choice the running core lacks is greyed out with the reason.
const NEEDS = {
  loopback: "Loopback", wireguard: "WireGuard", hysteria: "Hysteria 2", reality: "REALITY",
  grpc: "gRPC", httpupgrade: "HTTPUpgrade", xhttp: "XHTTP",
  "2022-blake3-aes-128-gcm": "Shadowsocks 2022", "2022-blake3-aes-256-gcm": "Shadowsocks 2022",
  "2022-blake3-chacha20-poly1305": "Shadowsocks 2022",
};
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const EMPTY = {
  protocol: "freedom", tag: "", address: "", port: "", user: "", pass: "", id: "", flow: "", vmessSecurity: "auto",
  password: "", method: "2022-blake3-aes-128-gcm", domainStrategy: "AsIs", redirect: "", response: "none", inboundTag: "",
  secretKey: "", localAddress: "", peerPublicKey: "", endpoint: "", preSharedKey: "", network: "tcp", path: "", host: "",
  serviceName: "", mode: "", security: "none", sni: "", fingerprint: "", alpn: "", publicKey: "", noKernelTun: true,
  shortId: "", spiderX: "",
};

const object = (value) => (value && typeof value === "object" && !Array.isArray(value) ? value : {});
const text = (value) => (value === undefined || value === null ? "" : String(value));

// Sets `key` to `value`, or removes it when the value is empty: a cleared field clears.
function put(target, key, value) {
  if (value === "" || value === undefined || value === null || (Array.isArray(value) && value.length === 0)) delete target[key];
  else target[key] = value;
}

function list(value) {
  return value.split(",").map((item) => item.trim()).filter(Boolean);
}

// The form's draft of an outbound of the template (or of a share link's).
export function outboundDraft(outbound) {
  const o = object(outbound);
  const settings = object(o.settings);
  const stream = object(o.streamSettings);
  const server = object((settings.vnext || settings.servers || [])[0]);
  const user = object((server.users || [])[0]);
  const peer = object((settings.peers || [])[0]);
  const network = text(stream.network) || "tcp";
  const transport = object(stream[`${network}Settings`]);
  const tls = object(stream.security === "reality" ? stream.realitySettings : stream.tlsSettings);
  const hysteria = object(stream.hysteriaSettings);
  return {
    ...EMPTY,
    protocol: text(o.protocol) || "freedom", tag: text(o.tag),
    address: text(server.address || settings.address), port: text(server.port || settings.port),
    user: text(user.user), pass: text(user.pass), id: text(user.id), flow: text(user.flow), vmessSecurity: text(user.security) || "auto",
    password: text(server.password || hysteria.auth), method: text(server.method) || EMPTY.method,
    domainStrategy: text(settings.domainStrategy) || "AsIs", redirect: text(settings.redirect),
    response: text(object(settings.response).type) || "none", inboundTag: text(settings.inboundTag),
    secretKey: text(settings.secretKey), localAddress: (settings.address && Array.isArray(settings.address) ? settings.address : []).join(", "),
    peerPublicKey: text(peer.publicKey), endpoint: text(peer.endpoint), preSharedKey: text(peer.preSharedKey),
    network, path: text(transport.path), host: text(transport.host), serviceName: text(transport.serviceName), mode: text(transport.mode),
    security: text(stream.security) || "none", sni: text(tls.serverName), fingerprint: text(tls.fingerprint),
    alpn: (Array.isArray(tls.alpn) ? tls.alpn : []).join(", "), noKernelTun: !!settings.noKernelTun,
    publicKey: text(tls.publicKey || tls.password), shortId: text(tls.shortId), spiderX: text(tls.spiderX),
  };
}

function serverOf(draft) {
  const address = draft.address.trim();
  const port = Number(draft.port);
  if (!address || !Number.isInteger(port) || port < 1 || port > 65535) return null;
  return { address, port };
}

// The protocol's settings, or the sentence that says what is missing.
function settingsOf(draft, server) {
  const p = draft.protocol;
  if (p === "freedom") {
    const settings = { domainStrategy: draft.domainStrategy };
    put(settings, "redirect", draft.redirect.trim());
    return { settings };
  }
  if (p === "blackhole") return { settings: draft.response === "http" ? { response: { type: "http" } } : {} };
  if (p === "loopback") return draft.inboundTag.trim() ? { settings: { inboundTag: draft.inboundTag.trim() } } : { error: t("core.out.inboundTagRequired") };
  if (p === "dns") return { settings: server || {} };
  if (p === "wireguard") {
    if (!draft.secretKey.trim() || !draft.peerPublicKey.trim() || !draft.endpoint.trim()) return { error: t("core.out.wireguardRequired") };
    const peer = { publicKey: draft.peerPublicKey.trim(), endpoint: draft.endpoint.trim() };
    put(peer, "preSharedKey", draft.preSharedKey.trim());
    const settings = { secretKey: draft.secretKey.trim(), peers: [peer] };
    put(settings, "address", list(draft.localAddress));
    put(settings, "noKernelTun", draft.noKernelTun || null);
    return { settings };
  }
  if (!server) return { error: t("core.addressPortRequired") };
  if (p === "vless" || p === "vmess") {
    if (!UUID.test(draft.id.trim())) return { error: t("core.uuidRequired") };
    const user = p === "vless" ? { id: draft.id.trim(), encryption: "none" } : { id: draft.id.trim(), security: draft.vmessSecurity };
    if (p === "vless") put(user, "flow", draft.flow);
    return { settings: { vnext: [{ ...server, users: [user] }] } };
  }
  if (p === "http" || p === "socks") return { settings: { servers: [draft.user ? { ...server, users: [{ user: draft.user, pass: draft.pass }] } : server] } };
  if (!draft.password) return { error: t("core.out.passwordRequired") };
  if (p === "trojan") return { settings: { servers: [{ ...server, password: draft.password }] } };
  if (p === "shadowsocks") return { settings: { servers: [{ ...server, method: draft.method, password: draft.password }] } };
  return { settings: { version: 2, ...server } };
}

// The stream settings over those of `original`, or the sentence that says what is missing.
function streamOf(draft, original) {
  const before = object(original);
  const stream = { ...before };
  const network = draft.protocol === "hysteria" ? "hysteria" : draft.network;
  for (const key of Object.keys(stream)) if (/^(tls|reality|ws|grpc|httpupgrade|xhttp|kcp|hysteria)Settings$/.test(key) && key !== `${network}Settings`) delete stream[key];
  stream.network = network;
  const transport = { ...object(before[`${network}Settings`]) };
  if (PATHED.includes(network)) {
    put(transport, "path", draft.path.trim());
    put(transport, "host", draft.host.trim());
    if (network === "xhttp") put(transport, "mode", draft.mode.trim());
  }
  if (network === "grpc") put(transport, "serviceName", draft.serviceName.trim());
  if (network === "hysteria") Object.assign(transport, { version: 2, auth: draft.password });
  put(stream, `${network}Settings`, Object.keys(transport).length ? transport : null);
  const security = draft.protocol === "hysteria" && draft.security === "none" ? "tls" : draft.security;
  stream.security = security;
  if (security === "none") return { stream };
  const tls = { ...object(before[`${security}Settings`]) };
  put(tls, "serverName", draft.sni.trim());
  put(tls, "fingerprint", draft.fingerprint);
  if (security === "tls") put(tls, "alpn", list(draft.alpn));
  else {
    if (!draft.publicKey.trim()) return { error: t("core.out.publicKeyRequired") };
    delete tls.password;
    tls.publicKey = draft.publicKey.trim();
    put(tls, "shortId", draft.shortId.trim());
    put(tls, "spiderX", draft.spiderX.trim());
  }
  stream[`${security}Settings`] = tls;
  return { stream };
}

// The outbound a draft describes, over the keys of `original` the form does not know; or
// the sentence that says what is missing or wrong.
export function draftOutbound(draft, original) {
  const tag = draft.tag.trim();
  if (!tag) return { error: t("core.tagRequired") };
  const before = object(original);
  const { settings, error } = settingsOf(draft, serverOf(draft));
  if (error) return { error };
  const outbound = { ...before, tag, protocol: draft.protocol, settings };
  delete outbound.streamSettings;
  if (!STREAMED.includes(draft.protocol) && draft.protocol !== "hysteria") return { outbound };
  const plain = draft.network === "tcp" && draft.security === "none" && draft.protocol !== "hysteria";
  if (plain && !before.streamSettings) return { outbound };
  const made = streamOf(draft, before.protocol === draft.protocol ? before.streamSettings : null);
  if (made.error) return { error: made.error };
  outbound.streamSettings = made.stream;
  return { outbound };
}

// The form of one outbound: `outbound` is the one edited (null for a new one), `taken(tag)`
// says whether another outbound has the tag; `onApply(outbound)` writes it.
export const OutboundForm = {
  props: ["outbound", "taken", "onApply", "onCancel"],
  setup(props) {
    const draft = Vue.reactive(props.outbound ? outboundDraft(props.outbound) : { ...EMPTY });
    const problem = Vue.ref("");
    const link = Vue.ref("");
    function apply() {
      const { outbound, error } = draftOutbound(draft, props.outbound);
      problem.value = error || (props.taken(outbound.tag) ? t("core.tagTaken", { tag: outbound.tag }) : "");
      if (problem.value) return;
      props.onApply(outbound);
      if (!props.outbound) Object.assign(draft, EMPTY);
    }
    async function importLink() {
      try {
        const outbound = await api.postForm("panel/api/core/outboundFromLink", { link: link.value }, { quiet: true });
        Object.assign(draft, outboundDraft(outbound));
        problem.value = "";
        link.value = "";
      } catch (error) {
        problem.value = error.message;
      }
    }
    // Feature -> why the running core cannot run it.
    const lacking = Vue.reactive({});
    api.get("panel/api/server/coreCapabilities", { quiet: true }).then((table) => {
      for (const [feature, about] of Object.entries(table.features)) if (!about.runs) lacking[feature] = about.reason;
    }).catch(() => {});
    const why = (choice) => (NEEDS[choice] && lacking[NEEDS[choice]]) || "";
    const input = (key, label, hint = "") => field(label, textInput(draft, key, { name: `new-${key}`, spellcheck: "false" }), hint);
    // A select whose choices the running core lacks are greyed out, each saying why in its
    // title and, for screens without hover, together under the field.
    function select(key, label, choices) {
      const pairs = choices.map((c) => (Array.isArray(c) ? c : [c, c]));
      const reasons = pairs.filter(([value]) => why(value)).map(([value, text]) => `${text}: ${why(value)}`).join(" ");
      return field(label, html`<select name=${`new-${key}`} value=${draft[key]} onChange=${(event) => (draft[key] = event.target.value)}>${
        pairs.map(([value, text]) => html`<option value=${value} selected=${draft[key] === value}
          disabled=${!!why(value)} title=${why(value)}>${text}</option>`)}</select>`, reasons);
    }
    function protocolFields() {
      const p = draft.protocol;
      if (p === "freedom") return html`${select("domainStrategy", t("core.domainStrategy"), FREEDOM_STRATEGIES)}${input("redirect", t("core.out.redirect"))}`;
      if (p === "blackhole") return select("response", t("core.out.response"), [["none", t("core.out.responseNone")], ["http", t("core.out.responseHttp")]]);
      if (p === "loopback") return input("inboundTag", t("core.rule.inboundTag"));
      if (p === "wireguard") {
        return html`${input("secretKey", t("core.out.secretKey"))}${input("localAddress", t("core.out.localAddress"), t("core.out.localAddressHint"))}
          ${input("peerPublicKey", t("core.out.peerPublicKey"))}${input("endpoint", t("core.out.endpoint"))}${input("preSharedKey", t("core.out.preSharedKey"))}
          ${field(t("core.out.networkStack"), checkbox(draft, "noKernelTun", t("core.out.noKernelTun"), { name: "new-noKernelTun" }))}`;
      }
      const server = html`${input("address", t("core.address"), p === "dns" ? t("core.out.dnsServerHint") : "")}${input("port", t("hosts.port"))}`;
      if (p === "dns") return server;
      if (p === "http" || p === "socks") return html`${server}${input("user", t("core.user"))}${input("pass", t("core.pass"))}`;
      if (p === "vless") return html`${server}${input("id", "UUID")}${select("flow", "Flow", [["", t("common.none")], "xtls-rprx-vision"])}`;
      if (p === "vmess") return html`${server}${input("id", "UUID")}${select("vmessSecurity", t("core.out.encryption"), VMESS_SECURITIES)}`;
      if (p === "shadowsocks") return html`${server}${select("method", t("core.out.method"), SS_METHODS)}${input("password", t("core.out.password"))}`;
      return html`${server}${input("password", p === "hysteria" ? t("core.out.auth") : t("core.out.password"))}`;
    }
    function streamFields() {
      const hysteria = draft.protocol === "hysteria";
      if (!STREAMED.includes(draft.protocol) && !hysteria) return null;
      const securities = hysteria ? ["tls"] : SECURITIES;
      return html`<fieldset data-testid="outbound-stream"><legend>${t("core.out.stream")}</legend><div class="form-grid">
        ${hysteria ? null : select("network", t("core.out.transport"), NETWORKS.includes(draft.network) ? NETWORKS : [...NETWORKS, draft.network])}
        ${PATHED.includes(draft.network) && !hysteria ? html`${input("path", t("core.out.path"))}${input("host", t("core.out.host"))}` : null}
        ${draft.network === "xhttp" && !hysteria ? input("mode", t("core.out.mode")) : null}
        ${draft.network === "grpc" && !hysteria ? input("serviceName", t("core.out.serviceName")) : null}
        ${select("security", t("core.out.security"), securities)}
        ${draft.security !== "none" || hysteria ? html`${input("sni", "SNI")}${select("fingerprint", t("core.out.fingerprint"), FINGERPRINTS.map((f) => [f, f || t("common.none")]))}` : null}
        ${draft.security === "tls" || hysteria ? input("alpn", "ALPN", t("core.out.alpnHint")) : null}
        ${draft.security === "reality" && !hysteria ? html`${input("publicKey", t("core.out.publicKey"))}${input("shortId", t("core.out.shortId"))}${input("spiderX", "spiderX")}` : null}
      </div></fieldset>`;
    }
    return () => html`<div data-testid="outbound-form">
      <h3>${props.outbound ? t("core.editOutbound", { tag: props.outbound.tag || "-" }) : t("core.addOutbound")}</h3>
      <div class="toolbar">
        ${field(t("core.out.importLink"), html`<input type="text" name="outbound-link" spellcheck="false" placeholder="vless://…" value=${link.value}
          onInput=${(event) => (link.value = event.target.value)} />`)}
        <button type="button" data-testid="outbound-import" disabled=${!link.value.trim()} onClick=${importLink}>${t("core.out.import")}</button></div>
      <div class="form-grid" data-testid="add-outbound">
        ${select("protocol", t("core.protocol"), PROTOCOLS.map((p) => [p, p === "hysteria" ? "hysteria2" : p]))}
        ${input("tag", t("core.tag"))}
        ${protocolFields()}
      </div>
      ${streamFields()}
      ${problem.value ? html`<p class="error-text" role="alert" data-testid="add-outbound-error">${problem.value}</p>` : null}
      <div class="actions">
        ${props.outbound ? html`<button type="button" onClick=${props.onCancel}>${t("common.cancel")}</button>` : null}
        <button type="button" class="primary" data-testid="outbound-apply" onClick=${apply}>${props.outbound ? t("core.applyOutbound") : t("core.addOutbound")}</button></div>
    </div>`;
  },
};
