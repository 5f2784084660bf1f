// Talking to the server: same-origin fetch with the sign-in cookie (HttpOnly: never readable here) and
// the page key that goes with it. Browsers send a host's cookies to all of its ports, so a server on
// another port of the same host receives the cookie; the key stays in this origin's storage, which
// that server cannot read, and the API wants both. The API token itself is never kept.

const KEY = "cubicle.key";

export function setPageKey(key) {
  if (key) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

function pageKey() {
  return localStorage.getItem(KEY) || "";
}

/** A URL for what cannot send a header (EventSource): the page key goes in its query. */
export function withKey(path) {
  const key = pageKey();
  if (!key) return path;
  return `${path}${path.includes("?") ? "&" : "?"}key=${encodeURIComponent(key)}`;
}

export class ApiError extends Error {
  constructor(status, body) {
    const detail = body && body.detail !== undefined ? body.detail : `HTTP ${status}`;
    super(typeof detail === "string" ? detail : JSON.stringify(detail));
    this.status = status;
    this.body = body;
  }
}

let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

export async function request(method, path, body) {
  return (await send(method, path, body)).data;
}

// A GET's parsed body and the values of some response headers (null when absent).
export async function getWithHeaders(path, ...names) {
  const { data, response } = await send("GET", path);
  return [data, ...names.map((name) => response.headers.get(name))];
}

/** A GET's body as text (a patch): the key and cookie as for JSON, an error's detail read from its JSON body. */
export async function getText(path) {
  const response = await fetch(path, { credentials: "same-origin", headers: headers("text/x-patch, application/json") });
  const text = await response.text();
  if (!response.ok) {
    let data = null;
    try { data = JSON.parse(text); } catch { data = { detail: text }; }
    throw new ApiError(response.status, data);
  }
  return text;
}

function headers(accept) {
  const key = pageKey();
  return key ? { Accept: accept, "X-Cubicle-Key": key } : { Accept: accept };
}

async function send(method, path, body) {
  const init = { method, credentials: "same-origin", headers: headers("application/json") };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 204) return { data: null, response };
  let data = null;
  const text = await response.text();
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { detail: text };
  }
  if (!response.ok) {
    if (response.status === 401 && !path.startsWith("/ui/")) onUnauthorized();
    throw new ApiError(response.status, data);
  }
  return { data, response };
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body === undefined ? {} : body);

export const sessionPath = (id) => `/v1/sessions/${encodeURIComponent(id)}`;
