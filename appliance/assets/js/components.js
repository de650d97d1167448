// Small building blocks shared by the pages: formatting, form fields, the dialog, toasts,
// the QR code and the time-series chart.
import { html, loadQrcode, loadUPlot, Vue } from "./lib.js";
import { locale, t } from "./i18n.js";
import { dismissToast, state, toast } from "./state.js";
import { jalaliText, parseJalali } from "./jalali.js";

// ---- formatting -------------------------------------------------------------------------

const UNITS = ["B", "KB", "MB", "GB", "TB", "PB"];

export function formatBytes(value) {
  let amount = Number(value) || 0;
  let unit = 0;
  while (Math.abs(amount) >= 1024 && unit < UNITS.length - 1) {
    amount /= 1024;
    unit += 1;
  }
  return `${amount.toFixed(unit === 0 ? 0 : 2)} ${UNITS[unit]}`;
}

// An uptime in words: minutes under an hour, hours and minutes under a day, then days
// ("0 days" for the first day of a fresh host said nothing).
export function formatUptime(seconds) {
  const minutes = Math.floor((Number(seconds) || 0) / 60);
  if (minutes < 60) return t("dash.minutes", { minutes });
  if (minutes < 1440) return t("dash.hoursMinutes", { hours: Math.floor(minutes / 60), minutes: minutes % 60 });
  return t("dash.days", { days: Math.floor(minutes / 1440) });
}

// A number with its unit ("10.00 GB", "12%") isolated and kept left to right: inside
// right-to-left text the bidi algorithm would otherwise put the unit before the number
// and mix neighbouring quantities ("B / 10.00 0 GB").
export function quantity(text) {
  return html`<bdi class="qty" dir="ltr">${text}</bdi>`;
}

// t(key, params) as vnodes, with each parameter but the plural count shown as a quantity.
export function tq(key, params) {
  const text = t(key, "count" in params ? { count: params.count } : undefined);
  return text.split(/\{(\w+)\}/).map((part, index) => (index % 2 ? quantity(params[part] ?? part) : part));
}

export function formatDate(milliseconds) {
  if (!milliseconds) return t("common.never");
  if (milliseconds < 0) {
    return t("clients.afterFirstUse", { days: Math.round(-milliseconds / 86400000) });
  }
  return new Date(milliseconds).toLocaleString(locale.value);
}

// The local calendar day of a time (a Date or milliseconds) as "YYYY-MM-DD", a date input's value.
export function localDay(time) {
  const date = new Date(time);
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
}

export function percent(part, whole) {
  return whole ? Math.min(100, (part * 100) / whole) : 0;
}

// ---- form fields (plain functions returning vnodes; `model` is a reactive object) ---------

export function field(label, input, hint = "") {
  return html`<label class="field"><span class="field-label">${label}</span>${input}${
    hint ? html`<small class="hint">${hint}</small>` : null
  }</label>`;
}

// A field the panel may refuse: `problem` (text or null) marks it and says what is wrong
// in place of the hint.
export function checkedField(label, input, problem, hint = "") {
  return html`<label class=${problem ? "field invalid" : "field"}><span class="field-label">${label}</span>${input}${
    problem ? html`<small class="error-text" role="alert">${problem}</small>` : hint ? html`<small class="hint">${hint}</small>` : null
  }</label>`;
}

