// A session's changes: the files with their dispositions and diffs (highlighted, unified or side by side, with
// a list of files to jump to), and the actions on them (apply all or the files ticked, revert, discard, rewind
// to a checkpoint, review comments on lines). A refused apply shows its conflicts. A session on a git remote
// offers its patch and a push (push.js) instead of apply and revert.
import { get, getText, getWithHeaders, post, sessionPath, ApiError } from "./api.js";
import { el, replace, setText } from "./dom.js";
import { highlightRows, onLineClick, parseDiff, sideBySideView, unifiedView } from "./diff.js";
import { budget } from "./highlight.js";
import { mountPush } from "./push.js";
import { mountReview } from "./review.js";

const DISPOSITIONS = new Set(["apply", "ignored", "discarded", "unsafe", "environment", "trusted", "build_input"]);
const KINDS = new Set(["added", "modified", "deleted"]);

const LAYOUT = "cubicle.diffLayout";

export function mountChanges(box, id, onChanged, unreverted = () => 0) {
  const summary = el("span", { class: "muted", testid: "changes-summary" }, "loading…");
  const list = el("div", { class: "change-list", testid: "change-list" });
  const message = el("p", { class: "notice", testid: "changes-message", hidden: true });
  const conflicts = el("div", { class: "conflicts", testid: "conflicts", hidden: true });
  const appliedList = el("ul", { class: "applied-list", testid: "applied-list", hidden: true });
  const files = el("ul", { class: "file-list", testid: "file-list", hidden: true });
  const applyBtn = el("button", { type: "button", testid: "apply" }, "Apply to checkout");
  const applySelectedBtn = el("button", { type: "button", testid: "apply-selected", disabled: true }, "Apply selected");
  const sideBySide = el("input", { type: "checkbox", testid: "side-by-side",
    checked: localStorage.getItem(LAYOUT) === "side-by-side" });
  const revertBtn = el("button", { type: "button", testid: "revert" }, "Revert last apply");
  const discardBtn = el("button", { type: "button", class: "danger", testid: "discard" }, "Discard changes");
  const turn = el("select", { testid: "rewind-turn", name: "turn" });
  const rewindBtn = el("button", { type: "button", testid: "rewind" }, "Rewind");
  // Paths of a build context the Dockerfile copies whole are applied only with one acknowledgement for all.
  const buildBox = el("input", { type: "checkbox", testid: "build-inputs" });
  const buildAck = el("p", { class: "notice", testid: "build-inputs-note", hidden: true },
    el("label", {}, buildBox, " Also apply the build inputs: ", el("span", { testid: "build-inputs-count" }, ""),
      " in the environment's build context, which its Dockerfile copies whole. The next environment build runs "
      + "this repository's files as root."));
  // A session on a git remote has no checkout to apply to: its changes leave as a patch (or a pushed branch).
  const patchBtn = el("button", { type: "button", testid: "patch", hidden: true }, "Download patch");
  const buttons = [applyBtn, applySelectedBtn, revertBtn, discardBtn, rewindBtn, patchBtn];
  const review = mountReview(id, onChanged, (comments) => stillShown(comments));
  const selected = new Set(); // the ids of the changes ticked for "Apply selected": an id means one change,
  // whatever its name prints as (two names may print alike to the eye; the server refuses a name that reads as two)
  const forced = new Set(); // the held-back paths ticked to push too: the API takes them by their exact names
  const push = mountPush(id, () => [...forced], () => { refresh(); onChanged(); });
  let running = false;
  let remote = false; // the session works on a git remote's tree: nothing is applied
  let changes = []; // the listing last loaded
  let applying = 0; // what a plain apply would write, as last listed
  let pending = null;
  let shown = null; // what the list was last built from: unchanged data leaves the DOM (and open diffs) alone
  const drawnRows = new Map(); // each listed diff's rows, highlighted once (diffView)

  replace(box,
    el("div", { class: "section-head" }, el("h2", {}, "Changes"), summary),
    el("div", { class: "actions" }, applyBtn, applySelectedBtn, revertBtn, patchBtn, discardBtn,
      el("label", { class: "toggle" }, sideBySide, " side by side"),
      el("span", { class: "rewind" }, el("label", {}, "to turn ", turn), rewindBtn)),
    push.box, buildAck, message, appliedList, conflicts, review.box, review.message, files, list);

  function say(text, isError = false) {
    setText(message, text);
    message.className = isError ? "error" : "notice";
    message.hidden = !text;
  }

  /** Whether the changes are still as the page showed them: every change (``seen`` null), those of the ids
   *  given, or each review comment's as it was when written (``{path, seen}``). Another turn (a CLI, an MCP
   *  client, another tab) may have changed them while this page sat idle; if so, they are shown anew. */
  async function stillShown(seen) {
    const now = await get(`${sessionPath(id)}/changes?diff=true`);
    const after = spelled(now);
    const before = spelled(changes);
    const [afterById, beforeById] = [spelled(now, byId), spelled(changes, byId)];
    const same = seen === null
      ? before.size === after.size && [...before].every(([p, c]) => after.get(p) === c)
      : seen.every((item) => (typeof item === "string"
        ? beforeById.get(item) === afterById.get(item) : item.seen === after.get(item.path)));
    if (!same) await refresh();
    return same;
  }

  async function act(label, path, body) {
    say("");
    conflicts.hidden = true;
    buttons.forEach((b) => { b.disabled = true; });
    try {
      if (path === "apply" && !(await stillShown(body.ids || null))) {
        say(`${label} not done: the changes moved since this page showed them (another turn ran); they are shown `
          + "anew, review them and apply again.", true);
        return;
      }
      const result = await post(`${sessionPath(id)}/${path}`, body);
      say(describe(label, result));
      showApplied(result);
    } catch (err) {
      if (err instanceof ApiError && err.body && Array.isArray(err.body.conflicts) && err.body.conflicts.length) {
        showConflicts(err.body.conflicts, body);
        say(`${label} refused: ${err.message}`, true);
      } else {
        say(`${label} failed: ${err instanceof ApiError ? `${err.status}: ${err.message}` : err}`, true);
      }
    } finally {
      setRunning(running);
      await refresh();
      onChanged();
    }
  }

  function showApplied(result) {
    // What an apply wrote stays in view (it left the session's list): its paths, marked applied.
    if (!result || !Array.isArray(result.applied)) return;
    const more = result.more_applied ? [el("li", { class: "muted" }, `… and ${result.more_applied} more`)] : [];
    replace(appliedList, ...result.applied.map((path) => el("li", { testid: "applied-path" },
      el("span", { class: "mono" }, path), " ", el("span", { class: "badge disp-apply" }, "applied"))), ...more);
    appliedList.hidden = false;
  }

  function updateButtons() {
    applyBtn.disabled = running || applying === 0;
    applySelectedBtn.disabled = running || selected.size === 0;
    applySelectedBtn.textContent = selected.size ? `Apply selected (${selected.size})` : "Apply selected";
    revertBtn.disabled = running || unreverted() === 0;
    discardBtn.disabled = running;
    rewindBtn.disabled = running || !turn.options.length;
  }

  function showConflicts(items, asked) {
    const force = el("button", { type: "button", class: "danger", testid: "apply-force" },
      "Overwrite these paths and apply");
    force.addEventListener("click", () => act("Apply", "apply", { ...asked, force: items.map((c) => c.path) }));
    replace(conflicts,
      el("strong", {}, `Nothing was written: ${items.length} path(s) changed in the checkout since the session began`),
      el("ul", {}, ...items.map((c) => el("li", { testid: "conflict" },
        el("span", { class: "mono", testid: "conflict-path" }, c.path), " — ", c.reason))),
      el("div", { class: "actions" }, force));
    conflicts.hidden = false;
  }

  applyBtn.addEventListener("click", () => act("Apply", "apply", buildBox.checked ? { build_inputs: true } : {}));
  // Only the ticked paths are applied; the rest stays in the session for a later apply (or none).
  applySelectedBtn.addEventListener("click", () => act("Apply", "apply",
    { ids: [...selected], ...(buildBox.checked ? { build_inputs: true } : {}) }));
  sideBySide.addEventListener("change", () => {
    localStorage.setItem(LAYOUT, sideBySide.checked ? "side-by-side" : "unified");
    draw();
  });
  revertBtn.addEventListener("click", () => act("Revert", "revert", {}));
  patchBtn.addEventListener("click", async () => {
    try {
      const text = await getText(`${sessionPath(id)}/changes?format=patch`);
      // el() takes no href (a page never links to what a session wrote); this one is the page's own blob
      const link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([text], { type: "text/x-patch" }));
      link.download = `${id}.patch`;
      link.hidden = true;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 60_000); // the download reads the blob after the click
    } catch (err) {
      say(`Patch: ${err.message}`, true);
    }
  });
  discardBtn.addEventListener("click", () => {
    if (window.confirm("Drop this session's changes and checkpoints? What was applied stays.")) act("Discard", "discard");
  });
  rewindBtn.addEventListener("click", () => {
    if (turn.value) act("Rewind", "rewind", { turn: Number(turn.value) });
  });

  async function load() {
    const [[listing, truncatedAt, unlisted, unlistedApplied], checkpoints] = await Promise.all([
      getWithHeaders(`${sessionPath(id)}/changes?diff=true`, "Cubicle-Truncated-At", "Cubicle-Unlisted",
        "Cubicle-Unlisted-Applied"),
      get(`${sessionPath(id)}/checkpoints`).catch(() => []),
    ]);
    // A tick is for the diff that was ticked: a path whose change moved since is unticked (only ticked ones compared).
    const ticked = (list) => spelled(list.filter((c) => selected.has(c.id)), byId);
    const [before, after] = [ticked(changes), ticked(listing)];
    for (const [key, was] of before) if (after.has(key) && after.get(key) !== was) selected.delete(key);
    changes = listing;
    const key = JSON.stringify([changes, truncatedAt, unlisted, unlistedApplied, checkpoints]);
    applying = changes.filter((c) => c.disposition === "apply").length + (Number(unlistedApplied) || 0);
    updateButtons();
    if (key === shown) return;
    shown = key;
    const listed = changes.filter((c) => c.disposition === "apply").length;
    summary.textContent = changes.length
      ? `${changes.length} path(s), ${listed} to ${remote ? "patch and push" : "apply"}`
      : "no changes";
    // Past the session's names limit the listing stops, and the layer can only be rewound or discarded.
    const limit = Number(truncatedAt);
    summary.dataset.truncatedAt = truncatedAt || "";
    if (truncatedAt) {
      summary.textContent += ` · truncated at ${Number.isFinite(limit) ? limit.toLocaleString("en") : "?"} entries: `
        + "never applied; rewind or discard";
    } else if (Number(unlisted) > 0) {
      // The listing is bounded (what a plain apply writes first); apply still judges every change.
      const writes = Number(unlistedApplied) || 0;
      summary.textContent += ` · ${Number(unlisted).toLocaleString("en")} more not listed, `
        + (writes ? `${writes.toLocaleString("en")} of which apply writes unseen` : "none of which a plain apply writes");
    }
    summary.dataset.unlisted = unlisted || "";
    summary.dataset.count = String(changes.length);
    const building = changes.filter((c) => c.disposition === "build_input").length;
    setText(buildAck.querySelector("[data-testid=build-inputs-count]"), `${building} path(s)`);
    buildAck.hidden = remote || building === 0;
    if (!building) buildBox.checked = false;
    const present = new Set(changes.filter((c) => c.disposition === "apply").map((c) => c.id));
    for (const key of [...selected]) if (!present.has(key)) selected.delete(key);
    const held = new Set(changes.filter((c) => c.disposition === "trusted" && c.type !== "dir").map((c) => c.path));
    for (const path of [...forced]) if (!held.has(path)) forced.delete(path);
    push.update();
    draw();
    replace(turn, ...checkpoints.map((c) => el("option", { value: String(c.turn) }, `${c.turn}`)));
    updateButtons();
  }

  async function refresh() {
    // One load at a time; a refresh asked for during one runs once it ends.
    if (pending) { pending.again = true; return pending.promise; }
    pending = { again: false };
    pending.promise = (async () => {
      do {
        pending.again = false;
        try {
          await load();
        } catch (err) {
          setText(summary, `could not load changes: ${err.message}`);
        }
      } while (pending.again);
      pending = null;
    })();
    return pending.promise;
  }

  function setRunning(value) {
    running = value;
    review.setRunning(value);
    push.setRunning(value);
    updateButtons();
  }

  /** The list (and the file list above it) from the listing last loaded, in the layout chosen. */
  function draw() {
    const spend = budget();
    const listed = new Set(changes.map((c) => `${c.path}\u0000${c.diff}`));
    for (const key of [...drawnRows.keys()]) if (!listed.has(key)) drawnRows.delete(key); // only what is listed
    const views = changes.map((c) => changeView(c, {
      layout: sideBySide.checked ? "side-by-side" : "unified",
      rows: drawnRows,
      spend,
      selected: remote ? null : selected,
      forced: remote ? forced : null,
      onSelect: () => { updateButtons(); push.update(); },
      comment: (path, line, side, after) => {
        const change = changes.find((c) => c.path === path); // printed names are unique: this is the one shown
        const form = review.form(path, line, side, () => null, spelled(changes).get(path), change && change.id);
        if (after.tagName === "TR") after.after(el("tr", { class: "comment-row" }, el("td", { colSpan: 4 }, form)));
        else after.after(form);
      },
    }));
    replace(list, ...views);
    replace(files, ...changes.map((c, i) => {
      const link = el("button", { type: "button", class: "linkish mono", testid: "file-link" }, c.path);
      link.addEventListener("click", () => {
        views[i].open = true;
        views[i].scrollIntoView({ block: "start" });
      });
      return el("li", {}, link);
    }));
    files.hidden = changes.length < 2;
  }

  /** A session on a git remote: the apply and revert buttons give way to the patch and the push (the server
   *  refuses them). */
  function setRemote(isRemote) {
    if (remote === isRemote) return; // set at each refresh of the record: the list is drawn again only on a change
    remote = isRemote;
    for (const b of [applyBtn, applySelectedBtn, revertBtn]) b.hidden = remote;
    patchBtn.hidden = !remote;
    push.setShown(remote);
    if (remote) buildAck.hidden = true;
    shown = null; // the summary and the tick boxes are drawn anew for what a session on a remote offers
    refresh();
  }

  return { refresh, setRunning, setRemote };
}

