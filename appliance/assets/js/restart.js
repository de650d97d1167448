// Following the panel to the address it answers at after a restart that moves it (a new
// base path, port or certificate). The settings save answer says where that is; after
// "Restart panel" the page waits for the panel to answer there, then goes there, instead
// of staying on an address that no longer answers.
import { t } from "./i18n.js";
import { closeSocket } from "./socket.js";
import { toast } from "./state.js";

const POLL_MS = 1000;
const GIVE_UP_MS = 90_000;
// A move to another origin cannot be watched from here (the page may only connect to its
// own origin): the page waits for this one to go down, then gives the new one this long.
const OTHER_ORIGIN_GRACE_MS = 5000;

// The Settings page at `target` ({scheme, port, basePath}) on this page's host.
function addressAfterRestart(target) {
  const url = new URL(location.href);
  url.protocol = `${target.scheme}:`;
  url.port = String(target.port);
  url.pathname = `${target.basePath}panel/settings`;
  url.search = "";
  url.hash = "";
  return url;
}

// Whether the restart moves the panel away from this page's address.
export function restartMoves(target) {
  const here = new URL(document.baseURI);
  return here.origin !== addressAfterRestart(target).origin || here.pathname !== target.basePath;
}

export async function followRestart(target) {
  const url = addressAfterRestart(target);
  toast(t("settings.movingTo", { url: url.href }), "warning");
  closeSocket();
  if (url.origin === location.origin) {
    await until(() => answersWithThePage(url));
  } else {
    await until(async () => !(await answersWithThePage(new URL(location.href))));
    await sleep(OTHER_ORIGIN_GRACE_MS);
  }
  location.assign(url.href);
}

async function answersWithThePage(url) {
  try {
    const response = await fetch(url, { cache: "no-store", credentials: "same-origin" });
    return response.ok && (response.headers.get("Content-Type") || "").startsWith("text/html");
  } catch (error) {
    return false;
  }
}

async function until(check) {
  const deadline = Date.now() + GIVE_UP_MS;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(POLL_MS);
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
