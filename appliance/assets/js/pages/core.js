// Core settings: the config template, as raw JSON or through the tabs of its common edits
// (core-tabs.js), checked as JSON here, then by the core itself on save, whose refusal is
// shown as it came; the core process and its output, outbound
// probes and traffic, balancers and the router test. Routes the running core cannot
// answer say so in the panel's own words, shown beside the form that asked.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { askConfirm, state, toast } from "../state.js";
import { field, formatBytes, formatDate, selectInput, textInput } from "../components.js";
import { DnsTab, OutboundsTab, parseTemplate, RoutingTab } from "./core-tabs.js";
import { OutboundSourcesCard, sourceOf } from "./core-sources.js";
import { CoreFilesCard } from "./core-files.js";

const NETWORKS = [["tcp", "TCP"], ["udp", "UDP"]];
const BATCH_LIMIT = 50;

function probeText(result) {
  if (!result) return "";
  if (result.pending) return t("core.testing");
  if (!result.success) return result.error || t("core.probeFailed");
  return t("core.probeOk", { delay: result.delay, status: result.statusCode || "-" });
}

const TEMPLATE_TABS = { json: null, routing: RoutingTab, dns: DnsTab, outbounds: OutboundsTab };

const TemplateCard = {
  props: ["model", "template", "onSaved"],
  setup(props) {
    const problem = Vue.ref("");
    const busy = Vue.ref(false);
    const tab = Vue.ref("json");
    async function save(event) {
      event.preventDefault();
      try {
        JSON.parse(props.model.coreSetting);
      } catch (error) {
        problem.value = t("core.invalidJson", { error: error.message });
        toast(problem.value, "error");
        return;
      }
      busy.value = true;
      try {
        await api.postForm("panel/api/core/update", {
          coreSetting: props.model.coreSetting, outboundTestUrl: props.model.outboundTestUrl,
        });
        problem.value = "";
        toast(t("core.templateSaved"), "success");
        props.onSaved();
      } catch (error) {
        problem.value = error.message;
      } finally {
        busy.value = false;
      }
    }
    async function loadDefault() {
      if (!(await askConfirm(t("core.confirmDefault")))) return;
      try {
        props.model.coreSetting = JSON.stringify(await api.get("panel/api/core/getDefaultJsonConfig"), null, 2);
        problem.value = "";
      } catch (error) {
        // shown as a toast
      }
    }
    return () => html`<form class="card" onSubmit=${save} data-testid="template-form">
      <h2>${t("core.template")}</h2>
      <p class="muted small">${t("core.templateHint")}</p>
      <div class="tabs" role="tablist">${Object.keys(TEMPLATE_TABS).map((name) => html`<button type="button" role="tab" key=${name}
        data-tab=${name} aria-selected=${tab.value === name} class=${tab.value === name ? "tab active" : "tab"}
        onClick=${() => (tab.value = name)}>${t(`core.tab.${name}`)}</button>`)}</div>
      ${tab.value === "json" ? html`<label class="field"><span class="field-label">${t("core.templateJson")}</span>
        <textarea class="code-editor" name="coreSetting" rows="18" spellcheck="false"
          aria-invalid=${problem.value ? "true" : "false"} value=${props.model.coreSetting}
          onInput=${(event) => {
            props.model.coreSetting = event.target.value;
            problem.value = "";
          }}></textarea></label>`
        : props.template ? html`<${TEMPLATE_TABS[tab.value]} model=${props.model} template=${props.template} />`
        : html`<p class="error-text" role="alert">${t("core.fixJsonFirst")}</p>`}
      ${problem.value ? html`<p class="error-text" role="alert" data-testid="template-error">${problem.value}</p>` : null}
      ${field(t("core.outboundTestUrl"), textInput(props.model, "outboundTestUrl", { name: "outboundTestUrl", type: "url" }))}
      <div class="actions">
        <button class="primary" type="submit" disabled=${busy.value}>${t("common.save")}</button>
        <button type="button" onClick=${loadDefault}>${t("core.loadDefault")}</button></div>
    </form>`;
  },
};

