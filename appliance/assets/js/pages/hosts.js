// Hosts: per-inbound address and TLS overrides that subscriptions render as extra links.
// Hosts are listed grouped by inbound, in the order subscriptions use. A row moves by
// drag and drop or by its up/down buttons (the keyboard way); either sends the inbound's
// whole new order to hosts/reorder, which is the only way a position changes. Selected
// rows take bulk enable, disable and delete.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, state, toast } from "../state.js";
import { checkbox, field, Modal, numberInput, selectInput, textInput, toggle } from "../components.js";

const SECURITIES = ["same", "none", "tls", "reality"];

function securityLabel(security) {
  if (security === "same") return t("hosts.securitySame");
  if (security === "none") return t("common.none");
  return security === "tls" ? "TLS" : "REALITY";
}

function inboundName(inbound) {
  return `${inbound.remark || inbound.tag} (${inbound.protocol}:${inbound.port})`;
}

function splitTags(text) {
  return text.split(",").map((tag) => tag.trim()).filter(Boolean);
}

const HostForm = {
  props: ["host", "inbounds", "tags", "onClose", "onSaved"],
  setup(props) {
    const editing = !!props.host;
    const source = props.host || {};
    const model = Vue.reactive({
      inboundId: String(source.inboundId ?? (props.inbounds[0] ? props.inbounds[0].id : "")),
      remark: source.remark || "", address: source.address || "", port: source.port || 0,
      security: source.security || "same", sni: source.sni || "",
      tags: (source.tags || []).join(", "), enable: source.enable ?? true,
    });
    const busy = Vue.ref(false);

    async function save(event) {
      event.preventDefault();
      const payload = {
        remark: model.remark, address: model.address.trim(), port: Number(model.port) || 0,
        security: model.security, sni: model.sni.trim(), tags: splitTags(model.tags), enable: model.enable,
      };
      busy.value = true;
      try {
        if (editing) await api.post(`panel/api/hosts/update/${props.host.id}`, payload);
        else await api.post("panel/api/hosts/add", { ...payload, inboundId: Number(model.inboundId) });
        props.onSaved();
      } catch (error) {
        // the toast says which field is wrong; the form stays open to fix it
      } finally {
        busy.value = false;
      }
    }

    return () => html`<${Modal} title=${editing ? t("hosts.edit") : t("hosts.add")} onClose=${props.onClose}
      body=${() => html`<form class="form-grid" id="host-form" onSubmit=${save}>
        ${editing ? field(t("hosts.inbound"), html`<input type="text" disabled
            value=${inboundName(props.inbounds.find((i) => i.id === props.host.inboundId) || { tag: `#${props.host.inboundId}`, protocol: "", port: "" })} />`)
          : field(t("hosts.inbound"), selectInput(model, "inboundId",
            props.inbounds.map((inbound) => [String(inbound.id), inboundName(inbound)]), { name: "inboundId", required: true }))}
        ${field(t("hosts.remark"), textInput(model, "remark", { name: "remark", required: true, maxlength: 255 }))}
        ${field(t("hosts.address"), textInput(model, "address", { name: "address", placeholder: t("hosts.inherit") }))}
        ${field(t("hosts.port"), numberInput(model, "port", { name: "port", min: 0, max: 65535 }), t("hosts.portHint"))}
        ${field(t("hosts.security"), selectInput(model, "security", SECURITIES.map((s) => [s, securityLabel(s)]), { name: "security" }))}
        ${field(t("hosts.sni"), textInput(model, "sni", { name: "sni", placeholder: t("hosts.inherit") }))}
        ${field(t("hosts.tags"), textInput(model, "tags", { name: "tags", list: "host-tags" }), t("hosts.tagsHint"))}
        ${checkbox(model, "enable", t("common.enabled"))}
        <datalist id="host-tags">${props.tags.map((tag) => html`<option value=${tag}></option>`)}</datalist>
      </form>`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.cancel")}</button>
        <button class="primary" type="submit" form="host-form" disabled=${busy.value}>${t("common.save")}</button>`} />`;
  },
};

export const HostsPage = {
  setup() {
    const hosts = Vue.ref(null);
    const inbounds = Vue.ref([]);
    const tags = Vue.ref([]);
    const selected = Vue.ref(new Set());
    const editing = Vue.ref(null);
    const dragging = Vue.ref(null);

    async function load() {
      const [list, options, tagList] = await Promise.all([
        api.get("panel/api/hosts/list"), api.get("panel/api/inbounds/options"), api.get("panel/api/hosts/tags"),
      ]);
      hosts.value = list;
      inbounds.value = options;
      tags.value = tagList;
      const known = new Set(list.map((host) => host.id));
      selected.value = new Set([...selected.value].filter((id) => known.has(id)));
    }
    const reload = () => load().catch(() => {});
    Vue.onMounted(reload);
    Vue.watch(() => [state.versions.hosts, state.versions.inbounds], reload);

    async function run(action, message) {
      try {
        const result = await action();
        for (const item of (result && result.skipped) || []) toast(`#${item.id}: ${item.reason}`, "error");
        toast(message, "success");
      } catch (error) {
        // the failure was shown as a toast by the API layer
      }
      await reload();
    }

    function groups() {
      const byInbound = new Map();
      for (const host of hosts.value) {
        if (!byInbound.has(host.inboundId)) byInbound.set(host.inboundId, []);
        byInbound.get(host.inboundId).push(host);
      }
      return [...byInbound.entries()].map(([id, list]) => ({
        inbound: inbounds.value.find((i) => i.id === id) || { id, tag: `#${id}`, protocol: "", port: "" },
        hosts: list,
      }));
    }

    // The inbound's ids with `moved` placed at `position`; null when nothing changes.
    function reordered(list, moved, position) {
      const ids = list.map((host) => host.id).filter((id) => id !== moved);
      ids.splice(Math.max(0, Math.min(position, ids.length)), 0, moved);
      return ids.join() === list.map((host) => host.id).join() ? null : ids;
    }

    async function reorder(list, moved, position) {
      const ids = reordered(list, moved, position);
      if (!ids) return;
      // Show the new order at once; the reload after the call confirms or undoes it.
      const rank = new Map(ids.map((id, index) => [id, index]));
      hosts.value = [...hosts.value].sort((a, b) => a.inboundId - b.inboundId
        || (rank.has(a.id) && rank.has(b.id) ? rank.get(a.id) - rank.get(b.id) : 0));
      await run(() => api.post("panel/api/hosts/reorder", { ids }), t("hosts.reordered"));
    }

    async function move(list, host, step, event) {
      const testid = event.currentTarget.dataset.testid;
      const index = list.findIndex((item) => item.id === host.id);
      await reorder(list, host.id, index + step);
      // Keep the keyboard where it was: on the same button of the row that moved.
      Vue.nextTick(() => {
        const button = document.querySelector(`tr[data-host="${host.id}"] [data-testid="${testid}"]`);
        if (button && !button.disabled) button.focus();
      });
    }

    function onDrop(list, target, event) {
      event.preventDefault();
      const moved = dragging.value;
      dragging.value = null;
      if (!moved || moved.inboundId !== target.inboundId || moved.id === target.id) return;
      // Dropped on a row below, it lands after that row; on a row above, before it.
      reorder(list, moved.id, list.findIndex((item) => item.id === target.id));
    }

    async function remove(host) {
      if (!(await askConfirm(t("hosts.confirmDelete", { name: host.remark })))) return;
      run(() => api.post(`panel/api/hosts/del/${host.id}`), t("hosts.deleted"));
    }

    async function bulk(kind) {
      const ids = [...selected.value];
      if (!ids.length) return;
      if (kind === "delete") {
        if (!(await askConfirm(t("hosts.confirmBulkDelete", { count: ids.length })))) return;
        return run(() => api.post("panel/api/hosts/bulk/del", { ids }), t("hosts.bulkDone", { count: ids.length }));
      }
      run(() => api.post("panel/api/hosts/bulk/setEnable", { ids, enable: kind === "enable" }),
        t("hosts.bulkDone", { count: ids.length }));
    }

    function toggleRow(id, on) {
      const next = new Set(selected.value);
      if (on) next.add(id);
      else next.delete(id);
      selected.value = next;
    }

    function row(host, index, list) {
      const target = [host.address || t("hosts.inherited"), host.port || ""].filter(Boolean).join(":");
      return html`<tr key=${host.id} data-host=${host.id} draggable="true"
        class=${dragging.value && dragging.value.id === host.id ? "dragging" : ""}
        onDragstart=${(event) => {
          dragging.value = host;
          event.dataTransfer.effectAllowed = "move";
          event.dataTransfer.setData("text/plain", String(host.id));
        }}
        onDragend=${() => (dragging.value = null)}
        onDragover=${(event) => {
          if (dragging.value && dragging.value.inboundId === host.inboundId) event.preventDefault();
        }}
        onDrop=${(event) => onDrop(list, host, event)}>
        <td class="select"><input type="checkbox" aria-label=${t("hosts.select", { name: host.remark })}
          checked=${selected.value.has(host.id)} onChange=${(e) => toggleRow(host.id, e.target.checked)} /></td>
        <td data-label=${t("hosts.order")} class="order">
          <span class="drag-handle" aria-hidden="true" title=${t("hosts.dragHint")}>⠿</span>
          <button class="icon" data-testid="move-up" aria-label=${t("hosts.moveUp", { name: host.remark })}
            disabled=${index === 0} onClick=${(e) => move(list, host, -1, e)}>↑</button>
          <button class="icon" data-testid="move-down" aria-label=${t("hosts.moveDown", { name: host.remark })}
            disabled=${index === list.length - 1} onClick=${(e) => move(list, host, 1, e)}>↓</button></td>
        <td data-label=${t("hosts.remark")}><span><strong>${host.remark}</strong>
          ${host.tags.map((tag) => html` <span class="tag">${tag}</span>`)}</span></td>
        <td data-label=${t("hosts.address")}><code>${target}</code></td>
        <td data-label=${t("hosts.security")}><span>${securityLabel(host.security)}${host.sni
          ? html`<span class="muted small"> · ${host.sni}</span>` : null}</span></td>
        <td data-label=${t("common.enabled")}>${toggle(host.enable, (value) =>
          run(() => api.post(`panel/api/hosts/setEnable/${host.id}`, { enable: value }),
            value ? t("hosts.enabledNow") : t("hosts.disabledNow")), t("hosts.enableName", { name: host.remark }))}</td>
        <td class="actions">
          <button onClick=${() => (editing.value = { host })}>${t("common.edit")}</button>
          <button class="danger" onClick=${() => remove(host)}>${t("common.delete")}</button></td>
      </tr>`;
    }

    function group({ inbound, hosts: list }) {
      return html`<div class="card host-group" key=${inbound.id} data-inbound=${inbound.id}>
        <h2>${inboundName(inbound)}</h2>
        <div class="table-wrap"><table class="table responsive">
          <thead><tr><th class="select"><span class="sr-only">${t("hosts.selectColumn")}</span></th>
            <th>${t("hosts.order")}</th><th>${t("hosts.remark")}</th><th>${t("hosts.address")}</th>
            <th>${t("hosts.security")}</th><th>${t("common.enabled")}</th>
            <th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
          <tbody>${list.map((host, index) => row(host, index, list))}</tbody></table></div>
      </div>`;
    }

    return () => html`<section class="page">
      <div class="page-head"><h1>${t("nav.hosts")}</h1>
        <button class="primary" data-testid="add-host" disabled=${!inbounds.value.length}
          onClick=${() => (editing.value = { host: null })}>${t("hosts.add")}</button></div>
      <p class="muted">${t("hosts.intro")}</p>
      ${selected.value.size ? html`<div class="toolbar bulk" data-testid="host-bulk">
        <strong>${t("hosts.selected", { count: selected.value.size })}</strong>
        <button onClick=${() => bulk("enable")}>${t("hosts.enable")}</button>
        <button onClick=${() => bulk("disable")}>${t("hosts.disable")}</button>
        <button class="danger" onClick=${() => bulk("delete")}>${t("common.delete")}</button></div>` : null}
      ${hosts.value === null ? html`<p class="muted">${t("common.loading")}</p>`
        : !inbounds.value.length ? html`<p class="empty">${t("hosts.noInbounds")}</p>`
        : hosts.value.length === 0 ? html`<p class="empty">${t("hosts.none")}</p>`
        : groups().map(group)}
      ${editing.value ? html`<${HostForm} host=${editing.value.host} inbounds=${inbounds.value} tags=${tags.value}
        onClose=${() => (editing.value = null)}
        onSaved=${() => { editing.value = null; toast(t("hosts.saved"), "success"); reload(); }} />` : null}
    </section>`;
  },
};
