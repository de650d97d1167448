// The clients page's less frequent tools, each a dialog: a client's external links, group
// management, import and export of every client, and bulk changes to the selected rows
// (add days and traffic, attach to or detach from inbounds).
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, toast } from "../state.js";
import { field, Modal, numberInput, selectInput, textArea, textInput } from "../components.js";

const GB = 1024 ** 3;

function reportSkipped(skipped) {
  for (const item of skipped || []) toast(`${item.email || item.id}: ${item.reason}`, "error");
}

export const ExternalLinksDialog = {
  props: ["email", "onClose"],
  setup(props) {
    const rows = Vue.ref(null);
    const busy = Vue.ref(false);
    const path = `panel/api/clients/${encodeURIComponent(props.email)}/externalLinks`;
    Vue.onMounted(async () => {
      try {
        const reply = await api.get(`panel/api/clients/get/${encodeURIComponent(props.email)}`);
        rows.value = (reply.externalLinks || []).map((link) => ({ ...link }));
      } catch (error) {
        props.onClose();
      }
    });
    async function save(event) {
      event.preventDefault();
      busy.value = true;
      try {
        await api.post(path, { externalLinks: rows.value.map(({ kind, value, remark }) => ({ kind, value: value.trim(), remark })) });
        toast(t("clients.externalSaved"), "success");
        props.onClose();
      } catch (error) {
        // the toast names the row that is wrong; the dialog stays open
      } finally {
        busy.value = false;
      }
    }
    const kinds = [["link", t("clients.kindLink")], ["subscription", t("clients.kindSubscription")]];
    return () => html`<${Modal} wide=${true} title=${t("clients.externalOf", { email: props.email })} onClose=${props.onClose}
      body=${() => rows.value === null ? html`<p class="muted">${t("common.loading")}</p>`
        : html`<form id="external-form" onSubmit=${save} class="external-links">
          <p class="muted small">${t("clients.externalHint")}</p>
          ${rows.value.length === 0 ? html`<p class="empty">${t("clients.noExternal")}</p>` : null}
          ${rows.value.map((row, index) => html`<div class="external-row" key=${index} data-testid="external-row">
            ${field(t("clients.kind"), selectInput(row, "kind", kinds, { name: "kind" }))}
            ${field(t("clients.linkValue"), textInput(row, "value", { name: "value", required: true }))}
            ${field(t("hosts.remark"), textInput(row, "remark", { name: "linkRemark" }))}
            <button type="button" class="danger" aria-label=${t("clients.removeLink", { n: index + 1 })}
              onClick=${() => rows.value.splice(index, 1)}>${t("common.delete")}</button></div>`)}
          <button type="button" data-testid="add-external" onClick=${() => rows.value.push({ kind: "link", value: "", remark: "" })}>
            ${t("clients.addExternal")}</button></form>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="external-form" disabled=${busy.value || rows.value === null}>${t("common.save")}</button>`} />`;
  },
};

export const GroupsDialog = {
  props: ["groups", "onClose", "onChanged"],
  setup(props) {
    const model = Vue.reactive({ name: "" });
    const renaming = Vue.reactive({ from: "", to: "" });
    async function run(action, message) {
      try {
        await action();
        toast(message, "success");
        props.onChanged();
      } catch (error) {
        // shown as a toast
      }
    }
    function create(event) {
      event.preventDefault();
      const name = model.name.trim();
      run(() => api.post("panel/api/clients/groups/create", { name }), t("clients.groupCreated", { name }))
        .then(() => (model.name = ""));
    }
    function rename(event) {
      event.preventDefault();
      const { from, to } = renaming;
      run(() => api.post("panel/api/clients/groups/rename", { oldName: from, newName: to.trim() }), t("clients.groupRenamed"))
        .then(() => Object.assign(renaming, { from: "", to: "" }));
    }
    async function remove(name) {
      if (!(await askConfirm(t("clients.confirmDeleteGroup", { name })))) return;
      run(() => api.post("panel/api/clients/groups/delete", { name }), t("clients.groupDeleted", { name }));
    }
    return () => html`<${Modal} title=${t("clients.groups")} onClose=${props.onClose}
      body=${() => html`<div class="stack">
        <form class="toolbar" onSubmit=${create}>
          ${field(t("clients.newGroup"), textInput(model, "name", { name: "groupName", required: true, maxlength: 64 }))}
          <button class="primary" type="submit">${t("clients.createGroup")}</button></form>
        ${props.groups.length === 0 ? html`<p class="empty">${t("clients.noGroups")}</p>`
          : html`<ul class="plain">${props.groups.map((group) => html`<li class="row" key=${group.name}>
            <strong>${group.name}</strong><span class="muted small">${t("clients.groupCount", { count: group.clientCount })}</span>
            <span class="spacer"></span>
            <button onClick=${() => Object.assign(renaming, { from: group.name, to: group.name })}>${t("clients.rename")}</button>
            <button class="danger" onClick=${() => remove(group.name)}>${t("common.delete")}</button></li>`)}</ul>`}
        ${renaming.from ? html`<form class="toolbar" onSubmit=${rename}>
          ${field(t("clients.renameGroup", { name: renaming.from }), textInput(renaming, "to", { name: "newGroupName", required: true }))}
          <button class="primary" type="submit">${t("common.save")}</button>
          <button type="button" onClick=${() => (renaming.from = "")}>${t("common.cancel")}</button></form>` : null}
      </div>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.close")}</button>`} />`;
  },
};

