// The settings page's tools: database backups (download a snapshot or a migration dump,
// restore from a file after a confirmation) and generators for keys and certificate
// hashes, each result with a copy button, ready to paste into an inbound or a client app.
import { html, Vue } from "../lib.js";
import { api, request } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, toast } from "../state.js";
import { copyBlock, field, textArea, textInput } from "../components.js";

// Labels of the fields the generators answer with; unknown fields show their own name.
function fieldLabel(name) {
  const labels = {
    privateKey: t("tools.privateKey"), publicKey: t("tools.publicKey"), seed: t("tools.seed"),
    clientKey: t("tools.clientKey"), serverKey: t("tools.serverKey"), echKeySet: t("tools.echKeySet"),
    echServerKeys: t("tools.echServerKeys"), echConfigList: t("tools.echConfigList"),
    encryption: t("tools.encryption"), decryption: t("tools.decryption"),
  };
  return labels[name] || name;
}

function resultBlocks(result) {
  if (Array.isArray(result.auths)) {
    return result.auths.map((auth) => html`<div class="key-group" key=${auth.id}><h3>${auth.label}</h3>
      ${copyBlock(fieldLabel("decryption"), auth.decryption)}${copyBlock(fieldLabel("encryption"), auth.encryption)}</div>`);
  }
  return Object.entries(result).map(([name, value]) =>
    copyBlock(fieldLabel(name), Array.isArray(value) ? value.join("\n") : String(value)));
}

export const BackupsCard = {
  setup() {
    const file = Vue.ref(null);
    const busy = Vue.ref(false);
    async function importDb(event) {
      event.preventDefault();
      if (!file.value) return;
      if (!(await askConfirm(t("backup.confirmImport", { name: file.value.name })))) return;
      const upload = new FormData();
      upload.append("db", file.value);
      busy.value = true;
      try {
        const reply = await request("POST", "panel/api/server/importDB", { upload });
        toast(reply.msg || t("backup.imported"), "warning");
      } catch (error) {
        // the toast says why the file was refused; nothing was replaced
      } finally {
        busy.value = false;
      }
    }
    return () => html`<div class="card">
      <h2>${t("backup.title")}</h2>
      <div class="actions">
        <a class="button" href="panel/api/server/getDb" download data-testid="download-db">${t("backup.downloadDb")}</a>
        <a class="button" href="panel/api/server/getMigration" download>${t("backup.downloadMigration")}</a></div>
      <form class="toolbar" onSubmit=${importDb}>
        ${field(t("backup.importFile"), html`<input type="file" name="db" accept=".db,.sqlite,.sqlite3,.sql"
          onChange=${(event) => (file.value = event.target.files[0] || null)} />`, t("backup.importHint"))}
        <button class="danger" type="submit" disabled=${!file.value || busy.value}>${t("backup.import")}</button></form>
    </div>`;
  },
};

const GENERATORS = [
  ["x25519", "panel/api/server/getNewX25519Cert"],
  ["mldsa65", "panel/api/server/getNewmldsa65"],
  ["mlkem768", "panel/api/server/getNewmlkem768"],
  ["vlessEnc", "panel/api/server/getNewVlessEnc"],
];

function generatorLabel(name) {
  if (name === "x25519") return t("tools.x25519");
  if (name === "mldsa65") return t("tools.mldsa65");
  if (name === "mlkem768") return t("tools.mlkem768");
  return t("tools.vlessEnc");
}

export const ToolsCard = {
  setup() {
    const generated = Vue.ref(null);
    const inputs = Vue.reactive({ sni: "", certFile: "", certContent: "", server: "" });
    const hashes = Vue.ref(null);
    const busy = Vue.ref(false);

    async function generate(name, call) {
      busy.value = true;
      try {
        generated.value = { name, result: await call() };
      } catch (error) {
        // shown as a toast
      } finally {
        busy.value = false;
      }
    }
    async function hash(kind, event) {
      event.preventDefault();
      try {
        const list = kind === "remote"
          ? await api.postForm("panel/api/server/getRemoteCertHash", { server: inputs.server.trim() })
          : await api.postForm("panel/api/server/getCertHash", inputs.certFile.trim()
            ? { certFile: inputs.certFile.trim() } : { certContent: inputs.certContent });
        hashes.value = { kind, list };
      } catch (error) {
        hashes.value = null;
      }
    }
    const title = () => (generated.value.name === "ech" ? t("tools.ech") : generatorLabel(generated.value.name));
    return () => html`<div class="card" data-testid="tools">
      <h2>${t("tools.title")}</h2>
      <h3>${t("tools.keys")}</h3>
      <div class="actions">${GENERATORS.map(([name, path]) => html`<button key=${name} disabled=${busy.value}
        data-testid=${`generate-${name}`} onClick=${() => generate(name, () => api.get(path))}>${generatorLabel(name)}</button>`)}</div>
      <form class="toolbar" onSubmit=${(event) => {
        event.preventDefault();
        generate("ech", () => api.postForm("panel/api/server/getNewEchCert", { sni: inputs.sni.trim() }));
      }}>${field(t("tools.echSni"), textInput(inputs, "sni", { name: "echSni", required: true, placeholder: "example.com" }))}
        <button type="submit" disabled=${busy.value}>${t("tools.ech")}</button></form>
      ${generated.value ? html`<div class="generated" data-testid="generated"><h3>${title()}</h3>${resultBlocks(generated.value.result)}</div>` : null}
      <h3>${t("tools.certHash")}</h3>
      <form class="form-grid" onSubmit=${(event) => hash("local", event)}>
        ${field(t("tools.certFile"), textInput(inputs, "certFile", { name: "certFile", placeholder: "/etc/ssl/certs/example.pem" }))}
        ${field(t("tools.certContent"), textArea(inputs, "certContent", { name: "certContent", rows: 3, placeholder: "-----BEGIN CERTIFICATE-----" }))}
        <div class="actions span-all"><button type="submit">${t("tools.hashCert")}</button></div></form>
      <form class="toolbar" onSubmit=${(event) => hash("remote", event)}>
        ${field(t("tools.remoteServer"), textInput(inputs, "server", { name: "remoteServer", required: true, placeholder: "example.com:443" }))}
        <button type="submit">${t("tools.hashRemote")}</button></form>
      ${hashes.value ? html`<div class="generated" data-testid="hashes">
        ${hashes.value.list.length ? hashes.value.list.map((value, index) => copyBlock(t("tools.hashN", { n: index + 1 }), value))
          : html`<p class="muted">${t("tools.noCertificates")}</p>`}</div>` : null}
    </div>`;
  },
};
