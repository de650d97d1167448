// The add/edit form of a node, and the results of updating nodes' panels. Connection
// details are tested before they are saved: "Test" runs one heartbeat of what is typed
// (nodes/test, nothing saved) and shows what the node said or why it could not be
// reached, and Save waits for a test of the details as they are. "Fetch fingerprint"
// reads the certificate the node presents without verifying it (nodes/certFingerprint);
// the admin compares it with the node's own before pinning it. The API token is
// write-only: an edit that leaves it empty keeps the stored one.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { state } from "../state.js";
import { checkbox, field, Modal, numberInput, selectInput, textInput } from "../components.js";

const SCHEMES = ["https", "http"];
export const TLS_MODES = ["system", "pin", "mtls"];
const DEFAULT_PORT = 2053;

// What a test or a fingerprint needs, from the form: the fields that say how to reach the
// node (an edit's id lets an empty token mean the stored one).
function connection(model, id) {
  const https = model.scheme === "https";
  return {
    ...(id ? { id } : {}),
    name: model.name.trim(),
    scheme: model.scheme,
    address: model.address.trim(),
    port: Number(model.port) || 0,
    basePath: model.basePath.trim(),
    apiToken: model.apiToken.trim(),
    allowPrivateAddress: model.allowPrivateAddress,
    tlsVerifyMode: https ? model.tlsVerifyMode : "system",
    certFingerprint: https && model.tlsVerifyMode !== "system" ? model.certFingerprint.trim() : "",
  };
}

// The connection fields alone, as a key: a test holds for the details it was run with.
function connectionKey(model) {
  const { name, ...rest } = connection(model, null);
  return JSON.stringify(rest);
}

// Where the node is: what its certificate belongs to.
function addressKey(model) {
  return JSON.stringify([model.scheme, model.address.trim(), Number(model.port) || 0, model.allowPrivateAddress]);
}

function testResult(result) {
  if (!result) return null;
  if (result.error) {
    return html`<p class="probe failed" role="alert" data-testid="node-test-result">${result.error}</p>`;
  }
  const snapshot = result.snapshot;
  if (snapshot.status !== "online") {
    return html`<p class="probe failed" role="alert" data-testid="node-test-result">${
      t(`nodes.status.${snapshot.status}`)}: ${snapshot.lastError}</p>`;
  }
  const own = state.status && state.status.guid;
  const managedElsewhere = snapshot.parentGuid && own && snapshot.parentGuid !== own;
  return html`<div data-testid="node-test-result">
    <p class="probe ok">${t("nodes.testOnline", {
      latency: snapshot.latency, panel: snapshot.panelVersion || "—", core: snapshot.coreVersion || "—" })}</p>
    ${managedElsewhere ? html`<p class="probe failed">${t("nodes.managedElsewhere", { guid: snapshot.parentGuid })}</p>` : null}</div>`;
}

