// The core template's common edits, in tabs beside its raw JSON: routing rules with presets,
// DNS servers and query strategy, outbounds. The page keeps one template: the object parsed
// from the raw editor's text. Each tab reads that object and writes its change back as the
// text (`editTemplate`), so the raw JSON, the tabs and the cards below always show the same
// template; saving is the template form's save (core/update), which the core may refuse
// with its own words. Text inputs apply on change (when they lose focus), so what is being
// typed is not reformatted under the cursor.
import { html, Vue } from "../lib.js";
import { t } from "../i18n.js";
import { field, selectInput } from "../components.js";
import { missingGeoFiles } from "./core-files.js";
import { RuleForm } from "./core-rules.js";
import { OutboundForm } from "./core-outbound-form.js";

// Countries for the "block or direct a country" preset. geoip.dat has every country code;
// geosite.dat has lists for only some, named here.
const COUNTRIES = ["cn", "ir", "ru", "by", "tr", "vn", "id", "in", "us", "gb", "de", "fr", "nl", "jp", "kr", "ua"];
const GEOSITE = { cn: "cn", ir: "category-ir", ru: "category-ru" };
const PRESETS = [
  { id: "private", condition: { ip: ["geoip:private"] }, matches: (rule) => has(rule.ip, "geoip:private") || (has(rule.ip, "10.0.0.0/8") && has(rule.ip, "192.168.0.0/16")) },
  { id: "ads", condition: { domain: ["geosite:category-ads-all"] }, matches: (rule) => has(rule.domain, "geosite:category-ads-all") },
  { id: "bittorrent", condition: { protocol: ["bittorrent"] }, matches: (rule) => has(rule.protocol, "bittorrent") },
];
const DOMAIN_STRATEGIES = ["AsIs", "IPIfNonMatch", "IPOnDemand"];
const QUERY_STRATEGIES = ["UseIP", "UseIPv4", "UseIPv6"];
const CONDITIONS = ["domain", "ip", "port", "sourcePort", "localPort", "network", "protocol", "inboundTag", "user", "source", "localIP", "vlessRoute", "attrs"];

function has(list, value) {
  return Array.isArray(list) && list.includes(value);
}

export function parseTemplate(text) {
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch (error) {
    return null;
  }
}

// Apply `change` to a fresh copy of the template and write it back as the editor's text.
export function editTemplate(model, change) {
  const template = parseTemplate(model.coreSetting);
  if (!template) return;
  change(template);
  model.coreSetting = JSON.stringify(template, null, 2);
}

function outboundsOf(template) {
  if (!Array.isArray(template.outbounds)) template.outbounds = [];
  return template.outbounds;
}

function rulesOf(template) {
  if (!template.routing || typeof template.routing !== "object") template.routing = {};
  if (!Array.isArray(template.routing.rules)) template.routing.rules = [];
  return template.routing.rules;
}

// The tag of the first outbound of `protocol`; one is added when there is none.
function tagFor(template, protocol, wanted) {
  const outbounds = outboundsOf(template);
  const found = outbounds.find((o) => o && o.protocol === protocol && o.tag);
  if (found) return found.tag;
  let tag = wanted;
  for (let n = 2; outbounds.some((o) => o && o.tag === tag); n += 1) tag = `${wanted}-${n}`;
  outbounds.push({ tag, protocol, settings: protocol === "freedom" ? { domainStrategy: "AsIs" } : {} });
  return tag;
}

function blackholeTags(template) {
  return new Set((Array.isArray(template.outbounds) ? template.outbounds : []).filter((o) => o && o.protocol === "blackhole").map((o) => o.tag));
}

// New rules go before every rule but the leading ones of the panel's own API.
function insertRules(template, rules) {
  const existing = rulesOf(template);
  let at = 0;
  while (at < existing.length && (has(existing[at].inboundTag, "api") || existing[at].outboundTag === "api")) at += 1;
  existing.splice(at, 0, ...rules);
}