// A day as "YYYY-MM-DD" (a date input's value, "" for none). The Persian UI writes and
// reads it in the Jalali calendar, in a text field that refuses (and keeps the form from
// being sent) a day that does not exist; other languages keep the browser's date input.
export const DateInput = {
  props: ["value", "onChange", "attrs"],
  setup(props) {
    const text = Vue.ref("");
    const shown = () => (props.value ? jalaliText(props.value) : "");
    Vue.watch(() => props.value, (value) => {
      if ((parseJalali(text.value) || "") !== (value || "")) text.value = shown();
    }, { immediate: true });
    function typed(event) {
      text.value = event.target.value;
      const day = parseJalali(text.value);
      event.target.setCustomValidity(day || !text.value.trim() ? "" : t("common.badJalaliDate"));
      props.onChange(day || "");
    }
    return () => (locale.value === "fa"
      ? html`<input type="text" inputmode="numeric" dir="ltr" data-calendar="jalali" placeholder=${t("common.jalaliPlaceholder")}
          value=${text.value} onInput=${typed} ...${props.attrs || {}} />`
      : html`<input type="date" value=${props.value} onInput=${(event) => props.onChange(event.target.value)}
          ...${props.attrs || {}} />`);
  },
};

export function textInput(model, key, attrs = {}) {
  return html`<input type="text" value=${model[key] ?? ""}
    onInput=${(event) => (model[key] = event.target.value)} ...${attrs} />`;
}

export function numberInput(model, key, attrs = {}) {
  return html`<input type="number" value=${model[key] ?? 0}
    onInput=${(event) => (model[key] = event.target.value === "" ? 0 : Number(event.target.value))}
    ...${attrs} />`;
}

export function selectInput(model, key, choices, attrs = {}) {
  return html`<select value=${model[key]} onChange=${(event) => (model[key] = event.target.value)}
    ...${attrs}>${choices.map(
      ([value, label]) => html`<option value=${value} selected=${model[key] === value}>${label}</option>`,
    )}</select>`;
}

// A list of strings typed as one comma-separated line.
export function listText(model, key, attrs = {}) {
  return html`<input type="text" value=${(model[key] || []).join(", ")} ...${attrs}
    onInput=${(event) => (model[key] = event.target.value.split(",").map((s) => s.trim()).filter(Boolean))} />`;
}

export function checkbox(model, key, label, attrs = {}) {
  return html`<label class="check"><input type="checkbox" checked=${!!model[key]}
    onChange=${(event) => (model[key] = event.target.checked)} ...${attrs} /><span>${label}</span></label>`;
}

export function toggle(checked, onChange, label) {
  return html`<label class="switch" title=${label}><input type="checkbox" role="switch"
    aria-label=${label} checked=${checked} onChange=${(event) => onChange(event.target.checked)} />
    <span class="slider"></span></label>`;
}

export function textArea(model, key, attrs = {}) {
  return html`<textarea value=${model[key] ?? ""}
    onInput=${(event) => (model[key] = event.target.value)} ...${attrs}></textarea>`;
}

// Copies `text` and says whether it did. The clipboard API exists only in a secure context
// (https, or localhost): a fresh server reached at http://<its address> has none, so the
// text is then copied by selecting it in a hidden text area. When that fails too, the text
// shown beside `origin` (the button clicked) is selected, and the toast says to press Ctrl+C.
export async function copyText(text, origin = null) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      toast(t("common.copied"), "success");
      return true;
    } catch (error) {
      // refused (no permission, page not focused): the selection may still work
    }
  }
  if (copyBySelection(text, origin)) {
    toast(t("common.copied"), "success");
    return true;
  }
  const shown = origin && origin.parentElement && origin.parentElement.querySelector("code, input, textarea");
  if (shown && shown.select) shown.select();
  else if (shown) window.getSelection().selectAllChildren(shown);
  toast(t("common.pressCtrlC"), "warning");
  return false;
}

function copyBySelection(text, origin) {
  const area = document.createElement("textarea");
  area.value = text;
  area.readOnly = true;
  area.className = "copy-buffer";
  // Inside the dialog, when there is one: focus stays within it.
  ((origin && origin.closest(".modal")) || document.body).appendChild(area);
  area.select();
  let copied = false;
  try {
    copied = document.execCommand("copy");
  } catch (error) {
    copied = false;
  }
  area.remove();
  if (origin && origin.focus) origin.focus();
  return copied;
}

