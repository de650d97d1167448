// The add/edit form of an inbound: where it runs (this host or a node), common fields,
// then the protocol's settings, then the transport and its security (TLS or REALITY) and
// sniffing. Editing starts from the full stored inbound, so fields this form does not
// show are kept as they were. The panel's refusal names a field by its path in the
// inbound (streamSettings.realitySettings.privateKey); the form shows it under that
// field's label and marks the field.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { toast } from "../state.js";
import { checkbox, checkedField, copyText, DateInput, field, listText, localDay, Modal, numberInput, selectInput, textInput } from "../components.js";
import { hysteriaStream, tlsFields, WireguardFields } from "./inbound-udp.js";

export const PROTOCOLS = ["vless", "vmess", "trojan", "shadowsocks", "hysteria2", "wireguard", "socks", "http", "mixed", "dokodemo", "mtproto"];
const STREAM_PROTOCOLS = ["vless", "vmess", "trojan", "shadowsocks"];
// Protocols that run only on this host (NODE_PROTOCOLS of appliance/services/inbounds/records.py).
const HOST_ONLY = ["mtproto"];
const REALITY_PROTOCOLS = ["vless", "trojan"];
const NETWORKS = ["tcp", "ws", "grpc", "httpupgrade", "xhttp", "kcp"];
const SS_METHODS = [
  "aes-128-gcm", "aes-256-gcm", "chacha20-poly1305", "chacha20-ietf-poly1305",
  "xchacha20-poly1305", "2022-blake3-aes-128-gcm", "2022-blake3-aes-256-gcm",
  "2022-blake3-chacha20-poly1305",
];
const L4 = [["tcp", "TCP"], ["udp", "UDP"], ["tcp,udp", "TCP + UDP"]];
const SNIFF = ["http", "tls", "quic", "fakedns"];
const GB = 1024 ** 3;
// uTLS fingerprints a REALITY client imitates.
const FINGERPRINTS = ["chrome", "firefox", "safari", "ios", "android", "edge", "360", "qq", "random", "randomized"];
// Well-known TLS 1.3 sites to borrow a handshake from, with the names they answer to.
const REALITY_TARGETS = {
  "www.microsoft.com:443": ["www.microsoft.com"],
  "www.apple.com:443": ["www.apple.com", "images.apple.com"],
  "dl.google.com:443": ["dl.google.com"],
  "www.amazon.com:443": ["www.amazon.com"],
  "www.cloudflare.com:443": ["www.cloudflare.com"],
  "www.nvidia.com:443": ["www.nvidia.com"],
  "www.samsung.com:443": ["www.samsung.com"],
  "addons.mozilla.org:443": ["addons.mozilla.org"],
};
// The capability (server/coreCapabilities) each choice of transport and security asks of
// the core; a choice the running core lacks is greyed out with the reason as its title.
const NEEDS = {
  grpc: "gRPC", httpupgrade: "HTTPUpgrade", xhttp: "XHTTP", reality: "REALITY",
  "2022-blake3-aes-128-gcm": "Shadowsocks 2022", "2022-blake3-aes-256-gcm": "Shadowsocks 2022",
  "2022-blake3-chacha20-poly1305": "Shadowsocks 2022",
  hysteria2: "Hysteria 2", wireguard: "WireGuard",
};
// "streamSettings.realitySettings.privateKey must be ... (got ...)": the path and the rest.
const REFUSAL = /^([A-Za-z][\w.]*(?:\[\d+\])*(?:\.[\w]+)*) (must .*)$/s;