const byId = (c) => c.id;

/** Each change of a listing by its path (or ``key``: ``byId``), as comparable text: the agent's side of it only
 *  (what the layer holds there, and the lines its diff adds), so that a file the user edits in the checkout
 *  meanwhile still counts as shown (apply's conflict check is for that), while anything the agent changed since
 *  does not. */
function spelled(list, key = (c) => c.path) {
  return new Map(list.map((c) => [key(c), JSON.stringify([c.kind, c.type, c.mode, c.size, c.binary, c.target,
    c.disposition, parseDiff(c.diff || "").filter((r) => r.cls === "diff-add").map((r) => r.text)])]));
}

function describe(label, result) {
  if (!result) return `${label}: done.`;
  if (Array.isArray(result.applied)) {
    const applied = result.applied.length + (result.more_applied || 0);
    const skipped = (result.skipped ? result.skipped.length : 0) + (result.more_skipped || 0);
    return `Applied ${applied} path(s) (apply #${result.record})` + (skipped ? `; ${skipped} skipped.` : ".");
  }
  if (Array.isArray(result.reverted)) return `Reverted apply #${result.record}: ${result.reverted.length} path(s) restored.`;
  return `${label}: done.`;
}

function changeView(c, options) {
  const disposition = DISPOSITIONS.has(c.disposition) ? c.disposition : "other";
  const kind = KINDS.has(c.kind) ? c.kind : "other";
  const { added, removed } = countLines(c.diff);
  const head = el("summary", { class: "change-head" },
    selectBox(c, options),
    el("span", { class: `kind kind-${kind}`, testid: "change-kind" }, c.kind),
    el("span", { class: "mono path", testid: "change-path" }, c.path, c.type === "dir" ? "/" : ""),
    c.renamed_from ? el("span", { class: "muted small" }, ` (from ${c.renamed_from})`) : null,
    modeNote(c) ? el("span", { class: "mode small", testid: "change-mode" }, ` (${modeNote(c)})`) : null,
    el("span", { class: `badge disp-${disposition}`, testid: "change-disposition" }, c.disposition),
    c.reason && c.disposition !== "build_input"  // the note above the list says why, once
      ? el("span", { class: "muted small", testid: "change-reason" }, c.reason) : null,
    el("span", { class: "counts" },
      el("span", { class: "plus" }, `+${added}`), " ", el("span", { class: "minus" }, `−${removed}`)),
    commentButton(c, options));
  let body;
  if (typeof c.diff === "string") body = diffView(c.diff, c.path, options);
  else if (c.binary) body = el("p", { class: "muted small" }, `binary, ${c.size} bytes`);
  else if (c.type === "dir") body = null;
  else if (c.target !== null && c.target !== undefined) body = el("p", { class: "muted small" }, `symlink → ${c.target}`);
  else body = el("p", { class: "muted small" }, "no diff shown (too large, not text, or past what one listing carries)");
  return el("details", { class: "change", testid: "change", open: true, dataset: { disposition } }, head, body);
}

