// The first page of clients, asked for before the application has loaded. index.html runs
// this module on its own (async, no imports), so on a signed-in visit to panel/clients
// the paged call starts with the HTML instead of after every script, the translations and
// the first render: on a large install that call is most of the wait. api.js hands the
// answer to the page's first identical GET; leaving the page drops it unused.
const prefetched = new Map();

// The clients page's query before the user touches it; the page starts from it too, so
// the address asked for here is the one its first load asks for.
export function initialClientQuery() {
  return {
    search: "", filter: "", group: "", sort: "email", order: "ascend", page: 1,
    pageSize: Number(localStorage.getItem("panel.pageSize")) || 25,
  };
}

// The address of an API call: `path` under <base href>, with the non-empty query values.
export function apiUrl(path, query = {}) {
  const url = new URL(path, document.baseURI);
  for (const [key, value] of Object.entries(query)) {
    if (value !== "" && value !== undefined && value !== null) url.searchParams.set(key, value);
  }
  return url;
}

// The response already under way for `url`, at most once; undefined when there is none.
export function takePrefetched(url) {
  const response = prefetched.get(url.href);
  prefetched.delete(url.href);
  return response;
}

export function dropPrefetched() {
  prefetched.clear();
}

function start() {
  if (document.documentElement.dataset.session !== "1") return;
  const base = new URL(document.baseURI).pathname;
  if (location.pathname !== `${base}panel/clients`) return;
  const url = apiUrl("panel/api/clients/list/paged", initialClientQuery());
  const response = fetch(url, { credentials: "same-origin" });
  response.catch(() => {}); // a failure is the page's to report, when it takes the response
  prefetched.set(url.href, response);
}

start();
