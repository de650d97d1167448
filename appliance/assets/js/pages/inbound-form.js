// The add/edit form of an inbound: common fields, then the protocol's settings, then the
// transport and its security (TLS or REALITY) and sniffing. Editing starts from the full
// stored inbound, so fields this form does not show are kept as they were.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { checkbox, field, Modal, numberInput, selectInput, textInput } from "../components.js";

export const PROTOCOLS = ["vless", "vmess", "trojan", "shadowsocks", "socks", "http", "mixed", "dokodemo"];
const STREAM_PROTOCOLS = ["vless", "vmess", "trojan", "shadowsocks"];
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

function defaults(protocol) {
  switch (protocol) {
    case "vless": return { decryption: "none" };
    case "shadowsocks": return { method: "chacha20-ietf-poly1305", network: "tcp,udp" };
    case "socks": case "mixed": return { auth: "noauth", accounts: [], udp: false };
    case "http": return { accounts: [], allowTransparent: false };
    case "dokodemo": return { address: "", port: 0, network: "tcp", followRedirect: false };
    default: return {};
  }
}

function blank() {
  return {
    remark: "", protocol: "vless", listen: "", port: 10000 + Math.floor(Math.random() * 50000),
    enable: true, expiryTime: 0, total: 0, settings: defaults("vless"),
    streamSettings: { network: "tcp", security: "none" },
    sniffing: { enabled: true, destOverride: ["http", "tls", "quic"] },
  };
}

function child(parent, key) {
  if (!parent[key] || typeof parent[key] !== "object") parent[key] = {};
  return parent[key];
}

function listText(model, key, attrs = {}) {
  return html`<input type="text" value=${(model[key] || []).join(", ")} ...${attrs}
    onInput=${(event) => (model[key] = event.target.value.split(",").map((s) => s.trim()).filter(Boolean))} />`;
}

