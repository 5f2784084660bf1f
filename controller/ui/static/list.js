// The sessions list (#/): newest first, polled every 2 s, and the form that starts a session.
import { get, post, ApiError } from "./api.js";
import { el, replace, setText, visible, fmtAge, fmtTokens, totalTokens, firstLine, statusBadge, sessionWhere } from "./dom.js";

const POLL_MS = 2000;

export function openSession(id) {
  location.hash = `#/sessions/${encodeURIComponent(id)}`;
}

export function showList(view) {
  const body = el("tbody", { testid: "sessions-body" });
  const total = el("span", { class: "muted", testid: "sessions-total" });
  const problem = el("p", { class: "error", testid: "list-error", hidden: true });
  const table = el("table", { class: "sessions", testid: "sessions-table" },
    el("thead", {}, el("tr", {}, ...["Status", "Repository", "Task", "Steps", "Tokens", "Started", ""].map((h) => el("th", {}, h)))),
    body);
  replace(view,
    startForm(),
    el("section", { class: "card" },
      el("div", { class: "section-head" }, el("h2", {}, "Sessions"), total),
      problem,
      table));

  let timer = null;
  let stopped = false;
  let shown = null; // rows are rebuilt only when the sessions changed; ages are updated in place
  async function refresh() {
    try {
      const page = await get("/v1/sessions?limit=100");
      if (stopped) return;
      problem.hidden = true;
      total.textContent = `${page.total} in all`;
      const key = JSON.stringify(page.items);
      if (key !== shown) {
        shown = key;
        replace(body, ...(page.items.length ? page.items.map(row) : [emptyRow()]));
      } else {
        for (const cell of body.querySelectorAll("td.age")) cell.textContent = fmtAge(Number(cell.dataset.ts));
      }
    } catch (err) {
      if (stopped) return;
      setText(problem, `Could not list sessions: ${err.message}`);
      problem.hidden = false;
    }
    if (!stopped) timer = setTimeout(refresh, POLL_MS);
  }
  refresh();
  return { stop() { stopped = true; clearTimeout(timer); } };
}

function emptyRow() {
  return el("tr", {}, el("td", { class: "muted", colSpan: 7, testid: "no-sessions" }, "No sessions yet."));
}

const lastTwo = (path) => path.split("/").slice(-2).join("/");

function row(s) {
  const where = sessionWhere(s);
  const open = el("button", { type: "button", class: "linkish", testid: "open-session" }, "Open");
  open.addEventListener("click", () => openSession(s.id));
  const tr = el("tr", { class: "session-row", testid: "session-row", dataset: { sessionId: s.id } },
    el("td", {}, statusBadge(s.status, "session-status"),
      s.finish_reason ? el("span", { class: "muted small", testid: "session-finish" }, ` ${s.finish_reason}`) : null),
    el("td", { class: "mono", testid: "session-repo", title: visible(where) }, lastTwo(where)),
    el("td", { testid: "session-task" }, firstLine(s.task)),
    el("td", { class: "num", testid: "session-steps" }, String(s.steps)),
    el("td", { class: "num", testid: "session-tokens" }, fmtTokens(totalTokens(s.usage))),
    el("td", { class: "muted age", title: new Date(s.created_at * 1000).toLocaleString(),
      dataset: { ts: String(s.created_at) } }, fmtAge(s.created_at)),
    el("td", {}, open));
  tr.addEventListener("dblclick", () => openSession(s.id));
  return tr;
}

function startForm() {
  const repo = el("select", { id: "new-repo", name: "repo", required: true, testid: "new-repo" });
  const task = el("textarea", { id: "new-task", name: "task", rows: 3, required: true, testid: "new-task",
    placeholder: "What should the agent do?" });
  const model = el("input", { id: "new-model", name: "model", testid: "new-model", placeholder: "server default" });
  const steps = el("input", { id: "new-steps", name: "max_steps", type: "number", min: 1, max: 10000,
    testid: "new-max-steps", placeholder: "default" });
  const network = el("select", { id: "new-network", name: "network", testid: "new-network" },
    el("option", { value: "" }, "server default"),
    el("option", { value: "none" }, "none (loopback only)"),
    el("option", { value: "open" }, "open"));
  const error = el("p", { class: "error", testid: "new-error", hidden: true });
  const submit = el("button", { type: "submit", testid: "new-submit" }, "Start session");
  const form = el("form", { class: "card new-session", testid: "new-session-form" },
    el("h2", {}, "Start a session"),
    el("div", { class: "grid" },
      el("label", { htmlFor: "new-repo" }, "Repository"), repo,
      el("label", { htmlFor: "new-task" }, "Task"), task,
      el("label", { htmlFor: "new-model" }, "Model"), model,
      el("label", { htmlFor: "new-steps" }, "Max steps"), steps,
      el("label", { htmlFor: "new-network" }, "Network"), network),
    el("div", { class: "actions" }, submit),
    error);

  get("/v1/repos").then((data) => {
    if (!data.repos.length) {
      replace(repo, el("option", { value: "" }, `no repositories under ${data.roots.join(", ") || "any root"}`));
      return;
    }
    // The server names the one to offer first (never Cubicle's own checkout); without one, the user picks.
    const placeholder = data.default ? null : el("option", { value: "" }, "choose a repository");
    replace(repo, placeholder, ...data.repos.map((path) => el("option", { value: path }, path)));
    repo.value = data.default || "";
  }).catch((err) => {
    setText(error, `Could not list repositories: ${err.message}`);
    error.hidden = false;
  });

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    error.hidden = true;
    const body = { repo: repo.value, task: task.value };
    if (model.value.trim()) body.model = model.value.trim();
    const limits = {};
    if (steps.value) limits.max_steps = Number(steps.value);
    if (network.value) limits.network = network.value;
    if (Object.keys(limits).length) body.limits = limits;
    submit.disabled = true;
    try {
      const created = await post("/v1/sessions", body);
      openSession(created.id);
    } catch (err) {
      setText(error, err instanceof ApiError ? `Refused (${err.status}): ${err.message}` : String(err));
      error.hidden = false;
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}
