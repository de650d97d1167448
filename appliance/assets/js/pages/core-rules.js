// The routing tab's rule form: every condition an Xray routing rule takes, and the outbound
// or balancer it sends to. The form edits a draft of one rule; "Apply" writes the rule into
// the template (a new one before every rule but the panel's own API rules, an edited one in
// its place), so the raw JSON shows it at once and the template's save sends it to the core.
// Keys of an edited rule the form does not know are kept as they were.
import { html, Vue } from "../lib.js";
import { t } from "../i18n.js";
import { field, selectInput, textInput } from "../components.js";

// Conditions typed as comma-separated lists, and those typed as one text.
const LIST_KEYS = ["domain", "ip", "source", "localIP", "inboundTag", "user"];
const TEXT_KEYS = ["port", "sourcePort", "localPort", "vlessRoute"];
const NETWORKS = ["", "tcp", "udp", "tcp,udp"];
const SNIFFED = ["http", "tls", "quic", "bittorrent"];
const FORM_KEYS = [...LIST_KEYS, ...TEXT_KEYS, "network", "protocol", "attrs", "ruleTag", "outboundTag", "balancerTag"];
// A port condition: ports and ranges, separated by commas.
const PORTS = /^\s*\d{1,5}(\s*-\s*\d{1,5})?(\s*,\s*\d{1,5}(\s*-\s*\d{1,5})?)*\s*$/;

function asText(value) {
  if (Array.isArray(value)) return value.join(", ");
  return value === undefined || value === null ? "" : String(value);
}

function splitList(text) {
  return text.split(",").map((item) => item.trim()).filter(Boolean);
}

// The draft of `rule` (or of a new rule) as the form's text fields.
export function ruleDraft(rule) {
  const draft = { targetKind: rule && rule.balancerTag ? "balancer" : "outbound", target: (rule && (rule.balancerTag || rule.outboundTag)) || "" };
  for (const key of [...LIST_KEYS, ...TEXT_KEYS, "network", "ruleTag"]) draft[key] = asText(rule && rule[key]);
  draft.protocol = Array.isArray(rule && rule.protocol) ? [...rule.protocol] : [];
  draft.attrs = Object.entries((rule && rule.attrs) || {}).map(([key, value]) => `${key}: ${value}`).join("\n");
  return draft;
}