function ruleSummary(rule) {
  const shown = (value) => (Array.isArray(value) ? value.join(", ") : value && typeof value === "object" ? JSON.stringify(value) : value);
  const parts = CONDITIONS.filter((key) => rule[key] !== undefined && rule[key] !== "")
    .map((key) => `${key}: ${shown(rule[key])}`);
  return parts.join("; ") || "-";
}

export const RoutingTab = {
  props: ["model", "template"],
  setup(props) {
    const country = Vue.reactive({ code: "cn", action: "block" });
    // The rule in the form: null when closed, "new", or the index of the rule edited.
    const editing = Vue.ref(null);
    const presetOn = (preset) => {
      const blocked = blackholeTags(props.template);
      return ((props.template.routing && props.template.routing.rules) || []).some((r) => r && blocked.has(r.outboundTag) && preset.matches(r));
    };
    function setPreset(preset, on) {
      editTemplate(props.model, (template) => {
        const blocked = blackholeTags(template);
        template.routing = { ...(template.routing || {}), rules: rulesOf(template).filter((r) => !(r && blocked.has(r.outboundTag) && preset.matches(r))) };
        if (on) insertRules(template, [{ type: "field", outboundTag: tagFor(template, "blackhole", "blocked"), ...structuredClone(preset.condition) }]);
      });
    }
    function countryRules(outboundTag) {
      const rules = [{ type: "field", outboundTag, ip: [`geoip:${country.code}`] }];
      if (GEOSITE[country.code]) rules.push({ type: "field", outboundTag, domain: [`geosite:${GEOSITE[country.code]}`] });
      return rules;
    }
    function addCountry() {
      editTemplate(props.model, (template) => {
        const outboundTag = country.action === "block" ? tagFor(template, "blackhole", "blocked") : tagFor(template, "freedom", "direct");
        insertRules(template, countryRules(outboundTag));
      });
    }
    // Said beside a preset whose rules name a geo file the core's folder lacks.
    function geoWarning(id, rules) {
      const missing = missingGeoFiles(rules);
      return missing.length ? html`<p class="warning-text" role="alert" data-testid=${`geo-warning-${id}`}>${
        t("core.presetNeedsGeo", { files: missing.join(", ") })}</p>` : null;
    }
    function move(index, by) {
      editing.value = null;
      editTemplate(props.model, (template) => {
        const rules = rulesOf(template);
        const [rule] = rules.splice(index, 1);
        rules.splice(index + by, 0, rule);
      });
    }
    function remove(index) {
      editing.value = null;
      editTemplate(props.model, (template) => rulesOf(template).splice(index, 1));
    }
    function applyRule(rule) {
      const at = editing.value;
      editTemplate(props.model, (template) => (at === "new" ? insertRules(template, [rule]) : (rulesOf(template)[at] = rule)));
      editing.value = null;
    }
    const targets = () => ({
      outbounds: (Array.isArray(props.template.outbounds) ? props.template.outbounds : []).map((o) => o && o.tag).filter(Boolean),
      balancers: ((props.template.routing && props.template.routing.balancers) || []).map((b) => b && b.tag).filter(Boolean),
    });
    function ruleForm(rules) {
      if (editing.value === null) return null;
      const rule = editing.value === "new" ? null : rules[editing.value];
      // Keyed by the rule's text too: an edit of the raw JSON refills the form.
      return html`<${RuleForm} key=${`${editing.value}:${JSON.stringify(rule || null)}`} rule=${rule || null} targets=${targets()}
        onApply=${applyRule} onCancel=${() => (editing.value = null)} />`;
    }
    function setStrategy(value) {
      editTemplate(props.model, (template) => {
        template.routing = { ...(template.routing || {}), domainStrategy: value };
      });
    }
    return () => {
      const routing = props.template.routing || {};
      const rules = Array.isArray(routing.rules) ? routing.rules : [];
      return html`<div data-testid="routing-tab">
        <h3>${t("core.presets")}</h3>
        <div class="form-grid">${PRESETS.map((preset) => html`<div key=${preset.id}><label class="check">
          <input type="checkbox" name=${`preset-${preset.id}`} checked=${presetOn(preset)}
            onChange=${(event) => setPreset(preset, event.target.checked)} /><span>${t(`core.preset.${preset.id}`)}</span></label>
          ${geoWarning(preset.id, [preset.condition])}</div>`)}</div>
        <div class="toolbar">
          ${field(t("core.country"), selectInput(country, "code", COUNTRIES.map((code) => [code, code.toUpperCase()]), { name: "country" }))}
          ${field(t("core.countryAction"), selectInput(country, "action", [["block", t("core.block")], ["direct", t("core.direct")]], { name: "countryAction" }))}
          <button type="button" onClick=${addCountry}>${t("core.addCountryRule")}</button></div>
        ${geoWarning("country", countryRules(""))}
        <p class="muted small">${t("core.geoFilesHint")}</p>
        <label class="field"><span class="field-label">${t("core.domainStrategy")}</span>
          <select name="domainStrategy" onChange=${(event) => setStrategy(event.target.value)}>
            ${DOMAIN_STRATEGIES.map((s) => html`<option value=${s} selected=${(routing.domainStrategy || "AsIs") === s}>${s}</option>`)}</select></label>
        <h3>${t("core.rules")}</h3>
        ${rules.length === 0 ? html`<p class="empty">${t("core.noRules")}</p>` : html`<div class="table-wrap"><table class="table responsive" data-testid="routing-rules">
          <thead><tr><th>#</th><th>${t("core.target")}</th><th>${t("core.conditions")}</th><th><span class="sr-only">${t("common.actions")}</span></th></tr></thead>
          <tbody>${rules.map((rule, index) => html`<tr key=${index}>
            <td data-label="#">${index + 1}</td>
            <td data-label=${t("core.target")}>${(rule && (rule.outboundTag || rule.balancerTag)) || "-"}</td>
            <td data-label=${t("core.conditions")}><code>${rule ? ruleSummary(rule) : "-"}</code></td>
            <td class="actions">
              <button type="button" disabled=${index === 0} aria-label=${t("core.moveUp")} onClick=${() => move(index, -1)}>↑</button>
              <button type="button" disabled=${index === rules.length - 1} aria-label=${t("core.moveDown")} onClick=${() => move(index, 1)}>↓</button>
              <button type="button" data-testid="rule-edit" onClick=${() => (editing.value = index)}>${t("common.edit")}</button>
              <button type="button" class="danger" onClick=${() => remove(index)}>${t("common.delete")}</button></td></tr>`)}</tbody></table></div>`}
        ${ruleForm(rules)}
        ${editing.value === null ? html`<div class="actions"><button type="button" data-testid="rule-add" onClick=${() => (editing.value = "new")}>${t("core.addRule")}</button></div>` : null}
      </div>`;
    };
  },
};