export async function exportClients() {
  try {
    const items = await api.get("panel/api/clients/export");
    const blob = new Blob([JSON.stringify(items, null, 2)], { type: "application/json" });
    const url = URL.createObjectURL(blob);
    const link = document.createElement("a");
    link.href = url;
    link.download = `clients-${new Date().toISOString().slice(0, 10)}.json`;
    link.click();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
    toast(t("clients.exported", { count: items.length }), "success");
  } catch (error) {
    // shown as a toast
  }
}

export const ImportDialog = {
  props: ["onClose", "onDone"],
  setup(props) {
    const model = Vue.reactive({ data: "" });
    const busy = Vue.ref(false);
    async function readFile(event) {
      const file = event.target.files[0];
      if (file) model.data = await file.text();
    }
    async function submit(event) {
      event.preventDefault();
      try {
        JSON.parse(model.data);
      } catch (error) {
        toast(t("clients.importNotJson", { error: error.message }), "error");
        return;
      }
      busy.value = true;
      try {
        const result = await api.post("panel/api/clients/import", { data: model.data });
        reportSkipped(result.skipped);
        toast(t("clients.imported", { count: result.created }), "success");
        props.onDone();
      } catch (error) {
        // shown as a toast
      } finally {
        busy.value = false;
      }
    }
    return () => html`<${Modal} title=${t("clients.import")} onClose=${props.onClose}
      body=${() => html`<form id="import-form" class="stack" onSubmit=${submit}>
        <p class="muted small">${t("clients.importHint")}</p>
        ${field(t("clients.importFile"), html`<input type="file" accept=".json,application/json" onChange=${readFile} />`)}
        ${field(t("clients.importText"), textArea(model, "data", { name: "importData", rows: 8, required: true }))}
      </form>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="import-form" disabled=${busy.value}>${t("clients.import")}</button>`} />`;
  },
};

export const AdjustDialog = {
  props: ["emails", "onClose", "onDone"],
  setup(props) {
    const model = Vue.reactive({ addDays: 0, addGB: 0 });
    async function submit(event) {
      event.preventDefault();
      try {
        const result = await api.post("panel/api/clients/bulkAdjust", {
          emails: props.emails, addDays: Math.trunc(Number(model.addDays) || 0),
          addBytes: Math.round((Number(model.addGB) || 0) * GB),
        });
        reportSkipped(result.skipped);
        toast(t("clients.adjusted", { count: result.adjusted }), "success");
        props.onDone();
      } catch (error) {
        // shown as a toast
      }
    }
    return () => html`<${Modal} title=${t("clients.adjust")} onClose=${props.onClose}
      body=${() => html`<form id="adjust-form" class="form-grid" onSubmit=${submit}>
        <p class="muted small span-all">${t("clients.adjustHint", { count: props.emails.length })}</p>
        ${field(t("clients.addDays"), numberInput(model, "addDays", { name: "addDays", step: 1 }))}
        ${field(t("clients.addGB"), numberInput(model, "addGB", { name: "addGB", step: "any" }))}</form>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="adjust-form">${t("common.save")}</button>`} />`;
  },
};

export const AttachDialog = {
  props: ["emails", "inbounds", "onClose", "onDone"],
  setup(props) {
    const chosen = Vue.ref(new Set());
    async function submit(kind) {
      const inboundIds = [...chosen.value];
      if (!inboundIds.length) return toast(t("clients.chooseInbounds"), "error");
      const path = kind === "attach" ? "panel/api/clients/bulkAttach" : "panel/api/clients/bulkDetach";
      try {
        const result = await api.post(path, { emails: props.emails, inboundIds });
        for (const message of result.errors || []) toast(message, "error");
        toast(t("clients.bulkDone", { count: props.emails.length }), "success");
        props.onDone();
      } catch (error) {
        // shown as a toast
      }
    }
    function toggleInbound(id, on) {
      const next = new Set(chosen.value);
      if (on) next.add(id);
      else next.delete(id);
      chosen.value = next;
    }
    return () => html`<${Modal} title=${t("clients.attachTitle", { count: props.emails.length })} onClose=${props.onClose}
      body=${() => html`<div class="stack">
        ${props.inbounds.length === 0 ? html`<p class="muted">${t("clients.noInbounds")}</p>` : null}
        ${props.inbounds.map((inbound) => html`<label class="check" key=${inbound.id}>
          <input type="checkbox" checked=${chosen.value.has(inbound.id)} onChange=${(e) => toggleInbound(inbound.id, e.target.checked)} />
          <span>${inbound.remark || inbound.tag} (${inbound.protocol}:${inbound.port})</span></label>`)}</div>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button onClick=${() => submit("detach")}>${t("clients.detach")}</button>
        <button class="primary" onClick=${() => submit("attach")}>${t("clients.attach")}</button>`} />`;
  },
};