function hex(length) {
  const bytes = crypto.getRandomValues(new Uint8Array(length / 2));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// A few short ids of different even lengths from 2 to 16 hex digits.
function newShortIds() {
  return [16, 8, 4, 2].map((length) => hex(length));
}

function defaults(protocol) {
  switch (protocol) {
    case "vless": return { decryption: "none" };
    case "shadowsocks": return { method: "chacha20-ietf-poly1305", network: "tcp,udp" };
    case "socks": case "mixed": return { auth: "noauth", accounts: [], udp: false };
    case "http": return { accounts: [], allowTransparent: false };
    case "dokodemo": return { address: "", port: 0, network: "tcp", followRedirect: false };
    case "mtproto": return { domain: "", adTag: "" };
    case "hysteria2": return { version: 2 };
    case "wireguard": return { secretKey: "", mtu: 1420, peers: [] };
    default: return {};
  }
}

// A port from 10000 to 59999 that none of `taken` is.
export function freePort(taken) {
  const used = new Set(taken.map(Number));
  for (;;) {
    const port = 10000 + Math.floor(Math.random() * 50000);
    if (!used.has(port)) return port;
  }
}

function blank() {
  return {
    remark: "", protocol: "vless", nodeId: null, listen: "", port: freePort([]),
    enable: true, expiryTime: 0, total: 0, settings: defaults("vless"),
    streamSettings: { network: "tcp", security: "none" },
    sniffing: { enabled: true, destOverride: ["http", "tls", "quic"] },
  };
}

function child(parent, key) {
  if (!parent[key] || typeof parent[key] !== "object") parent[key] = {};
  return parent[key];
}

export const InboundForm = {
  props: ["inbound", "nodes", "onClose", "onSaved"],
  setup(props) {
    const source = props.inbound ? JSON.parse(JSON.stringify(props.inbound)) : blank();
    delete source.clientStats;
    if (source.settings) delete source.settings.clients;
    const model = Vue.reactive(source);
    const editing = !!props.inbound;
    const busy = Vue.ref(false);
    const form = Vue.reactive({
      totalGB: model.total ? +(model.total / GB).toFixed(2) : 0,
      expiry: model.expiryTime > 0 ? localDay(model.expiryTime) : "",
    });
    const account = Vue.reactive({ ...((model.settings.accounts || [])[0] || { user: "", pass: "" }) });
    // The field the panel refused: its path and what is wrong with it.
    const problem = Vue.ref(null);
    // Labels of the fields on screen by their path, filled in as they render.
    const labels = {};
    // Feature -> why the running core cannot run it; an inbound on a node runs on its core.
    const lacking = Vue.reactive({});
    api.get("panel/api/server/coreCapabilities").then((table) => {
      for (const [feature, about] of Object.entries(table.features)) if (!about.runs) lacking[feature] = about.reason;
    }).catch(() => {});

    function why(choice) {
      return model.nodeId == null && NEEDS[choice] ? lacking[NEEDS[choice]] || "" : "";
    }

    // A select whose choices the running core lacks are greyed out, saying why.
    function choiceSelect(target, key, choices, attrs = {}) {
      return html`<select value=${target[key]} onChange=${(event) => (target[key] = event.target.value)} ...${attrs}>${
        choices.map(([value, label]) => html`<option value=${value} selected=${target[key] === value}
          disabled=${!!why(value)} title=${why(value)}>${label}</option>`)}</select>`;
    }

    function pathField(path, label, input, hint = "") {
      labels[path] = label;
      const wrong = problem.value && problem.value.path === path ? problem.value.text : null;
      return html`<div data-path=${path} class="field-box">${checkedField(label, input, wrong, hint)}</div>`;
    }

    // The label of the field a refusal names: the field itself, else the nearest enclosing
    // one (a list item's path names its list).
    function fieldOf(path) {
      let at = path;
      while (!(at in labels)) {
        const shorter = at.replace(/(\[\d+\]|\.[^.[]+)$/, "");
        if (shorter === at) return null;
        at = shorter;
      }
      return at;
    }

    function showRefusal(message) {
      const match = REFUSAL.exec(message);
      const path = match && fieldOf(match[1]);
      if (!path) {
        toast(message, "error");
        return;
      }
      problem.value = { path, text: match[2] };
      toast(t("inbound.fieldProblem", { field: labels[path], problem: match[2] }), "error");
      Vue.nextTick(() => {
        const input = document.querySelector(`#inbound-form [data-path="${path}"] input, #inbound-form [data-path="${path}"] select`);
        if (input) input.focus();
      });
    }

    function setProtocol(protocol) {
      model.protocol = protocol;
      model.settings = defaults(protocol);
      if (protocol === "hysteria2") model.streamSettings = hysteriaStream();
      else if (!STREAM_PROTOCOLS.includes(protocol)) model.streamSettings = {};
      else model.streamSettings = { network: "tcp", security: "none" };
    }

    async function newRealityKeys() {
      const keys = await api.get("panel/api/server/getNewX25519Cert");
      const reality = child(model.streamSettings, "realitySettings");
      reality.privateKey = keys.privateKey;
      child(reality, "settings").publicKey = keys.publicKey;
    }

    // A new REALITY section starts complete but for the target: keys, short ids, the
    // fingerprint and spider path client apps get.
    function startReality() {
      const reality = child(model.streamSettings, "realitySettings");
      const extra = child(reality, "settings");
      if (!reality.shortIds || !reality.shortIds.some(Boolean)) reality.shortIds = newShortIds();
      if (!extra.fingerprint) extra.fingerprint = "chrome";
      if (extra.spiderX === undefined) extra.spiderX = "/";
      if (!reality.privateKey) newRealityKeys().catch(() => {});
    }

    function setSecurity(security) {
      model.streamSettings.security = security;
      if (security === "reality") startReality();
    }

    // A suggested target brings its server names, unless the admin typed others.
    function setRealityTarget(reality, target) {
      const previous = REALITY_TARGETS[reality.target];
      const names = reality.serverNames || [];
      reality.target = target;
      const untouched = !names.length || (previous && previous.join() === names.join());
      if (REALITY_TARGETS[target] && untouched) reality.serverNames = [...REALITY_TARGETS[target]];
    }

    function setPrivateKey(reality, value) {
      reality.privateKey = value;
      // A key typed by hand has no public key here; links derive it from the private key.
      if (reality.settings) delete reality.settings.publicKey;
    }

    async function save() {
      const payload = JSON.parse(JSON.stringify(model));
      payload.total = Math.round((Number(form.totalGB) || 0) * GB);
      payload.expiryTime = form.expiry ? new Date(`${form.expiry}T23:59:59`).getTime() : 0;
      if (["socks", "mixed", "http"].includes(model.protocol)) {
        payload.settings.accounts = account.user ? [{ user: account.user, pass: account.pass }] : [];
      }
      busy.value = true;
      problem.value = null;
      try {
        if (editing) await api.post(`panel/api/inbounds/update/${model.id}`, payload, { quiet: true });
        else await api.post("panel/api/inbounds/add", payload, { quiet: true });
        props.onSaved();
      } catch (error) {
        showRefusal(error.message);
      } finally {
        busy.value = false;
      }
    }

    function protocolFields() {
      const s = model.settings;
      switch (model.protocol) {
        case "shadowsocks":
          return html`
            ${pathField("settings.method", t("inbound.method"), choiceSelect(s, "method", SS_METHODS.map((m) => [m, m])))}
            ${pathField("settings.network", t("inbound.network"), selectInput(s, "network", L4))}
            ${s.method && s.method.startsWith("2022") ? pathField("settings.password", t("inbound.serverKey"), textInput(s, "password"), t("inbound.serverKeyHint")) : null}`;
        case "socks": case "mixed":
          return html`
            ${field(t("inbound.auth"), selectInput(s, "auth", [["noauth", t("inbound.noAuth")], ["password", t("inbound.passwordAuth")]]))}
            ${s.auth === "password" ? html`${field(t("inbound.user"), textInput(account, "user"))}${field(t("inbound.pass"), textInput(account, "pass"))}` : null}
            ${checkbox(s, "udp", t("inbound.udp"))}`;
        case "http":
          return html`
            ${field(t("inbound.user"), textInput(account, "user"), t("inbound.optional"))}
            ${field(t("inbound.pass"), textInput(account, "pass"))}
            ${checkbox(s, "allowTransparent", t("inbound.allowTransparent"))}`;
        case "dokodemo":
          return html`
            ${pathField("settings.address", t("inbound.targetAddress"), textInput(s, "address"))}
            ${pathField("settings.port", t("inbound.targetPort"), numberInput(s, "port", { min: 0, max: 65535 }))}
            ${pathField("settings.network", t("inbound.network"), selectInput(s, "network", L4))}
            ${checkbox(s, "followRedirect", t("inbound.followRedirect"))}`;
        case "hysteria2":
          return html`<fieldset class="span-2"><legend>${t("inbound.hysteria")}</legend>${tlsFields(model.streamSettings, pathField)}</fieldset>`;
        case "wireguard":
          return html`<${WireguardFields} settings=${s} port=${model.port} remark=${model.remark} pathField=${pathField} />`;
        case "mtproto":
          return html`
            ${pathField("settings.domain", t("inbound.fakeTlsDomain"), textInput(s, "domain", { name: "domain" }), t("inbound.fakeTlsHint"))}
            ${pathField("settings.adTag", t("inbound.adTag"), textInput(s, "adTag", { name: "adTag" }), t("inbound.adTagHint"))}`;
        default:
          return null;
      }
    }

    function transportFields() {
      if (!STREAM_PROTOCOLS.includes(model.protocol)) return null;
      const stream = model.streamSettings;
      const network = stream.network || "tcp";
      let transport = null;
      if (["ws", "httpupgrade", "xhttp"].includes(network)) {
        const obj = child(stream, `${network}Settings`);
        transport = html`${pathField(`streamSettings.${network}Settings.path`, t("inbound.path"), textInput(obj, "path", { placeholder: "/" }))}
          ${pathField(`streamSettings.${network}Settings.host`, t("inbound.host"), textInput(obj, "host"))}`;
      } else if (network === "grpc") {
        transport = pathField("streamSettings.grpcSettings.serviceName", t("inbound.serviceName"), textInput(child(stream, "grpcSettings"), "serviceName"));
      }
      const securities = [["none", t("inbound.securityNone")], ["tls", "TLS"]];
      if (REALITY_PROTOCOLS.includes(model.protocol)) securities.push(["reality", "REALITY"]);
      let security = null;
      if (stream.security === "tls") {
        security = tlsFields(stream, pathField);
      } else if (stream.security === "reality") {
        const reality = child(stream, "realitySettings");
        if (!reality.shortIds) reality.shortIds = [""];
        const extra = child(reality, "settings");
        const at = "streamSettings.realitySettings";
        security = html`${pathField(`${at}.target`, t("inbound.realityTarget"), html`<input type="text" name="realityTarget"
            list="reality-targets" placeholder="www.microsoft.com:443" value=${reality.target ?? ""}
            onInput=${(event) => setRealityTarget(reality, event.target.value)} />
          <datalist id="reality-targets">${Object.keys(REALITY_TARGETS).map((target) => html`<option value=${target}></option>`)}</datalist>`,
          t("inbound.realityTargetHint"))}
          ${pathField(`${at}.serverNames`, t("inbound.serverNames"), listText(reality, "serverNames", { name: "serverNames", placeholder: "www.microsoft.com" }))}
          ${pathField(`${at}.privateKey`, t("inbound.privateKey"), html`<input type="text" name="privateKey" value=${reality.privateKey ?? ""}
            onInput=${(event) => setPrivateKey(reality, event.target.value)} />`)}
          ${pathField(`${at}.settings.publicKey`, t("inbound.publicKey"), html`<div class="copy-row">
            <input type="text" name="publicKey" readonly value=${extra.publicKey ?? ""} />
            <button type="button" disabled=${!extra.publicKey} aria-label=${`${t("common.copy")}: ${t("inbound.publicKey")}`}
              onClick=${() => copyText(extra.publicKey)}>${t("common.copy")}</button></div>`, t("inbound.publicKeyHint"))}
          <div class="field-box"><button type="button" onClick=${() => newRealityKeys().catch(() => {})}>${t("inbound.newKeys")}</button></div>
          ${pathField(`${at}.shortIds`, t("inbound.shortIds"), listText(reality, "shortIds", { name: "shortIds" }), t("inbound.shortIdsHint"))}
          <div class="field-box"><button type="button" onClick=${() => (reality.shortIds = newShortIds())}>${t("inbound.newShortIds")}</button></div>
          ${pathField(`${at}.settings.fingerprint`, t("inbound.fingerprint"), selectInput(extra, "fingerprint",
            FINGERPRINTS.map((name) => [name, name]), { name: "fingerprint" }))}
          ${pathField(`${at}.settings.spiderX`, t("inbound.spiderX"), textInput(extra, "spiderX", { name: "spiderX", placeholder: "/" }))}`;
      }
      return html`<fieldset><legend>${t("inbound.transport")}</legend>
        ${pathField("streamSettings.network", t("inbound.transport"), choiceSelect(stream, "network", NETWORKS.map((n) => [n, n]), { name: "network" }))}
        ${transport}
        ${pathField("streamSettings.security", t("inbound.security"), html`<select name="security" value=${stream.security}
          onChange=${(event) => setSecurity(event.target.value)}>${securities.map(([value, label]) =>
            html`<option value=${value} selected=${stream.security === value} disabled=${!!why(value)}
              title=${why(value)}>${label}</option>`)}</select>`, securities.map(([value, label]) => why(value) && `${label}: ${why(value)}`).filter(Boolean).join(" "))}
        ${security}
      </fieldset>`;
    }

    // Shown once there is a node to choose, or when the inbound is bound to one (maybe
    // since deleted: it stays listed so a save does not move the inbound silently).
    function placeField() {
      const nodes = props.nodes || [];
      if (!nodes.length && model.nodeId == null) return null;
      const hostOnly = HOST_ONLY.includes(model.protocol);
      const choices = [["", t("nodes.thisHost")], ...nodes.map((node) => [String(node.id),
        node.status === "online" ? node.name : `${node.name} (${t(`nodes.status.${node.status}`)})`])];
      if (model.nodeId != null && !nodes.some((node) => node.id === model.nodeId)) {
        choices.push([String(model.nodeId), t("nodes.deletedNode", { id: model.nodeId })]);
      }
      const current = model.nodeId == null ? "" : String(model.nodeId);
      return pathField("nodeId", t("inbound.runsOn"), html`<select name="nodeId" value=${current} disabled=${hostOnly}
        onChange=${(event) => (model.nodeId = event.target.value === "" ? null : Number(event.target.value))}>${
        choices.map(([value, label]) => html`<option value=${value} selected=${value === current}>${label}</option>`)}</select>`,
        hostOnly ? t("inbound.hostOnly") : t("inbound.runsOnHint"));
    }

    function sniffingFields() {
      const sniffing = child(model, "sniffing");
      if (!Array.isArray(sniffing.destOverride)) sniffing.destOverride = [];
      return html`<fieldset><legend>${t("inbound.sniffing")}</legend>
        ${checkbox(sniffing, "enabled", t("inbound.sniffingEnabled"))}
        <div class="row">${SNIFF.map((name) => html`<label class="check"><input type="checkbox"
          checked=${sniffing.destOverride.includes(name)} onChange=${(event) => {
            sniffing.destOverride = event.target.checked
              ? [...sniffing.destOverride, name]
              : sniffing.destOverride.filter((item) => item !== name);
          }} /><span>${name}</span></label>`)}</div>
      </fieldset>`;
    }

    return () => html`<${Modal} wide=${true} title=${editing ? t("inbound.edit") : t("inbound.add")} onClose=${props.onClose}
      body=${() => html`<form class="form-grid" id="inbound-form" onSubmit=${(e) => { e.preventDefault(); save(); }}>
        ${pathField("remark", t("inbound.remark"), textInput(model, "remark", { name: "remark" }))}
        ${placeField()}
        ${field(t("inbound.protocol"), html`<select name="protocol" disabled=${editing} value=${model.protocol}
          onChange=${(e) => setProtocol(e.target.value)}>${PROTOCOLS.map((p) => html`<option value=${p} selected=${p === model.protocol}
            disabled=${!!why(p)} title=${why(p)}>${p}</option>`)}</select>`)}
        ${pathField("listen", t("inbound.listen"), textInput(model, "listen", { placeholder: "0.0.0.0" }))}
        ${pathField("port", t("inbound.port"), numberInput(model, "port", { name: "port", min: 1, max: 65535 }))}
        ${field(t("inbound.totalGB"), numberInput(form, "totalGB", { min: 0, step: "any" }), t("common.zeroUnlimited"))}
        ${field(t("inbound.expiry"), html`<${DateInput} value=${form.expiry} onChange=${(day) => (form.expiry = day)} attrs=${{ name: "expiry" }} />`, t("common.emptyNever"))}
        ${checkbox(model, "enable", t("common.enabled"))}
        ${protocolFields()}
        ${transportFields()}
        ${sniffingFields()}
      </form>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="inbound-form" disabled=${busy.value}>${t("common.save")}</button>`} />`;
  },
};
