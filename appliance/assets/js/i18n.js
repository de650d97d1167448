// Translations: every visible string goes through t(key, params). en.json is complete and
// is the fallback; the other languages are loaded when chosen. Persian turns the page
// right-to-left through <html dir>. A text that depends on a number is an object of CLDR
// plural forms ({"one": ..., "other": ...}; Russian adds "few" and "many"), picked by
// params.count with the language's own rules.
import { Vue } from "./lib.js";

export const LOCALES = [
  { code: "en", name: "English", dir: "ltr" },
  { code: "fa", name: "فارسی", dir: "rtl" },
  { code: "ru", name: "Русский", dir: "ltr" },
  { code: "zh", name: "简体中文", dir: "ltr" },
];
const STORAGE_KEY = "panel.locale";
const messages = Vue.shallowReactive({});
const loading = {};
export const locale = Vue.ref("en");

async function fetchMessages(code) {
  const response = await fetch(`assets/i18n/${code}.json`);
  if (!response.ok) throw new Error(`language file ${code}.json: HTTP ${response.status}`);
  messages[code] = await response.json();
}

// One request per language, even when asked twice at once; a failed one may be retried.
function load(code) {
  loading[code] ||= fetchMessages(code).catch((error) => {
    delete loading[code];
    throw error;
  });
  return loading[code];
}

export async function setLocale(code) {
  const known = LOCALES.find((entry) => entry.code === code) || LOCALES[0];
  // English (the fallback) and the chosen language side by side, not one after the other.
  await Promise.all([load("en"), load(known.code)]);
  locale.value = known.code;
  document.documentElement.lang = known.code;
  document.documentElement.dir = known.dir;
  localStorage.setItem(STORAGE_KEY, known.code);
}

export function initialLocale() {
  const saved = localStorage.getItem(STORAGE_KEY);
  if (saved) return saved;
  const wanted = (navigator.language || "en").slice(0, 2).toLowerCase();
  return LOCALES.some((entry) => entry.code === wanted) ? wanted : "en";
}

function pluralForm(forms, code, count) {
  const category = new Intl.PluralRules(code).select(Number(count) || 0);
  return forms[category] ?? forms.other;
}

export function t(key, params) {
  const own = (messages[locale.value] || {})[key];
  const code = own === undefined ? "en" : locale.value;
  let text = own ?? (messages.en || {})[key] ?? key;
  if (typeof text === "object") text = pluralForm(text, code, params && params.count);
  if (params) {
    for (const [name, value] of Object.entries(params)) {
      text = text.replaceAll(`{${name}}`, String(value));
    }
  }
  return text;
}