const octal = (n) => n.toString(8);

/** The mode worth a look, as review.mode_note words it (checkout.applied_mode's rule: no write for group or
 *  others the checkout's entry did not have, no setuid or setgid, its sticky bit kept); "" when there is none. */
function modeNote(c) {
  if (c.kind === "deleted" || c.type === "symlink" || !Number.isInteger(c.mode)) return "";
  const prev = Number.isInteger(c.previous_mode) ? c.previous_mode : null;
  const applied = prev === null ? c.mode & 0o755 : (c.mode & (0o755 | (prev & 0o022))) | (prev & 0o1000);
  let note;
  if (prev !== null && prev !== c.mode) note = `mode ${octal(prev)} → ${octal(c.mode)}`;
  else if (applied !== c.mode || (prev === null && c.mode & 0o111 && c.type === "file")) note = `mode ${octal(c.mode)}`;
  else return "";
  return applied === c.mode ? note : `${note}, applied as ${octal(applied)}`;
}

function countLines(diff) {
  let added = 0;
  let removed = 0;
  for (const { cls } of parseDiff(diff || "")) {
    if (cls === "diff-add") added += 1;
    else if (cls === "diff-del") removed += 1;
  }
  return { added, removed };
}

/** A path's tick box: for "Apply selected" on what a plain apply writes (disposition apply); on a remote
 *  session, for pushing a held-back file too (disposition trusted: the push's force names it; a directory is no
 *  git entry, so a push leaves it out whatever is forced). */
