// The viewer's entry point: sign-in, then a tiny hash router over three views.
import { get, post, setPageKey, setUnauthorizedHandler, ApiError } from "./api.js";
import { el, replace, setText } from "./dom.js";
import { showList } from "./list.js";
import { showSession } from "./session.js";

const view = document.getElementById("view");
const signOut = document.getElementById("sign-out");
let current = null; // the mounted view's { stop() }
let auth = { mode: "loopback", signed_in: true };

function unmount() {
  if (current && current.stop) current.stop();
  current = null;
}

async function route() {
  unmount();
  if (auth.mode === "token" && !auth.signed_in) {
    showSignIn();
    return;
  }
  const hash = location.hash || "#/";
  const session = /^#\/sessions\/([A-Za-z0-9_-]+)(\/changes)?$/.exec(hash);
  if (session) current = showSession(view, session[1], { changesOnly: Boolean(session[2]) });
  else current = showList(view);
}

function showSignIn() {
  const token = el("input", { type: "password", name: "token", id: "token", autocomplete: "current-password",
    required: true, testid: "token-input" });
  const error = el("p", { class: "error", testid: "sign-in-error", hidden: true });
  const form = el("form", { class: "card sign-in", testid: "sign-in-form" },
    el("h1", {}, "Sign in"),
    el("p", { class: "muted" }, "Paste the server's API token (CUBICLE_API_TOKEN). It is sent once; the browser keeps a signed cookie and a key for it, not the token."),
    el("label", { htmlFor: "token" }, "Token"),
    token,
    el("button", { type: "submit", testid: "sign-in" }, "Sign in"),
    error);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    error.hidden = true;
    try {
      const signedIn = await post("/ui/login", { token: token.value });
      token.value = "";
      setPageKey(signedIn && signedIn.key);
      auth = await get("/ui/auth");
      updateSignOut();
      route();
    } catch (err) {
      setText(error, err instanceof ApiError ? err.message : String(err));
      error.hidden = false;
    }
  });
  replace(view, form);
  token.focus();
}

function updateSignOut() {
  signOut.hidden = !(auth.mode === "token" && auth.signed_in);
}

signOut.addEventListener("click", async () => {
  await post("/ui/logout").catch(() => null);
  setPageKey(null);
  auth = { mode: "token", signed_in: false };
  updateSignOut();
  route();
});

setUnauthorizedHandler(() => {
  if (auth.mode === "token" && auth.signed_in) {
    setPageKey(null);
    auth = { mode: "token", signed_in: false };
    updateSignOut();
    route();
  }
});

async function start() {
  try {
    auth = await get("/ui/auth");
  } catch (err) {
    replace(view, el("p", { class: "error" }, `Cannot reach the server: ${err.message}`));
    return;
  }
  updateSignOut();
  window.addEventListener("hashchange", route);
  route();
}

start();