export const DnsTab = {
  props: ["model", "template"],
  setup(props) {
    const dnsOf = (template) => (template.dns && typeof template.dns === "object" ? template.dns : {});
    function update(change) {
      editTemplate(props.model, (template) => {
        const dns = { ...dnsOf(template) };
        change(dns);
        const empty = Object.keys(dns).every((key) => (key === "servers" ? dns.servers.length === 0 : dns[key] === undefined));
        if (empty) delete template.dns;
        else template.dns = dns;
      });
    }
    function setServers(text) {
      const typed = text.split("\n").map((line) => line.trim()).filter(Boolean);
      update((dns) => {
        const objects = (Array.isArray(dns.servers) ? dns.servers : []).filter((s) => typeof s !== "string");
        dns.servers = [...typed, ...objects];
      });
    }
    function setQueryStrategy(value) {
      update((dns) => {
        if (value) dns.queryStrategy = value;
        else delete dns.queryStrategy;
      });
    }
    return () => {
      const dns = dnsOf(props.template);
      const servers = Array.isArray(dns.servers) ? dns.servers : [];
      const objects = servers.filter((s) => typeof s !== "string").length;
      return html`<div class="form-grid" data-testid="dns-tab">
        ${field(t("core.dnsServers"), html`<textarea name="dnsServers" rows="5" spellcheck="false"
          value=${servers.filter((s) => typeof s === "string").join("\n")}
          onChange=${(event) => setServers(event.target.value)}></textarea>`,
          objects ? t("core.dnsObjectsKept", { count: objects }) : t("core.dnsServersHint"))}
        <label class="field"><span class="field-label">${t("core.queryStrategy")}</span>
          <select name="queryStrategy" onChange=${(event) => setQueryStrategy(event.target.value)}>
            <option value="" selected=${!dns.queryStrategy}>${t("core.coreDefault")}</option>
            ${QUERY_STRATEGIES.map((s) => html`<option value=${s} selected=${dns.queryStrategy === s}>${s}</option>`)}</select></label>
      </div>`;
    };
  },
};

