// Usage history of a client or an inbound, from clients/history/:email or
// inbounds/:id/history: the last 24 hours by the hour or the last 30 days by the day, as
// the dashboard draws its history (the same Chart), upload and download as two series.
// Hours without traffic come back missing; they are drawn as zero.
import { html, Vue } from "../lib.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { Chart, formatBytes, Modal } from "../components.js";
import { COLORS } from "./dashboard.js";

const SPANS = { hour: [3600, 24], day: [86400, 30] };
const LABELS = { hour: () => t("usage.hour"), day: () => t("usage.day") };

// [times, ups, downs] with a point for every bucket of the range, zero where none came back.
export function filled(answer, step) {
  const [size, count] = SPANS[step];
  const last = Math.floor(Date.now() / 1000 / size) * size;
  const byTime = new Map(answer.buckets.map((bucket) => [bucket.at / 1000, bucket]));
  const times = Array.from({ length: count }, (_, index) => last - (count - 1 - index) * size);
  const pick = (key) => times.map((time) => (byTime.get(time) || { [key]: 0 })[key]);
  return [times, pick("up"), pick("down")];
}

export const UsageHistory = {
  props: ["path"],
  setup(props) {
    const step = Vue.ref("hour");
    const answer = Vue.ref(null);
    const failed = Vue.ref("");
    async function load() {
      try {
        answer.value = await api.get(`${props.path}?step=${step.value}`);
        failed.value = "";
      } catch (error) {
        failed.value = error.message;
      }
    }
    Vue.onMounted(load);
    Vue.watch(step, load);
    const series = () => [
      { label: t("clients.uploaded"), color: COLORS.netUp },
      { label: t("clients.downloaded"), color: COLORS.netDown },
    ];
    return () => html`<div class="usage-history" data-testid="usage-history">
      <div class="actions">
        <h3>${t("usage.title")}</h3>
        ${Object.keys(SPANS).map((key) => html`<button key=${key} data-step=${key} aria-pressed=${step.value === key}
          class=${step.value === key ? "primary" : ""} onClick=${() => (step.value = key)}>${LABELS[key]()}</button>`)}
      </div>
      ${failed.value ? html`<p class="empty">${failed.value}</p>`
        : answer.value === null ? html`<p class="muted">${t("common.loading")}</p>`
          : html`<p class="muted small" data-testid="usage-total">${[
              `↑ ${formatBytes(answer.value.up)}`, `↓ ${formatBytes(answer.value.down)}`].join(" ")}</p>
            <${Chart} label=${t("usage.title")} data=${filled(answer.value, step.value)} format=${formatBytes}
              days=${step.value === "day"} series=${series()} />`}
    </div>`;
  },
};

export const InboundHistoryDialog = {
  props: ["inbound", "onClose"],
  setup(props) {
    return () => html`<${Modal} wide=${true} title=${t("usage.ofInbound", { name: props.inbound.remark || props.inbound.tag })}
      onClose=${props.onClose}
      body=${() => html`<${UsageHistory} path=${`panel/api/inbounds/${props.inbound.id}/history`} />`}
      footer=${() => html`<button onClick=${props.onClose}>${t("common.close")}</button>`} />`;
  },
};
