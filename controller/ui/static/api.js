// Talking to the server: same-origin fetch with the sign-in cookie (never a token in JS).

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
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 204) return null;
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
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body === undefined ? {} : body);

export const sessionPath = (id) => `/v1/sessions/${encodeURIComponent(id)}`;