// The copy button of one value; `label` names the value for screen readers.
export function copyButton(text, label = "") {
  return html`<button type="button" class="copy" aria-label=${label ? `${t("common.copy")}: ${label}` : null}
    onClick=${(event) => copyText(text, event.currentTarget)}>${t("common.copy")}</button>`;
}

// A generated value the user takes elsewhere: its label, the value, and a copy button.
export function copyBlock(label, value) {
  return html`<div class="copy-block"><span class="field-label">${label}</span>
    <div class="copy-row"><code class="token">${value}</code>${copyButton(value, label)}</div></div>`;
}

// ---- dialog -------------------------------------------------------------------------------

export const Modal = {
  props: ["title", "onClose", "body", "footer", "wide"],
  setup(props) {
    const root = Vue.ref(null);
    const previous = document.activeElement;
    const onKey = (event) => {
      if (event.key === "Escape") props.onClose();
    };
    Vue.onMounted(() => {
      document.addEventListener("keydown", onKey);
      const first = root.value.querySelector("input, select, textarea, button.primary");
      (first || root.value).focus();
    });
    Vue.onUnmounted(() => {
      document.removeEventListener("keydown", onKey);
      if (previous && previous.focus) previous.focus();
    });
    return () => html`<div class="backdrop" onClick=${(event) => {
      if (event.target === event.currentTarget) props.onClose();
    }}>
      <section class=${props.wide ? "modal wide" : "modal"} role="dialog" aria-modal="true"
        aria-label=${props.title} tabindex="-1" ref=${root}>
        <header class="modal-head"><h2>${props.title}</h2>
          <button class="icon" aria-label=${t("common.close")} onClick=${props.onClose}>×</button>
        </header>
        <div class="modal-body">${props.body()}</div>
        ${props.footer ? html`<footer class="modal-foot">${props.footer()}</footer>` : null}
      </section>
    </div>`;
  },
};

export const ConfirmDialog = {
  setup() {
    return () =>
      state.confirm
        ? html`<${Modal} title=${t("common.confirm")} onClose=${() => state.confirm.answer(false)}
            body=${() => html`<p>${state.confirm.message}</p>`}
            footer=${() => html`
              <button onClick=${() => state.confirm.answer(false)}>${t("common.cancel")}</button>
              <button class="primary danger" onClick=${() => state.confirm.answer(true)}>
                ${t("common.ok")}</button>`} />`
        : null;
  },
};

export const Toasts = {
  setup() {
    return () => html`<div class="toasts" role="status" aria-live="polite">
      ${state.toasts.map(
        (item) => html`<div key=${item.id} class=${`toast ${item.severity}`}>
          <div>${item.title ? html`<strong>${item.title}</strong>` : null}<span>${item.text}</span></div>
          <button class="icon" aria-label=${t("common.close")} onClick=${() => dismissToast(item.id)}>×</button>
        </div>`,
      )}
    </div>`;
  },
};

// ---- QR code --------------------------------------------------------------------------------

export const QrCode = {
  props: ["text"],
  setup(props) {
    const library = Vue.shallowRef(null);
    loadQrcode().then((qrcode) => (library.value = qrcode), (error) => toast(error.message, "error"));
    return () => {
      if (!library.value) return html`<div class="qr"></div>`;
      const code = library.value(0, "M");
      code.addData(props.text, "Byte");
      code.make();
      const count = code.getModuleCount();
      let path = "";
      for (let row = 0; row < count; row += 1) {
        for (let column = 0; column < count; column += 1) {
          if (code.isDark(row, column)) path += `M${column + 4} ${row + 4}h1v1h-1z`;
        }
      }
      const size = count + 8;
      return html`<svg class="qr" data-text=${props.text} viewBox=${`0 0 ${size} ${size}`} role="img"
        aria-label=${t("clients.qrCode")} shape-rendering="crispEdges">
        <rect width=${size} height=${size} fill="#fff" /><path d=${path} fill="#000" /></svg>`;
    };
  },
};