const ProcessCard = {
  setup() {
    const output = Vue.ref("");
    const busy = Vue.ref(false);
    const loadOutput = async () => {
      output.value = await api.get("panel/api/core/getCoreResult");
    };
    Vue.onMounted(() => loadOutput().catch(() => {}));
    async function act(action) {
      if (action === "stop" && !(await askConfirm(t("core.confirmStop")))) return;
      busy.value = true;
      try {
        await api.post(`panel/api/server/${action === "stop" ? "stopCoreService" : "restartCoreService"}`);
        toast(action === "stop" ? t("core.done.stop") : t("core.done.restart"), "success", "", "core");
      } catch (error) {
        // shown as a toast: the core's reason when it would not start
      } finally {
        busy.value = false;
        loadOutput().catch(() => {});
      }
    }
    return () => html`<div class="card">
      <h2>${t("core.process")}</h2>
      <div class="actions">
        <span class=${`badge core-${(state.coreState || "unknown").replace(" ", "_")}`}>${t("core.label")}: ${t(`core.state.${(state.coreState || "unknown").replace(" ", "_")}`)}</span>
        <button disabled=${busy.value} onClick=${() => act("restart")}>${t("core.restart")}</button>
        <button disabled=${busy.value} onClick=${() => act("stop")}>${t("core.stop")}</button>
        <button onClick=${() => loadOutput().catch(() => {})}>${t("common.refresh")}</button></div>
      <h3>${t("core.output")}</h3>
      <pre class="log short" data-testid="core-output">${output.value || t("core.noOutput")}</pre>
    </div>`;
  },
};

// Every outbound the core gets: the template's, then those of the enabled subscriptions,
// each with where it comes from.
function allOutbounds(template, subs) {
  const own = (template && Array.isArray(template.outbounds) ? template.outbounds : [])
    .filter((o) => o && typeof o === "object").map((outbound) => ({ outbound, source: sourceOf(outbound) }));
  const fetched = subs.filter((sub) => sub.enabled).flatMap((sub) => (sub.outbounds || []).map((outbound) => ({
    outbound, source: t("outsrc.fromSub", { name: sub.remark || sub.tagPrefix }), refreshed: sub.lastRefresh, error: sub.lastError,
  })));
  return [...own, ...fetched];
}

const OutboundsCard = {
  props: ["template", "subs"],
  setup(props) {
    const options = Vue.reactive({ mode: "" });
    const results = Vue.reactive({});
    const traffic = Vue.ref([]);
    const loadTraffic = async () => {
      traffic.value = await api.get("panel/api/core/getOutboundsTraffic");
    };
    Vue.onMounted(() => loadTraffic().catch(() => {}));
    const rows = () => allOutbounds(props.template, props.subs);
    const outbounds = () => rows().map((row) => row.outbound);

    async function testOne(outbound, index) {
      results[index] = { pending: true };
      try {
        results[index] = await api.postForm("panel/api/core/testOutbound", {
          outbound: JSON.stringify(outbound), allOutbounds: JSON.stringify(outbounds()), mode: options.mode,
        });
      } catch (error) {
        results[index] = { success: false, error: error.message };
      }
    }
    async function testAll() {
      const list = outbounds().slice(0, BATCH_LIMIT);
      list.forEach((_, index) => (results[index] = { pending: true }));
      try {
        const reply = await api.postForm("panel/api/core/testOutbounds", {
          outbounds: JSON.stringify(list), allOutbounds: JSON.stringify(outbounds()), mode: options.mode,
        });
        reply.forEach((result, index) => (results[index] = result));
      } catch (error) {
        list.forEach((_, index) => (results[index] = { success: false, error: error.message }));
      }
    }
    async function reset(tag) {
      if (!(await askConfirm(tag ? t("core.confirmResetOutbound", { tag }) : t("core.confirmResetAllOutbounds")))) return;
      try {
        await api.postForm("panel/api/core/resetOutboundsTraffic", { tag });
        toast(t("core.trafficReset"), "success");
      } catch (error) {
        // shown as a toast
      }
      loadTraffic().catch(() => {});
    }
    return () => html`<div class="card" data-testid="outbounds-card">
      <h2>${t("core.outbounds")}</h2>
      <div class="toolbar">
        ${field(t("core.probeMode"), selectInput(options, "mode", [["", t("core.modeHttp")], ["tcp", t("core.modeTcp")]]))}
        <button onClick=${testAll} disabled=${!outbounds().length}>${t("core.testAll")}</button></div>
      ${outbounds().length === 0 ? html`<p class="empty">${t("core.noOutbounds")}</p>`
        : html`<div class="table-wrap"><table class="table responsive">
          <thead><tr><th>${t("core.tag")}</th><th>${t("core.protocol")}</th><th>${t("outsrc.source")}</th><th>${t("core.result")}</th>
            <th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
          <tbody>${rows().map(({ outbound, source, refreshed, error }, index) => html`<tr key=${index} data-outbound=${outbound.tag || index}>
            <td data-label=${t("core.tag")}><strong>${outbound.tag || "-"}</strong></td>
            <td data-label=${t("core.protocol")}>${outbound.protocol || "-"}</td>
            <td data-label=${t("outsrc.source")} data-testid="outbound-source">${source}
              ${refreshed ? html`<div class="muted small">${t("outsrc.refreshedAt", { time: formatDate(refreshed * 1000) })}</div>` : null}
              ${error ? html`<div class="error-text small">${error}</div>` : null}</td>
            <td data-label=${t("core.result")} class=${results[index] && !results[index].pending
              ? (results[index].success ? "probe ok" : "probe failed") : "probe"} data-testid="probe-result">${probeText(results[index])}</td>
            <td class="actions"><button onClick=${() => testOne(outbound, index)}>${t("core.test")}</button></td>
          </tr>`)}</tbody></table></div>`}
      <h3>${t("core.outboundTraffic")}</h3>
      <div class="actions"><button onClick=${() => loadTraffic().catch(() => {})}>${t("common.refresh")}</button>
        <button class="danger" onClick=${() => reset("")}>${t("core.resetAll")}</button></div>
      ${traffic.value.length === 0 ? html`<p class="muted">${t("core.noTraffic")}</p>`
        : html`<div class="table-wrap"><table class="table responsive" data-testid="outbound-traffic">
          <thead><tr><th>${t("core.tag")}</th><th>${t("core.up")}</th><th>${t("core.down")}</th><th>${t("core.total")}</th>
            <th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
          <tbody>${traffic.value.map((row) => html`<tr key=${row.tag}>
            <td data-label=${t("core.tag")}>${row.tag}</td><td data-label=${t("core.up")}>${formatBytes(row.up)}</td>
            <td data-label=${t("core.down")}>${formatBytes(row.down)}</td><td data-label=${t("core.total")}>${formatBytes(row.total)}</td>
            <td class="actions"><button onClick=${() => reset(row.tag)}>${t("core.reset")}</button></td></tr>`)}</tbody>
          </table></div>`}
    </div>`;
  },
};