export const NodeForm = {
  props: ["node", "onClose", "onSaved"],
  setup(props) {
    const editing = !!props.node;
    const source = props.node || {};
    const model = Vue.reactive({
      name: source.name || "", remark: source.remark || "", scheme: source.scheme || "https",
      address: source.address || "", port: source.port || DEFAULT_PORT, basePath: source.basePath || "/",
      apiToken: "", enable: source.enable ?? true, allowPrivateAddress: source.allowPrivateAddress ?? false,
      tlsVerifyMode: source.tlsVerifyMode || "system", certFingerprint: source.certFingerprint || "",
    });
    const savedKey = editing ? connectionKey(model) : null;
    const busy = Vue.ref(false);
    const testing = Vue.ref(false);
    const tested = Vue.ref(null); // { key, snapshot } or { key, error }
    const fingerprint = Vue.ref(null); // { key, value } or { key, error }

    // A new node, or changed connection details, are saved once tested as they are.
    const mustTest = () => connectionKey(model) !== savedKey && !(tested.value && tested.value.key === connectionKey(model));

    async function runTest() {
      testing.value = true;
      const key = connectionKey(model);
      try {
        const snapshot = await api.post("panel/api/nodes/test", connection(model, source.id), { quiet: true });
        tested.value = { key, snapshot };
      } catch (error) {
        tested.value = { key, error: error.message };
      } finally {
        testing.value = false;
      }
    }

    async function fetchFingerprint() {
      fingerprint.value = null;
      const key = addressKey(model);
      try {
        const value = await api.post("panel/api/nodes/certFingerprint", connection(model, source.id), { quiet: true });
        fingerprint.value = { key, value };
      } catch (error) {
        fingerprint.value = { key, error: error.message };
      }
    }

    function pin() {
      model.certFingerprint = fingerprint.value.value;
      if (model.tlsVerifyMode === "system") model.tlsVerifyMode = "pin";
      fingerprint.value = null;
    }

    async function save(event) {
      event.preventDefault();
      if (mustTest()) return;
      const payload = { ...connection(model, null), remark: model.remark, enable: model.enable };
      busy.value = true;
      try {
        const saved = editing
          ? await api.post(`panel/api/nodes/update/${source.id}`, payload)
          : await api.post("panel/api/nodes/add", payload);
        props.onSaved(saved);
      } catch (error) {
        // the toast says what is wrong; the form stays open to fix it
      } finally {
        busy.value = false;
      }
    }

    // Shown while the node is the one it was read from.
    function fingerprintBox() {
      const found = fingerprint.value;
      if (!found || found.key !== addressKey(model)) return null;
      if (found.error) return html`<p class="probe failed span-all" role="alert" data-testid="fingerprint-result">${found.error}</p>`;
      return html`<div class="card span-all" data-testid="fingerprint-result">
        <p>${t("nodes.fingerprintFound")}</p><code class="token" dir="ltr">${found.value}</code>
        <p class="hint">${t("nodes.fingerprintCompare")}</p>
        <div class="actions"><button type="button" class="primary" data-testid="pin-fingerprint" onClick=${pin}>${t("nodes.pin")}</button>
          <button type="button" onClick=${() => (fingerprint.value = null)}>${t("common.cancel")}</button></div></div>`;
    }

    function tlsFields() {
      const https = model.scheme === "https";
      return html`<fieldset><legend>${t("nodes.trust")}</legend>
        ${field(t("nodes.tlsVerifyMode"), selectInput(model, "tlsVerifyMode",
          TLS_MODES.map((mode) => [mode, t(`nodes.tls.${mode}`)]), { name: "tlsVerifyMode", disabled: !https }),
          https ? t(`nodes.tlsHint.${model.tlsVerifyMode}`) : t("nodes.httpHint"))}
        ${https && model.tlsVerifyMode !== "system" ? field(t("nodes.certFingerprint"),
          textInput(model, "certFingerprint", { name: "certFingerprint", spellcheck: "false", dir: "ltr" }), t("nodes.certFingerprintHint")) : null}
        <div class="field-box"><button type="button" data-testid="fetch-fingerprint" onClick=${fetchFingerprint}>${
          t("nodes.fetchFingerprint")}</button></div>
        ${fingerprintBox()}
      </fieldset>`;
    }

    return () => html`<${Modal} wide=${true} title=${editing ? t("nodes.edit") : t("nodes.add")} onClose=${props.onClose}
      body=${() => html`<form class="form-grid" id="node-form" onSubmit=${save}>
        ${field(t("nodes.name"), textInput(model, "name", { name: "name", required: true, maxlength: 64 }))}
        ${field(t("nodes.remark"), textInput(model, "remark", { name: "remark", maxlength: 255 }))}
        ${field(t("nodes.scheme"), selectInput(model, "scheme", SCHEMES.map((s) => [s, s]), { name: "scheme" }))}
        ${field(t("nodes.address"), textInput(model, "address", { name: "address", required: true, placeholder: "node.example.com", dir: "ltr" }),
          t("nodes.addressHint"))}
        ${field(t("nodes.port"), numberInput(model, "port", { name: "port", min: 1, max: 65535 }))}
        ${field(t("nodes.basePath"), textInput(model, "basePath", { name: "basePath", placeholder: "/", dir: "ltr" }), t("nodes.basePathHint"))}
        ${field(t("nodes.apiToken"), html`<input type="password" name="apiToken" autocomplete="off" value=${model.apiToken}
          placeholder=${editing && source.hasApiToken ? t("nodes.apiTokenKept") : ""}
          onInput=${(event) => (model.apiToken = event.target.value)} />`, t("nodes.apiTokenHint"))}
        <div class="field-box">${checkbox(model, "allowPrivateAddress", t("nodes.allowPrivateAddress"), { name: "allowPrivateAddress" })}
          <small class="hint">${t("nodes.allowPrivateHint")}</small></div>
        ${checkbox(model, "enable", t("common.enabled"), { name: "enable" })}
        ${tlsFields()}
        <div class="span-all stack">
          <div class="actions"><button type="button" data-testid="node-test" disabled=${testing.value} onClick=${runTest}>${
            testing.value ? t("nodes.testing") : t("nodes.test")}</button></div>
          ${testResult(tested.value && tested.value.key === connectionKey(model) ? tested.value : null)}
        </div>
      </form>`}
      footer=${() => html`${mustTest() ? html`<span class="hint">${t("nodes.testFirst")}</span>` : null}
        <button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="node-form" disabled=${busy.value || mustTest()}>${t("common.save")}</button>`} />`;
  },
};

// What nodes/updatePanel answered, one line per node.
export const UpdateResults = {
  props: ["results", "onClose"],
  setup(props) {
    return () => html`<${Modal} title=${t("nodes.updateResults")} onClose=${props.onClose}
      body=${() => html`<ul class="plain" data-testid="update-results">${props.results.map((item) => html`<li key=${item.id}>
        <strong>${item.name}</strong>: ${item.ok
          ? html`<span class="probe ok">${t("nodes.updateStarted")}</span>`
          : html`<span class="probe failed">${item.error || t("error.unknown")}</span>`}</li>`)}</ul>`}
      footer=${() => html`<button class="primary" onClick=${props.onClose}>${t("common.close")}</button>`} />`;
  },
};