function parseAttrs(text) {
  const attrs = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    // From the second character: a header's pseudo-name starts with one (":method").
    const at = line.indexOf(":", 1);
    if (at <= 0) return null;
    attrs[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return attrs;
}

function portsValid(text) {
  return PORTS.test(text) && text.split(/[,-]/).every((p) => Number(p) >= 1 && Number(p) <= 65535);
}

// The rule a draft describes, over the keys of `original` the form does not know; or the
// sentence that says what is missing or wrong.
export function draftRule(draft, original) {
  const rule = { type: "field" };
  for (const [key, value] of Object.entries(original || {})) if (!FORM_KEYS.includes(key)) rule[key] = value;
  for (const key of LIST_KEYS) if (splitList(draft[key]).length) rule[key] = splitList(draft[key]);
  for (const key of ["port", "sourcePort", "localPort"]) {
    const text = draft[key].trim();
    if (!text) continue;
    if (!portsValid(text)) return { error: t("core.rulePortInvalid", { field: key }) };
    rule[key] = text.replace(/\s+/g, "");
  }
  if (draft.vlessRoute.trim()) rule.vlessRoute = draft.vlessRoute.trim();
  if (draft.network) rule.network = draft.network;
  if (draft.protocol.length) rule.protocol = [...draft.protocol];
  const attrs = parseAttrs(draft.attrs);
  if (!attrs) return { error: t("core.ruleAttrsInvalid") };
  if (Object.keys(attrs).length) rule.attrs = attrs;
  if (!FORM_KEYS.some((key) => key in rule && !["ruleTag", "outboundTag", "balancerTag"].includes(key))) return { error: t("core.ruleNeedsCondition") };
  if (!draft.target) return { error: t("core.ruleNeedsTarget") };
  rule[draft.targetKind === "balancer" ? "balancerTag" : "outboundTag"] = draft.target;
  if (draft.ruleTag.trim()) rule.ruleTag = draft.ruleTag.trim();
  return { rule };
}

// The form of one rule. `rule` is the rule edited (null for a new one); `targets` gives the
// outbound and balancer tags to send to; `onApply(rule)` and `onCancel()` close it.
export const RuleForm = {
  props: ["rule", "targets", "onApply", "onCancel"],
  setup(props) {
    const draft = Vue.reactive(ruleDraft(props.rule));
    const problem = Vue.ref("");
    function apply() {
      const { rule, error } = draftRule(draft, props.rule);
      problem.value = error || "";
      if (rule) props.onApply(rule);
    }
    function setProtocol(name, on) {
      draft.protocol = on ? [...draft.protocol, name] : draft.protocol.filter((p) => p !== name);
    }
    const text = (key, label, hint = "") => field(label, textInput(draft, key, { name: `rule-${key}`, spellcheck: "false" }), hint);
    return () => {
      const tags = (draft.targetKind === "balancer" ? props.targets.balancers : props.targets.outbounds) || [];
      const choices = [["", t("core.ruleChooseTarget")], ...tags.map((tag) => [tag, tag])];
      if (draft.target && !tags.includes(draft.target)) choices.push([draft.target, draft.target]);
      return html`<div class="card" data-testid="rule-form">
        <h3>${props.rule ? t("core.editRule") : t("core.addRule")}</h3>
        <div class="form-grid">
          ${text("domain", t("core.rule.domain"), t("core.rule.domainHint"))}
          ${text("ip", t("core.rule.ip"), t("core.rule.ipHint"))}
          ${text("port", t("core.rule.port"), t("core.rule.portHint"))}
          ${text("sourcePort", t("core.rule.sourcePort"))}
          ${text("source", t("core.rule.source"))}
          ${text("localIP", t("core.rule.localIP"))}
          ${text("localPort", t("core.rule.localPort"))}
          ${field(t("core.rule.network"), selectInput(draft, "network", NETWORKS.map((n) => [n, n || t("core.rule.anyNetwork")]), { name: "rule-network" }))}
          ${text("inboundTag", t("core.rule.inboundTag"))}
          ${text("user", t("core.rule.user"))}
          ${text("vlessRoute", t("core.rule.vlessRoute"))}
          ${text("ruleTag", t("core.rule.ruleTag"))}
          <fieldset><legend>${t("core.rule.protocol")}</legend><div class="toolbar">${SNIFFED.map((name) => html`<label class="check" key=${name}>
            <input type="checkbox" name=${`rule-protocol-${name}`} checked=${draft.protocol.includes(name)}
              onChange=${(event) => setProtocol(name, event.target.checked)} /><span>${name}</span></label>`)}</div></fieldset>
          <label class="field span-all"><span class="field-label">${t("core.rule.attrs")}</span>
            <textarea name="rule-attrs" rows="2" spellcheck="false" value=${draft.attrs}
              onInput=${(event) => (draft.attrs = event.target.value)}></textarea><small class="hint">${t("core.rule.attrsHint")}</small></label>
          ${field(t("core.rule.sendTo"), selectInput(draft, "targetKind", [["outbound", t("core.rule.outbound")], ["balancer", t("core.rule.balancer")]], { name: "rule-targetKind" }))}
          ${field(t("core.tag"), selectInput(draft, "target", choices, { name: "rule-target" }))}
        </div>
        ${problem.value ? html`<p class="error-text" role="alert" data-testid="rule-error">${problem.value}</p>` : null}
        <div class="actions">
          <button type="button" onClick=${props.onCancel}>${t("common.cancel")}</button>
          <button type="button" class="primary" data-testid="rule-apply" onClick=${apply}>${t("core.applyRule")}</button></div>
      </div>`;
    };
  },
};
