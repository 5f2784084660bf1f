// A session's changes: the files with their dispositions and diffs, and the actions on them
// (apply, revert, discard, rewind to a checkpoint). A refused apply shows its conflicts.
import { get, getWithHeaders, post, sessionPath, ApiError } from "./api.js";
import { el, replace, setText } from "./dom.js";

const DISPOSITIONS = new Set(["apply", "ignored", "discarded", "unsafe", "environment", "trusted", "build_input"]);
const KINDS = new Set(["added", "modified", "deleted"]);

export function mountChanges(box, id, onChanged, unreverted = () => 0) {
  const summary = el("span", { class: "muted", testid: "changes-summary" }, "loading…");
  const list = el("div", { class: "change-list", testid: "change-list" });
  const message = el("p", { class: "notice", testid: "changes-message", hidden: true });
  const conflicts = el("div", { class: "conflicts", testid: "conflicts", hidden: true });
  const appliedList = el("ul", { class: "applied-list", testid: "applied-list", hidden: true });
  const applyBtn = el("button", { type: "button", testid: "apply" }, "Apply to checkout");
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
  const buttons = [applyBtn, revertBtn, discardBtn, rewindBtn];
  let running = false;
  let applying = 0; // what a plain apply would write, as last listed
  let pending = null;
  let shown = null; // what the list was last built from: unchanged data leaves the DOM (and open diffs) alone

  replace(box,
    el("div", { class: "section-head" }, el("h2", {}, "Changes"), summary),
    el("div", { class: "actions" }, applyBtn, revertBtn, discardBtn,
      el("span", { class: "rewind" }, el("label", {}, "to turn ", turn), rewindBtn)),
    buildAck, message, appliedList, conflicts, list);

  function say(text, isError = false) {
    setText(message, text);
    message.className = isError ? "error" : "notice";
    message.hidden = !text;
  }

  async function act(label, path, body) {
    say("");
    conflicts.hidden = true;
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const result = await post(`${sessionPath(id)}/${path}`, body);
      say(describe(label, result));
      showApplied(result);
    } catch (err) {
      if (err instanceof ApiError && err.body && Array.isArray(err.body.conflicts) && err.body.conflicts.length) {
        showConflicts(err.body.conflicts);
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
    revertBtn.disabled = running || unreverted() === 0;
    discardBtn.disabled = running;
    rewindBtn.disabled = running || !turn.options.length;
  }

  function showConflicts(items) {
    const force = el("button", { type: "button", class: "danger", testid: "apply-force" },
      "Overwrite these paths and apply");
    force.addEventListener("click", () => act("Apply", "apply", { force: items.map((c) => c.path) }));
    replace(conflicts,
      el("strong", {}, `Nothing was written: ${items.length} path(s) changed in the checkout since the session began`),
      el("ul", {}, ...items.map((c) => el("li", { testid: "conflict" },
        el("span", { class: "mono", testid: "conflict-path" }, c.path), " — ", c.reason))),
      el("div", { class: "actions" }, force));
    conflicts.hidden = false;
  }

  applyBtn.addEventListener("click", () => act("Apply", "apply", buildBox.checked ? { build_inputs: true } : {}));
  revertBtn.addEventListener("click", () => act("Revert", "revert", {}));
  discardBtn.addEventListener("click", () => {
    if (window.confirm("Drop this session's changes and checkpoints? What was applied stays.")) act("Discard", "discard");
  });
  rewindBtn.addEventListener("click", () => {
    if (turn.value) act("Rewind", "rewind", { turn: Number(turn.value) });
  });

  async function load() {
    const [[changes, truncatedAt, unlisted, unlistedApplied], checkpoints] = await Promise.all([
      getWithHeaders(`${sessionPath(id)}/changes?diff=true`, "Cubicle-Truncated-At", "Cubicle-Unlisted",
        "Cubicle-Unlisted-Applied"),
      get(`${sessionPath(id)}/checkpoints`).catch(() => []),
    ]);
    const key = JSON.stringify([changes, truncatedAt, unlisted, unlistedApplied, checkpoints]);
    applying = changes.filter((c) => c.disposition === "apply").length + (Number(unlistedApplied) || 0);
    updateButtons();
    if (key === shown) return;
    shown = key;
    const listed = changes.filter((c) => c.disposition === "apply").length;
    summary.textContent = changes.length
      ? `${changes.length} path(s), ${listed} to apply`
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
    buildAck.hidden = building === 0;
    if (!building) buildBox.checked = false;
    replace(list, ...changes.map(changeView));
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
    updateButtons();
  }

  return { refresh, setRunning };
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

function changeView(c) {
  const disposition = DISPOSITIONS.has(c.disposition) ? c.disposition : "other";
  const kind = KINDS.has(c.kind) ? c.kind : "other";
  const { added, removed } = countLines(c.diff);
  const head = el("summary", { class: "change-head" },
    el("span", { class: `kind kind-${kind}`, testid: "change-kind" }, c.kind),
    el("span", { class: "mono path", testid: "change-path" }, c.path, c.type === "dir" ? "/" : ""),
    c.renamed_from ? el("span", { class: "muted small" }, ` (from ${c.renamed_from})`) : null,
    modeNote(c) ? el("span", { class: "mode small", testid: "change-mode" }, ` (${modeNote(c)})`) : null,
    el("span", { class: `badge disp-${disposition}`, testid: "change-disposition" }, c.disposition),
    c.reason && c.disposition !== "build_input"  // the note above the list says why, once
      ? el("span", { class: "muted small", testid: "change-reason" }, c.reason) : null,
    el("span", { class: "counts" },
      el("span", { class: "plus" }, `+${added}`), " ", el("span", { class: "minus" }, `−${removed}`)));
  let body;
  if (typeof c.diff === "string") body = diffView(c.diff);
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
  for (const [, cls] of classified(diff || "")) {
    if (cls === "diff-add") added += 1;
    else if (cls === "diff-del") removed += 1;
  }
  return { added, removed };
}

/** Each line of a unified diff with its class. Only the lines before the first hunk are file
 *  headers: inside hunks a line is what its first character says, so an added line that reads
 *  "++ x" is an addition, not a header. */
function classified(diff) {
  const lines = diff.endsWith("\n") ? diff.slice(0, -1).split("\n") : diff.split("\n");
  let inHunks = false;
  return lines.map((line) => {
    let cls = "diff-context";
    if (line.startsWith("@@")) {
      inHunks = true;
      cls = "diff-hunk";
    } else if (!inHunks) cls = line.startsWith("+++") || line.startsWith("---") ? "diff-file" : "diff-meta";
    else if (line.startsWith("+")) cls = "diff-add";
    else if (line.startsWith("-")) cls = "diff-del";
    else if (line.startsWith("\\")) cls = "diff-meta";
    return [line, cls];
  });
}

/** A unified diff, one element per line, classed as above. */
export function diffView(diff) {
  return el("pre", { class: "diff", testid: "diff" }, ...classified(diff).map(([line, cls]) => {
    return el("span", { class: `diff-line ${cls}`, testid: cls }, `${line}\n`);
  }));
}
