// Calls to the panel API. Paths are relative to <base href>, so the base path is never
// written here. Cookie sessions send X-CSRF-Token on unsafe requests. A failure envelope
// becomes a toast with its msg and a rejected promise: no error passes silently.
import { t } from "./i18n.js";
import { apiUrl, takePrefetched } from "./prefetch.js";
import { dismissToasts, state, toast } from "./state.js";

let csrfToken = "";
let csrfReady = Promise.resolve();

export class ApiError extends Error {
  constructor(message, status, reply = null) {
    super(message);
    this.status = status;
    // The failure envelope as sent, for routes that add fields to it (testSmtp's stage).
    this.reply = reply;
  }
}

export function setCsrfToken(token) {
  csrfToken = token;
}

// Unsafe requests wait for the session's CSRF token while it is being fetched, so pages
// can load their data without waiting for it.
export function awaitCsrfToken(promise) {
  csrfReady = promise.catch(() => {});
}

export async function request(method, path, options = {}) {
  const url = apiUrl(path, options.query);
  const headers = {};
  let body;
  if (options.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.json);
  } else if (options.form) {
    body = new URLSearchParams(options.form);
  } else if (options.upload) {
    body = options.upload; // FormData: the browser writes the multipart boundary itself
  }
  if (method !== "GET") {
    await csrfReady;
    if (csrfToken) headers["X-CSRF-Token"] = csrfToken;
  }
  let response;
  const early = method === "GET" ? takePrefetched(url) : undefined;
  try {
    response = await (early || fetch(url, { method, headers, body, credentials: "same-origin" }));
  } catch (error) {
    return fail(t("error.network"), 0, { ...options, path });
  }
  let reply;
  try {
    reply = await response.json();
  } catch (error) {
    return fail(t("error.badReply", { status: response.status }), response.status, { ...options, path });
  }
  if (!reply.success) {
    if (response.status === 401 && state.signedIn && !options.signIn) state.signedIn = false;
    return fail(reply.msg || t("error.unknown"), response.status, { ...options, path }, reply);
  }
  // The call went through: what its earlier failures said no longer holds.
  dismissToasts(actionKey(path));
  return reply;
}

// The toast key of a call: its path (an object's id included), so a later success of
// the same action clears the error of an earlier try.
function actionKey(path) {
  return `api:${path}`;
}

function fail(message, status, options, reply = null) {
  if (!options.quiet) toast(message, "error", "", options.path ? actionKey(options.path) : "");
  throw new ApiError(message, status, reply);
}

export const api = {
  get: async (path, options = {}) => (await request("GET", path, options)).obj,
  post: async (path, json, options = {}) => (await request("POST", path, { ...options, json })).obj,
  postForm: async (path, form, options = {}) =>
    (await request("POST", path, { ...options, form })).obj,
  upload: async (path, formData, options = {}) =>
    (await request("POST", path, { ...options, upload: formData })).obj,
};