const BalancersCard = {
  props: ["template"],
  setup(props) {
    const status = Vue.ref(null);
    const problem = Vue.ref("");
    const form = Vue.reactive({ tag: "", target: "" });
    const balancerTags = () => {
      const routing = (props.template && props.template.routing) || {};
      return (Array.isArray(routing.balancers) ? routing.balancers : []).map((b) => b.tag).filter(Boolean);
    };
    const outboundTags = () => ((props.template && props.template.outbounds) || []).map((o) => o.tag).filter(Boolean);
    async function check() {
      try {
        status.value = await api.postForm("panel/api/core/balancerStatus", { tags: balancerTags().join(",") });
        problem.value = "";
      } catch (error) {
        problem.value = error.message;
      }
    }
    async function override(event) {
      event.preventDefault();
      try {
        await api.postForm("panel/api/core/balancerOverride", { tag: form.tag, target: form.target });
        toast(form.target ? t("core.overrideSet") : t("core.overrideCleared"), "success");
        problem.value = "";
      } catch (error) {
        problem.value = error.message;
      }
    }
    return () => html`<div class="card" data-testid="balancers-card">
      <h2>${t("core.balancers")}</h2>
      <p class="muted small">${balancerTags().length ? t("core.balancersFound", { tags: balancerTags().join(", ") }) : t("core.noBalancers")}</p>
      <div class="actions"><button onClick=${check}>${t("core.checkBalancers")}</button></div>
      ${status.value ? html`<ul class="plain">${Object.entries(status.value).map(([tag, info]) => html`<li key=${tag}>
        <strong>${tag}</strong>: ${info.override ? t("core.overriddenTo", { target: info.override }) : t("core.noOverride")}
        ${(info.principleTargets || []).length ? html`<div class="muted small">${t("core.preferred")}: ${info.principleTargets.join(", ")}</div>` : null}
      </li>`)}</ul>` : null}
      <form class="toolbar" onSubmit=${override}>
        ${field(t("core.balancerTag"), textInput(form, "tag", { list: "balancer-tags", required: true, name: "balancerTag" }))}
        ${field(t("core.target"), textInput(form, "target", { list: "outbound-tags", name: "balancerTarget", placeholder: t("core.targetEmpty") }))}
        <button type="submit">${t("core.override")}</button>
        <datalist id="balancer-tags">${balancerTags().map((tag) => html`<option value=${tag}></option>`)}</datalist>
        <datalist id="outbound-tags">${outboundTags().map((tag) => html`<option value=${tag}></option>`)}</datalist></form>
      ${problem.value ? html`<p class="error-text" role="alert" data-testid="balancer-error">${problem.value}</p>` : null}
    </div>`;
  },
};

