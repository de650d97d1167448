// The inbound form's sections for the two UDP protocols: Hysteria 2 (QUIC, so always TLS,
// with its users' passwords coming from client records) and WireGuard (a server key and
// peers, no client records). A WireGuard peer has no subscription entry, so the section
// shows what a peer's app needs: its wg-quick config and a wireguard:// link, built from
// the keys the inbound stores. Keys come from the panel's X25519 route in WireGuard's
// encoding (standard base64); the server's public key is kept beside its private key
// (`pubKey`, as 3x-ui keeps it), because an address served over plain http has no
// WebCrypto to derive it with.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { copyButton, listText, numberInput, textInput } from "../components.js";

// The DER header of a PKCS #8 X25519 private key, followed by its 32 raw bytes.
const PKCS8_X25519 = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20];
const ALL_TRAFFIC = "0.0.0.0/0, ::/0";
const PEER_DNS = "1.1.1.1, 1.0.0.1";

export function hysteriaStream() {
  return {
    network: "hysteria", security: "tls", hysteriaSettings: { version: 2 },
    tlsSettings: { serverName: "", certificates: [{ certificateFile: "", keyFile: "" }], alpn: ["h3"] },
  };
}

// The TLS fields of a stream: server name, certificate and key files, ALPN.
export function tlsFields(stream, pathField) {
  if (!stream.tlsSettings || typeof stream.tlsSettings !== "object") stream.tlsSettings = {};
  const tls = stream.tlsSettings;
  if (!tls.certificates || !tls.certificates.length) tls.certificates = [{ certificateFile: "", keyFile: "" }];
  const certificate = tls.certificates[0];
  const at = "streamSettings.tlsSettings";
  return html`${pathField(`${at}.serverName`, t("inbound.sni"), textInput(tls, "serverName", { name: "serverName" }))}
    ${pathField(`${at}.certificates[0].certificateFile`, t("inbound.certFile"), textInput(certificate, "certificateFile", { name: "certificateFile", placeholder: "/etc/ssl/cert.pem" }))}
    ${pathField(`${at}.certificates[0].keyFile`, t("inbound.keyFile"), textInput(certificate, "keyFile", { name: "keyFile", placeholder: "/etc/ssl/key.pem" }))}
    ${pathField(`${at}.alpn`, t("inbound.alpn"), listText(tls, "alpn", { placeholder: "h2, http/1.1" }))}`;
}

// The route answers in the core's base64url; WireGuard writes keys in padded base64.
function standardBase64(text) {
  const plain = text.replace(/-/g, "+").replace(/_/g, "/");
  return plain + "=".repeat((4 - (plain.length % 4)) % 4);
}

async function newKeyPair() {
  const keys = await api.get("panel/api/server/getNewX25519Cert");
  return { privateKey: standardBase64(keys.privateKey), publicKey: standardBase64(keys.publicKey) };
}

// The public key of a private key typed by hand, where the browser can work it out.
async function publicKeyOf(secret) {
  let raw;
  try {
    raw = Uint8Array.from(atob(secret), (c) => c.charCodeAt(0));
  } catch (error) {
    return "";
  }
  if (raw.length !== 32 || !(window.crypto && crypto.subtle)) return "";
  try {
    const key = await crypto.subtle.importKey("pkcs8", new Uint8Array([...PKCS8_X25519, ...raw]), { name: "X25519" }, true, ["deriveBits"]);
    return standardBase64((await crypto.subtle.exportKey("jwk", key)).x);
  } catch (error) {
    return "";
  }
}

// The first 10.0.0.x/32 no peer holds yet (the server side is 10.0.0.1).
function nextAddress(peers) {
  const taken = new Set(peers.flatMap((peer) => peer.allowedIPs || []));
  for (let host = 2; host < 255; host += 1) {
    if (!taken.has(`10.0.0.${host}/32`)) return `10.0.0.${host}/32`;
  }
  return "";
}

