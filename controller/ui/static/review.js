// Review comments: a comment on a line of a diff (or on a whole file) is kept here until "Send review" posts
// them all, as one follow-up, to POST /v1/sessions/{id}/comments. The server writes the message from the
// session's own diff (it quotes each line's hunk as the agent's data, fenced), so the page sends only where
// each comment points and what the user wrote: nothing it sends can pass the agent's text off as the user's.
import { post, sessionPath, ApiError } from "./api.js";
import { el, replace, setText } from "./dom.js";

export function mountReview(id, onSent, stillShown = async () => true) {
  // Each comment keeps ``seen``: the change as the page showed it when the comment was written.
  const pending = [];
  const list = el("ol", { class: "review-list", testid: "review-list" });
  const send = el("button", { type: "button", testid: "send-review" }, "Send review");
  const clear = el("button", { type: "button", class: "danger", testid: "clear-review" }, "Drop comments");
  const message = el("p", { class: "notice", testid: "review-message", hidden: true });
  const box = el("div", { class: "review", testid: "review", hidden: true },
    el("strong", {}, "Review comments"), el("span", { class: "muted small" },
      " — sent together as the next follow-up, each with the lines it is about quoted from the session's diff"),
    list, el("div", { class: "actions" }, send, clear));
  let running = false;

  function say(text, isError = false) {
    setText(message, text);
    message.className = isError ? "error" : "notice";
    message.hidden = !text;
  }

  function draw() {
    replace(list, ...pending.map((c, i) => {
      const drop = el("button", { type: "button", class: "linkish", testid: "review-drop" }, "remove");
      drop.addEventListener("click", () => { pending.splice(i, 1); draw(); });
      return el("li", { testid: "review-item" }, el("span", { class: "mono" }, where(c)), " ",
        el("span", { class: "review-text", testid: "review-text" }, c.text), " ", drop);
    }));
    box.hidden = pending.length === 0;
    send.textContent = `Send review (${pending.length})`;
    send.disabled = running || pending.length === 0;
  }

  send.addEventListener("click", async () => {
    say("");
    send.disabled = true;
    try {
      // The lines commented on must still be the ones the page shows: another turn may have changed them.
      if (!(await stillShown(pending))) {
        say("Not sent: the changes moved since this page showed them (another turn ran); they are shown anew, "
          + "check your comments' lines and send again.", true);
        return;
      }
      // Each comment names its change by id too: the server quotes that change, whatever its name prints as.
      await post(`${sessionPath(id)}/comments`, { comments: pending.map(({ path, id: change, line, side, text }) =>
        ({ path, ...(change ? { id: change } : {}), ...(line === undefined ? {} : { line, side }), text })) });
      pending.length = 0;
      say("Review sent as the next follow-up.");
      onSent();
    } catch (err) {
      say(`Sending the review failed: ${err instanceof ApiError ? `${err.status}: ${err.message}` : err}`, true);
    } finally {
      draw();
    }
  });
  clear.addEventListener("click", () => { pending.length = 0; draw(); });

  /** A form for a comment on ``path`` (the change ``change``, an id, when known; at ``line`` of ``side``, when
   *  given); added to the review on submit. */
  function form(path, line, side, done, seen = null, change = null) {
    const text = el("textarea", { rows: 2, testid: "comment-text", name: "comment", required: true,
      placeholder: "Your comment for the agent" });
    const add = el("button", { type: "submit", testid: "comment-add" }, "Add to review");
    const cancel = el("button", { type: "button", class: "danger", testid: "comment-cancel" }, "Cancel");
    const node = el("form", { class: "comment-form", testid: "comment-form" },
      el("div", { class: "muted small" }, where({ path, line, side })), text, el("div", { class: "actions" }, add, cancel));
    node.addEventListener("submit", (e) => {
      e.preventDefault();
      if (!text.value.trim()) return;
      pending.push({ path, id: change, line, side, text: text.value, seen });
      node.remove();
      draw();
      done();
    });
    cancel.addEventListener("click", () => { node.remove(); done(); });
    setTimeout(() => text.focus(), 0);
    return node;
  }

  function setRunning(value) {
    running = value;
    draw();
  }

  draw();
  return { box, message, form, setRunning };
}

function where(c) {
  if (c.line === undefined) return `${c.path} (whole file)`;
  return `${c.path}:${c.line}${c.side === "old" ? " (removed line)" : ""}`;
}
