// The vendored libraries, imported in one place: the version in each file name is the
// version in use, and scripts/vendor-assets is how they got here. The chart and QR code
// libraries load on first use, so pages without them do not wait for them.
import * as Vue from "../vendor/vue-3.5.45.runtime.esm-browser.prod.js";
import htm from "../vendor/htm-3.1.1.mjs";

// Templates are htm tagged templates calling Vue's h(): no compiler, no 'unsafe-eval'.
export const html = htm.bind(Vue.h);
export { Vue };

export const loadUPlot = () => import("../vendor/uplot-1.6.32.esm.js").then((m) => m.default);

const utf8 = new TextEncoder();
export const loadQrcode = () =>
  import("../vendor/qrcode-generator-2.0.4.mjs").then((m) => {
    // Share links may hold non-ASCII remarks: encode them as UTF-8 bytes.
    m.default.stringToBytes = (text) => Array.from(utf8.encode(text));
    return m.default;
  });