export const InboundForm = {
  props: ["inbound", "onClose", "onSaved"],
  setup(props) {
    const source = props.inbound ? JSON.parse(JSON.stringify(props.inbound)) : blank();
    delete source.clientStats;
    if (source.settings) delete source.settings.clients;
    const model = Vue.reactive(source);
    const editing = !!props.inbound;
    const busy = Vue.ref(false);
    const form = Vue.reactive({
      totalGB: model.total ? +(model.total / GB).toFixed(2) : 0,
      expiry: model.expiryTime > 0 ? new Date(model.expiryTime).toISOString().slice(0, 10) : "",
    });
    const account = Vue.reactive({ ...((model.settings.accounts || [])[0] || { user: "", pass: "" }) });

    function setProtocol(protocol) {
      model.protocol = protocol;
      model.settings = defaults(protocol);
      if (!STREAM_PROTOCOLS.includes(protocol)) model.streamSettings = {};
      else model.streamSettings = { network: "tcp", security: "none" };
    }

    async function newRealityKeys() {
      const keys = await api.get("panel/api/server/getNewX25519Cert");
      const reality = child(model.streamSettings, "realitySettings");
      reality.privateKey = keys.privateKey;
      child(reality, "settings").publicKey = keys.publicKey;
    }

    async function save() {
      const payload = JSON.parse(JSON.stringify(model));
      payload.total = Math.round((Number(form.totalGB) || 0) * GB);
      payload.expiryTime = form.expiry ? new Date(`${form.expiry}T23:59:59`).getTime() : 0;
      if (["socks", "mixed", "http"].includes(model.protocol)) {
        payload.settings.accounts = account.user ? [{ user: account.user, pass: account.pass }] : [];
      }
      busy.value = true;
      try {
        if (editing) await api.post(`panel/api/inbounds/update/${model.id}`, payload);
        else await api.post("panel/api/inbounds/add", payload);
        props.onSaved();
      } catch (error) {
        // the toast already shows the panel's message
      } finally {
        busy.value = false;
      }
    }

    function protocolFields() {
      const s = model.settings;
      switch (model.protocol) {
        case "shadowsocks":
          return html`
            ${field(t("inbound.method"), selectInput(s, "method", SS_METHODS.map((m) => [m, m])))}
            ${field(t("inbound.network"), selectInput(s, "network", L4))}
            ${s.method && s.method.startsWith("2022") ? field(t("inbound.serverKey"), textInput(s, "password"), t("inbound.serverKeyHint")) : null}`;
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
            ${field(t("inbound.targetAddress"), textInput(s, "address"))}
            ${field(t("inbound.targetPort"), numberInput(s, "port", { min: 0, max: 65535 }))}
            ${field(t("inbound.network"), selectInput(s, "network", L4))}
            ${checkbox(s, "followRedirect", t("inbound.followRedirect"))}`;
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
        transport = html`${field(t("inbound.path"), textInput(obj, "path", { placeholder: "/" }))}
          ${field(t("inbound.host"), textInput(obj, "host"))}`;
      } else if (network === "grpc") {
        transport = field(t("inbound.serviceName"), textInput(child(stream, "grpcSettings"), "serviceName"));
      }
      const securities = [["none", t("inbound.securityNone")], ["tls", "TLS"]];
      if (REALITY_PROTOCOLS.includes(model.protocol)) securities.push(["reality", "REALITY"]);
      let security = null;
      if (stream.security === "tls") {
        const tls = child(stream, "tlsSettings");
        if (!tls.certificates || !tls.certificates.length) tls.certificates = [{ certificateFile: "", keyFile: "" }];
        const certificate = tls.certificates[0];
        security = html`${field(t("inbound.sni"), textInput(tls, "serverName"))}
          ${field(t("inbound.certFile"), textInput(certificate, "certificateFile", { placeholder: "/etc/ssl/cert.pem" }))}
          ${field(t("inbound.keyFile"), textInput(certificate, "keyFile", { placeholder: "/etc/ssl/key.pem" }))}
          ${field(t("inbound.alpn"), listText(tls, "alpn", { placeholder: "h2, http/1.1" }))}`;
      } else if (stream.security === "reality") {
        const reality = child(stream, "realitySettings");
        if (!reality.shortIds) reality.shortIds = [""];
        security = html`${field(t("inbound.realityTarget"), textInput(reality, "target", { placeholder: "example.com:443" }))}
          ${field(t("inbound.serverNames"), listText(reality, "serverNames", { placeholder: "example.com" }))}
          ${field(t("inbound.privateKey"), textInput(reality, "privateKey"))}
          <button type="button" onClick=${() => newRealityKeys().catch(() => {})}>${t("inbound.newKeys")}</button>
          ${field(t("inbound.shortIds"), listText(reality, "shortIds"))}`;
      }
      return html`<fieldset><legend>${t("inbound.transport")}</legend>
        ${field(t("inbound.transport"), selectInput(stream, "network", NETWORKS.map((n) => [n, n])))}
        ${transport}
        ${field(t("inbound.security"), selectInput(stream, "security", securities))}
        ${security}
      </fieldset>`;
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
        ${field(t("inbound.remark"), textInput(model, "remark", { name: "remark" }))}
        ${field(t("inbound.protocol"), html`<select name="protocol" disabled=${editing} value=${model.protocol}
          onChange=${(e) => setProtocol(e.target.value)}>${PROTOCOLS.map((p) => html`<option value=${p} selected=${p === model.protocol}>${p}</option>`)}</select>`)}
        ${field(t("inbound.listen"), textInput(model, "listen", { placeholder: "0.0.0.0" }))}
        ${field(t("inbound.port"), numberInput(model, "port", { name: "port", min: 1, max: 65535 }))}
        ${field(t("inbound.totalGB"), numberInput(form, "totalGB", { min: 0, step: "any" }), t("common.zeroUnlimited"))}
        ${field(t("inbound.expiry"), html`<input type="date" value=${form.expiry} onInput=${(e) => (form.expiry = e.target.value)} />`, t("common.emptyNever"))}
        ${checkbox(model, "enable", t("common.enabled"))}
        ${protocolFields()}
        ${transportFields()}
        ${sniffingFields()}
      </form>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="inbound-form" disabled=${busy.value}>${t("common.save")}</button>`} />`;
  },
};