function selectBox(c, { selected, forced, onSelect }) {
  if (forced && c.disposition === "trusted" && c.type !== "dir") {
    return tickBox(forced, c.path, "change-force", "Push this held-back path too", onSelect);
  }
  if (c.disposition !== "apply" || !selected) return null; // none on a remote session: nothing is applied there
  const box = tickBox(selected, c.id, "change-select", "Apply this path with “Apply selected”", onSelect);
  box.dataset.changeId = c.id;
  return box;
}

function tickBox(ticked, key, testid, title, onSelect) {
  const box = el("input", { type: "checkbox", class: "select", testid, checked: ticked.has(key), title });
  box.addEventListener("change", () => {
    if (box.checked) ticked.add(key);
    else ticked.delete(key);
    onSelect();
  });
  return box;
}

function commentButton(c, { comment }) {
  const button = el("button", { type: "button", class: "linkish small", testid: "comment-file" }, "comment");
  button.addEventListener("click", (e) => {
    e.preventDefault(); // a button in a summary: comment, do not fold the file
    comment(c.path, undefined, undefined, button.closest("summary"));
  });
  return button;
}

/** A file's diff, highlighted when its language is known and it is within bounds; a click on a line opens a
 *  comment form under it. Rows are kept in ``rows`` (by path and diff) so that redrawing an unchanged diff (the
 *  layout toggled, a refresh) never tokenizes it again; ``spend`` is the drawing's time for highlighting. */
export function diffView(diff, path = "", { layout = "unified", comment = null, rows = new Map(), spend = budget() } = {}) {
  const key = `${path}\u0000${diff}`;
  if (!rows.has(key)) {
    const parsed = parseDiff(diff);
    rows.set(key, { parsed, highlighted: highlightRows(parsed, path, spend) });
  }
  const { parsed, highlighted } = rows.get(key);
  return drawn(parsed, highlighted, path, layout, comment);
}

function drawn(rows, highlighted, path, layout, comment) {
  const view = layout === "side-by-side" ? sideBySideView(rows) : unifiedView(rows);
  view.dataset.highlighted = String(highlighted);
  if (comment) onLineClick(view, ({ side, line, after }) => comment(path, line, side, after));
  return view;
}
