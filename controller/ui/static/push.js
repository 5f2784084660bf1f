// Pushing a remote session's changes to its remote as a new branch (POST …/push): the branch (under the server's
// prefix), an optional message, the lease (naming the commit this page last pushed to the branch, when it did),
// and the held-back paths ticked in the change list. The answer (the branch, the commit, what was left out) and
// each refusal are shown as text: all of it is the remote's or the session's words.
import { get, post, sessionPath, ApiError } from "./api.js";
import { el, replace, setText } from "./dom.js";

/** What each refusal means, by its status; the server's own detail follows. */
const REFUSALS = new Map([
  [409, "Not pushed: the branch exists or moved at the remote, the remote declined it, or a turn is running. "
    + "Tick “Replace the branch” to replace it if it still names what a fetch finds there."],
  [422, "Refused before anything was sent: the branch name, the message or the changes cannot be pushed."],
  [424, "The remote failed: it refused the credentials, could not be reached, or has no repository there."],
]);

/** The push form; ``forced()`` is the held-back paths ticked to push too, ``onPushed`` runs after each try. */
export function mountPush(id, forced, onPushed) {
  const branch = el("input", { type: "text", name: "branch", testid: "push-branch", required: true,
    autocomplete: "off", title: "The new branch at the remote, under the server's prefix" });
  const message = el("textarea", { name: "message", rows: 2, testid: "push-message",
    placeholder: "Commit message (default: the task's first line)" });
  const lease = el("input", { type: "checkbox", name: "force_with_lease", testid: "push-lease" });
  const ticked = el("span", { class: "muted small", testid: "push-forced" }, "");
  const expecting = el("span", { class: "muted small", testid: "push-expected" }, "");
  const button = el("button", { type: "submit", testid: "push" }, "Push branch");
  const outcome = el("div", { class: "push-outcome", testid: "push-outcome", hidden: true });
  const box = el("form", { class: "push-form", testid: "push-form", hidden: true },
    el("label", { class: "push-field" }, "Branch ", branch),
    el("label", { class: "push-field" }, "Message ", message),
    el("div", { class: "actions" }, button,
      el("label", { class: "toggle" }, lease, " Replace the branch if it exists (force with lease)"), expecting,
      ticked),
    outcome);
  const pushed = new Map(); // branch → the commit this page last pushed there: the lease's expected commit
  let running = false;
  let pushing = false;
  let prefilled = false;

  function update() {
    button.disabled = running || pushing;
    const paths = forced();
    setText(ticked, paths.length ? `also pushes ${paths.length} held-back path(s) ticked below` : "");
    const expected = expectedFor(branch.value.trim());
    setText(expecting, expected ? `only if it still names ${expected.slice(0, 12)}, this page's last push` : "");
  }

  /** With the lease, the commit this page last pushed to ``name`` (the remote replaces the branch only if it
   *  still names it, so a push someone made after ours is never lost); none otherwise. */
  function expectedFor(name) {
    return lease.checked ? pushed.get(name) : undefined;
  }
  lease.addEventListener("change", update);
  branch.addEventListener("input", update);

  /** The branch field starts as the server's prefix and the session's id (once; what the user typed stays). */
  async function prefill() {
    if (prefilled) return;
    prefilled = true;
    let prefix = "cubicle/";
    try {
      prefix = (await get("/v1/repos")).branch_prefix || prefix;
    } catch { /* the default prefix; a wrong one is refused with a 422 that names the right one */ }
    if (!branch.value) branch.value = `${prefix}${id}`;
  }

  box.addEventListener("submit", async (e) => {
    e.preventDefault();
    pushing = true;
    update();
    const body = { branch: branch.value.trim(), force: forced(), force_with_lease: lease.checked };
    if (message.value.trim()) body.message = message.value;
    if (expectedFor(body.branch)) body.expected = expectedFor(body.branch);
    show(el("p", { class: "muted" }, `Pushing ${body.branch}…`), "pending");
    try {
      shown(await post(`${sessionPath(id)}/push`, body));
    } catch (err) {
      refused(err);
    } finally {
      pushing = false;
      update();
      onPushed();
    }
  });

  function show(node, state) {
    replace(outcome, node);
    delete outcome.dataset.status;
    outcome.dataset.state = state;
    outcome.hidden = false;
  }

  function shown(result) {
    pushed.set(result.branch, result.commit);
    const left = Array.isArray(result.left) ? result.left : [];
    show(el("div", { class: "notice" },
      el("p", { testid: "push-done" }, "Pushed ", el("span", { class: "mono", testid: "push-result-branch" },
        result.branch), ` (${result.status}): commit `,
      el("span", { class: "mono", testid: "push-result-commit" }, result.commit), ` at ${result.url}, `
        + `${result.written} path(s) written.`),
      left.length ? el("p", { class: "muted" }, "Left out:") : null,
      left.length ? el("ul", { class: "push-left" }, ...left.map((line) => el("li", { testid: "push-left" }, line)))
        : null), "done");
  }

  function refused(err) {
    const status = err instanceof ApiError ? err.status : 0;
    const meaning = REFUSALS.get(status) || "The push failed.";
    const node = el("div", { class: "error" },
      el("p", { testid: "push-error" }, status ? `${status}: ${meaning}` : meaning),
      el("p", { class: "mono", testid: "push-error-detail" }, err instanceof ApiError ? err.message : String(err)));
    show(node, "error");
    outcome.dataset.status = String(status);
  }

  return {
    box,
    update,
    setRunning(value) { running = value; update(); },
    setShown(value) {
      box.hidden = !value;
      if (value) prefill();
    },
  };
}