function endpoint(port) {
  const host = window.location.hostname;
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

export function peerConfig(settings, peer, port) {
  return [
    "[Interface]", `PrivateKey = ${peer.privateKey}`, `Address = ${(peer.allowedIPs || []).join(", ")}`,
    `DNS = ${PEER_DNS}`, `MTU = ${settings.mtu || 1420}`, "",
    "[Peer]", `PublicKey = ${settings.pubKey}`, `AllowedIPs = ${ALL_TRAFFIC}`, `Endpoint = ${endpoint(port)}`,
  ].join("\n");
}

// The form v2rayN, Hiddify and 3x-ui share: the peer's private key as the user part.
export function peerLink(settings, peer, port, remark) {
  const query = new URLSearchParams({
    publickey: settings.pubKey, address: (peer.allowedIPs || []).join(","), mtu: String(settings.mtu || 1420),
  });
  return `wireguard://${encodeURIComponent(peer.privateKey)}@${endpoint(port)}?${query}#${encodeURIComponent(remark || "wireguard")}`;
}

export const WireguardFields = {
  props: ["settings", "port", "remark", "pathField"],
  setup(props) {
    const s = props.settings;
    if (!Array.isArray(s.peers)) s.peers = [];

    async function newServerKeys() {
      const keys = await newKeyPair();
      s.secretKey = keys.privateKey;
      s.pubKey = keys.publicKey;
    }

    async function setSecretKey(value) {
      s.secretKey = value;
      s.pubKey = await publicKeyOf(value.trim());
    }

    async function addPeer() {
      const keys = await newKeyPair();
      s.peers.push({ publicKey: keys.publicKey, privateKey: keys.privateKey, allowedIPs: [nextAddress(s.peers)] });
    }

    Vue.onMounted(() => {
      if (!s.secretKey) newServerKeys().catch(() => {});
      else if (!s.pubKey) setSecretKey(s.secretKey);
    });

    function peerFields(peer, index) {
      const at = `settings.peers[${index}]`;
      const ready = peer.privateKey && s.pubKey;
      const config = ready ? peerConfig(s, peer, props.port) : "";
      const link = ready ? peerLink(s, peer, props.port, props.remark) : "";
      return html`<fieldset class="span-2" data-testid="wg-peer" key=${index}>
        <legend>${t("inbound.wgPeer", { n: index + 1 })}</legend>
        ${props.pathField(`${at}.publicKey`, t("inbound.wgPeerPublicKey"), textInput(peer, "publicKey", { name: "peerPublicKey" }))}
        ${props.pathField(`${at}.privateKey`, t("inbound.wgPeerPrivateKey"), textInput(peer, "privateKey", { name: "peerPrivateKey" }), t("inbound.wgPeerPrivateKeyHint"))}
        ${props.pathField(`${at}.allowedIPs`, t("inbound.wgAllowedIPs"), listText(peer, "allowedIPs", { name: "allowedIPs", placeholder: "10.0.0.2/32" }))}
        ${ready ? html`<div class="copy-block span-2"><span class="field-label">${t("inbound.wgConfig")}</span>
          <div class="copy-row"><textarea class="code-editor" name="peerConfig" readonly rows="10" wrap="off" value=${config}></textarea>
          ${copyButton(config, t("inbound.wgConfig"))}</div></div>
          <div class="copy-block span-2"><span class="field-label">${t("inbound.wgLink")}</span>
          <div class="copy-row"><input type="text" name="peerLink" readonly value=${link} />${copyButton(link, t("inbound.wgLink"))}</div></div>`
          : html`<p class="muted small span-2">${t("inbound.wgNoConfig")}</p>`}
        <div class="field-box"><button type="button" onClick=${() => s.peers.splice(index, 1)}>${t("inbound.wgRemovePeer")}</button></div>
      </fieldset>`;
    }

    return () => html`<fieldset class="span-2"><legend>WireGuard</legend>
      ${props.pathField("settings.secretKey", t("inbound.wgSecretKey"), html`<input type="text" name="secretKey"
        value=${s.secretKey ?? ""} onInput=${(event) => setSecretKey(event.target.value)} />`)}
      ${props.pathField("settings.pubKey", t("inbound.wgPublicKey"), html`<div class="copy-row">
        <input type="text" name="wgPublicKey" readonly value=${s.pubKey ?? ""} />${copyButton(s.pubKey || "", t("inbound.wgPublicKey"))}</div>`,
        t("inbound.wgPublicKeyHint"))}
      <div class="field-box"><button type="button" onClick=${() => newServerKeys().catch(() => {})}>${t("inbound.newKeys")}</button></div>
      ${props.pathField("settings.mtu", t("inbound.wgMtu"), numberInput(s, "mtu", { name: "mtu", min: 576, max: 9000 }))}
      ${s.peers.map(peerFields)}
      <div class="field-box"><button type="button" data-testid="wg-add-peer" onClick=${() => addPeer().catch(() => {})}>${t("inbound.wgAddPeer")}</button></div>
    </fieldset>`;
  },
};