// ---- chart ----------------------------------------------------------------------------------

// At least ten minutes of time, ending now when there is no sample yet: a panel that just
// started has one sample, and a range of zero width made the axis show whole years.
const MIN_SPAN = 600;
const timeRange = (self, min, max) => {
  const end = max == null ? Date.now() / 1000 : max;
  const start = min == null ? end - MIN_SPAN : min;
  return end - start < MIN_SPAN ? [end - MIN_SPAN, end] : [start, end];
};
// From zero to a little above the largest value, never under 4, so the ticks fall on whole
// numbers and an idle chart does not print "1%" twice.
const valueRange = (self, min, max) => [0, Math.max((max || 0) * 1.1, 4)];
const CLOCK = { hour: "2-digit", minute: "2-digit" };
const DATE = { month: "short", day: "numeric" };

export const Chart = {
  // `days`: the axis names dates instead of times of day.
  props: ["series", "data", "format", "label", "days"],
  setup(props) {
    const box = Vue.ref(null);
    let plot = null;
    let observer = null;
    let uPlot = null;
    const build = () => {
      if (!uPlot || !box.value) return;
      if (plot) plot.destroy();
      const style = getComputedStyle(document.documentElement);
      const axisColor = style.getPropertyValue("--muted").trim() || "#888";
      const gridColor = style.getPropertyValue("--line").trim() || "#ddd";
      const axis = { stroke: axisColor, grid: { stroke: gridColor, width: 1 }, ticks: { show: false } };
      plot = new uPlot(
        {
          width: Math.max(box.value.clientWidth, 200),
          height: 160,
          legend: { show: props.series.length > 1 },
          cursor: { drag: { x: false, y: false } },
          scales: { x: { time: true, range: timeRange }, y: { range: valueRange } },
          axes: [
            { ...axis, values: (self, ticks) => ticks.map((tick) => (props.days
              ? new Date(tick * 1000).toLocaleDateString(locale.value, DATE)
              : new Date(tick * 1000).toLocaleTimeString(locale.value, CLOCK))) },
            { ...axis, size: 84, values: (self, ticks) => ticks.map(props.format) },
          ],
          series: [{ label: t("chart.time"), value: (self, value) => (value == null ? "-" : formatDate(value * 1000)) },
            ...props.series.map((item) => ({
            label: item.label, stroke: item.color, fill: item.fill, width: 2,
            value: (self, value) => (value == null ? "-" : props.format(value)),
          }))],
        },
        props.data,
        box.value,
      );
      fitTime();
    };
    // uPlot widens a time axis of one sample to years whatever the range function says:
    // set the window itself until there are two samples.
    const fitTime = () => {
      const times = props.data[0] || [];
      if (plot && times.length < 2) {
        const [min, max] = timeRange(null, times[0], times[times.length - 1]);
        plot.setScale("x", { min, max });
      }
    };
    Vue.onMounted(async () => {
      try {
        uPlot = await loadUPlot();
      } catch (error) {
        toast(error.message, "error");
        return;
      }
      if (!box.value) return; // the page was left while the library loaded
      build();
      observer = new ResizeObserver(() => plot && plot.setSize({ width: Math.max(box.value.clientWidth, 200), height: 160 }));
      observer.observe(box.value);
    });
    Vue.watch(() => props.data, (data) => {
      if (!plot) return;
      plot.setData(data);
      fitTime();
    });
    // Colours follow the theme; legend labels and axis times follow the language.
    Vue.watch(() => [state.theme, locale.value, props.days, props.series.map((item) => item.label).join("\n")], build);
    Vue.onUnmounted(() => {
      if (observer) observer.disconnect();
      if (plot) plot.destroy();
    });
    // Time runs left to right in every language, and the axis labels are quantities.
    return () => html`<div class="chart" dir="ltr" ref=${box} role="img" aria-label=${props.label}></div>`;
  },
};