const RouteTestCard = {
  props: ["inboundTags"],
  setup(props) {
    const form = Vue.reactive({ domain: "", ip: "", port: "443", network: "tcp", inboundTag: "", protocol: "", email: "" });
    const result = Vue.ref(null);
    const problem = Vue.ref("");
    async function submit(event) {
      event.preventDefault();
      const body = Object.fromEntries(Object.entries(form).filter(([, value]) => value !== ""));
      try {
        result.value = await api.postForm("panel/api/core/routeTest", body);
        problem.value = "";
      } catch (error) {
        result.value = null;
        problem.value = error.message;
      }
    }
    return () => html`<form class="card" onSubmit=${submit} data-testid="route-test">
      <h2>${t("core.routeTest")}</h2>
      <p class="muted small">${t("core.routeTestHint")}</p>
      <div class="form-grid">
        ${field(t("core.domain"), textInput(form, "domain", { name: "domain", placeholder: "example.com" }))}
        ${field(t("core.ip"), textInput(form, "ip", { name: "ip" }))}
        ${field(t("hosts.port"), textInput(form, "port", { name: "port", inputmode: "numeric" }))}
        ${field(t("core.network"), selectInput(form, "network", NETWORKS))}
        ${field(t("core.inboundTag"), selectInput(form, "inboundTag", [["", t("core.anyInbound")], ...props.inboundTags.map((tag) => [tag, tag])]))}
        ${field(t("core.protocol"), textInput(form, "protocol", { name: "protocol", placeholder: "http, tls, bittorrent" }))}
        ${field(t("clients.email"), textInput(form, "email", { name: "email" }))}
      </div>
      <div class="actions"><button class="primary" type="submit">${t("core.runRouteTest")}</button></div>
      ${result.value ? html`<p data-testid="route-result">${t("core.routedTo", { tag: result.value.outboundTag || "-" })}
        ${(result.value.outboundGroupTags || []).length ? ` (${result.value.outboundGroupTags.join(", ")})` : ""}
        <span class="muted small"> ${result.value.matchedRule ? t("core.ruleMatched") : t("core.noRuleMatched")}</span></p>` : null}
      ${problem.value ? html`<p class="error-text" role="alert" data-testid="route-error">${problem.value}</p>` : null}
    </form>`;
  },
};

export const CorePage = {
  setup() {
    const model = Vue.reactive({ coreSetting: "", outboundTestUrl: "" });
    const inboundTags = Vue.ref([]);
    const loaded = Vue.ref(false);
    const subs = Vue.ref([]);
    const loadSubs = async () => {
      subs.value = await api.get("panel/api/core/outbound-subs");
    };
    const load = async () => {
      const reply = await api.post("panel/api/core/");
      model.coreSetting = reply.coreSetting;
      model.outboundTestUrl = reply.outboundTestUrl || "";
      inboundTags.value = JSON.parse(reply.inboundTags || "[]");
      loaded.value = true;
    };
    Vue.onMounted(() => {
      load().catch(() => {});
      loadSubs().catch(() => {});
    });
    // The outbound and balancer cards follow the template being edited while it parses.
    const template = Vue.computed(() => parseTemplate(model.coreSetting));
    return () => html`<section class="page">
      <div class="page-head"><h1>${t("nav.core")}</h1></div>
      ${loaded.value ? html`
        <${TemplateCard} model=${model} template=${template.value} onSaved=${() => load().catch(() => {})} />
        <${ProcessCard} />
        <${CoreFilesCard} />
        <${OutboundsCard} template=${template.value} subs=${subs.value} />
        <${OutboundSourcesCard} model=${model} subs=${subs.value} onChanged=${() => loadSubs().catch(() => {})} />
        <${BalancersCard} template=${template.value} />
        <${RouteTestCard} inboundTags=${inboundTags.value} />`
        : html`<p class="muted">${t("common.loading")}</p>`}
    </section>`;
  },
};