export const OutboundsTab = {
  props: ["model", "template"],
  setup(props) {
    const problems = Vue.reactive({});
    // The outbound in the form: null for a new one, else its index.
    const editing = Vue.ref(null);
    const tagTaken = (template, tag, except) => outboundsOf(template).some((o, i) => i !== except && o && o.tag === tag);
    function applyOutbound(outbound) {
      const at = editing.value;
      editTemplate(props.model, (template) => (at === null ? outboundsOf(template).push(outbound) : (outboundsOf(template)[at] = outbound)));
      editing.value = null;
    }
    function rename(index, tag) {
      const wanted = tag.trim();
      if (!wanted || tagTaken(props.template, wanted, index)) {
        problems[index] = wanted ? t("core.tagTaken", { tag: wanted }) : t("core.tagRequired");
        return;
      }
      delete problems[index];
      editTemplate(props.model, (template) => (outboundsOf(template)[index].tag = wanted));
    }
    function replace(index, text) {
      const outbound = parseTemplate(text);
      if (!outbound) {
        problems[index] = t("core.outboundNotJson");
        return;
      }
      delete problems[index];
      editTemplate(props.model, (template) => (outboundsOf(template)[index] = outbound));
    }
    function remove(index) {
      delete problems[index];
      editing.value = null;
      editTemplate(props.model, (template) => outboundsOf(template).splice(index, 1));
    }
    return () => {
      const outbounds = Array.isArray(props.template.outbounds) ? props.template.outbounds : [];
      return html`<div data-testid="outbounds-tab">
        ${outbounds.length === 0 ? html`<p class="empty">${t("core.noOutbounds")}</p>` : outbounds.map((outbound, index) => html`<details class="outbound-edit" key=${index} data-outbound-edit=${(outbound && outbound.tag) || index}>
          <summary><strong>${(outbound && outbound.tag) || "-"}</strong> <span class="muted">${(outbound && outbound.protocol) || "-"}</span></summary>
          <div class="form-grid">
            ${field(t("core.tag"), html`<input type="text" name="outboundTag" value=${(outbound && outbound.tag) || ""} onChange=${(event) => rename(index, event.target.value)} />`)}
            <label class="field span-all"><span class="field-label">${t("core.outboundJson")}</span>
              <textarea class="code-editor" name="outboundJson" rows="8" spellcheck="false" value=${JSON.stringify(outbound, null, 2)}
                onChange=${(event) => replace(index, event.target.value)}></textarea></label></div>
          ${problems[index] ? html`<p class="error-text" role="alert">${problems[index]}</p>` : null}
          <div class="actions">
            <button type="button" data-testid="outbound-edit" onClick=${() => (editing.value = index)}>${t("core.editInForm")}</button>
            <button type="button" class="danger" onClick=${() => remove(index)}>${t("common.delete")}</button></div>
        </details>`)}
        <${OutboundForm} key=${editing.value === null ? "new" : `${editing.value}:${JSON.stringify(outbounds[editing.value])}`} outbound=${editing.value === null ? null : outbounds[editing.value] || null}
          taken=${(tag) => tagTaken(props.template, tag, editing.value === null ? -1 : editing.value)}
          onApply=${applyOutbound} onCancel=${() => (editing.value = null)} />
      </div>`;
    };
  },
};
