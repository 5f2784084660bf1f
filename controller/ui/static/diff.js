// A unified diff, read into rows (each line with its class and its old and new line numbers), highlighted
// (highlight.js) and drawn unified or side by side. Every piece of the file's text goes in as a Text node
// through dom.js; classes come from fixed lists; line numbers are numbers this code counted.
import { el } from "./dom.js";
import { highlightLines, languageOf, tooLong } from "./highlight.js";

const HUNK = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/;

/** Each line of a unified diff with its class. Only the lines before the first hunk are file
 *  headers: inside hunks a line is what its first character says, so an added line that reads
 *  "++ x" is an addition, not a header. Rows in hunks carry their line numbers (old, new). */
export function parseDiff(diff) {
  const lines = diff.endsWith("\n") ? diff.slice(0, -1).split("\n") : diff.split("\n");
  let hunk = -1;
  let old = 0;
  let now = 0;
  return lines.map((text) => {
    const row = { text, cls: "diff-context", hunk, old: null, new: null };
    const header = text.startsWith("@@") ? HUNK.exec(text) : null;
    if (text.startsWith("@@")) {
      row.hunk = hunk += 1;
      row.cls = "diff-hunk";
      [old, now] = header ? [Number(header[1]), Number(header[2])] : [0, 0];
    } else if (hunk < 0) row.cls = text.startsWith("+++") || text.startsWith("---") ? "diff-file" : "diff-meta";
    else if (text.startsWith("+")) { row.cls = "diff-add"; row.new = now++; }
    else if (text.startsWith("-")) { row.cls = "diff-del"; row.old = old++; }
    else if (text.startsWith(" ")) { row.old = old++; row.new = now++; }
    else row.cls = "diff-meta"; // "\ No newline at end of file", "[diff truncated]"
    return row;
  });
}

/** Give each code row its segments ([text, class] pairs), each hunk's sides tokenized whole (a string or a
 *  comment over several lines stays one), when the path has a known language and the diff is within bounds
 *  (highlight.js: each side's size, and the page's ``spend`` of time). */
export function highlightRows(rows, path, spend) {
  const language = languageOf(path);
  if (!language || tooLong(rows.map((r) => r.text))) return false;
  const hunks = new Map();
  for (const row of rows) if (row.old !== null || row.new !== null) {
    if (!hunks.has(row.hunk)) hunks.set(row.hunk, []);
    hunks.get(row.hunk).push(row);
  }
  let done = false;
  for (const hunk of hunks.values()) {
    done = side(hunk.filter((r) => r.new !== null), language, (r) => true, spend) || done;
    done = side(hunk.filter((r) => r.old !== null), language, (r) => r.new === null, spend) || done;
  }
  return done;
}

function side(rows, language, takes, spend) {
  const lines = highlightLines(rows.map((r) => r.text.slice(1)).join("\n"), language, spend);
  if (!lines || lines.length !== rows.length) return false;
  rows.forEach((row, i) => { if (takes(row)) row.segments = lines[i]; });
  return true;
}

function code(row) {
  if (!row.segments) return [row.text.slice(1)];
  return row.segments.map(([text, cls]) => (cls ? el("span", { class: cls }, text) : text));
}

/** Where a comment on this row goes: the side and number of its line (the new side for context). */
function target(row, prefer = "new") {
  if (row.new !== null && (prefer === "new" || row.old === null)) return { side: "new", line: String(row.new) };
  if (row.old !== null) return { side: "old", line: String(row.old) };
  return null;
}

function numbers(row) {
  const data = {};
  if (row.old !== null) data.old = String(row.old);
  if (row.new !== null) data.new = String(row.new);
  return data;
}

/** The unified view: one element per line (its text, prefix included, then a newline), classed as above. */
export function unifiedView(rows) {
  return el("pre", { class: "diff", testid: "diff" }, ...rows.map((row) => {
    const where = target(row);
    const dataset = { ...numbers(row), ...(where || {}) };
    const body = where ? [row.text[0], ...code(row)] : [row.text];
    return el("span", { class: `diff-line ${row.cls}`, testid: row.cls, dataset }, ...body, "\n");
  }));
}

/** The side-by-side view: the old file on the left, the new on the right; a run of removed lines faces the
 *  run of added lines that follows it. Headers and hunk lines span both sides. */
export function sideBySideView(rows) {
  const body = el("tbody");
  for (const pair of pairs(rows)) {
    if (!Array.isArray(pair)) {
      body.append(el("tr", {}, el("td", { colSpan: 4, class: `diff-line ${pair.cls}`, testid: `sbs-${pair.cls}` },
        pair.text)));
      continue;
    }
    const [left, right] = pair;
    body.append(el("tr", { class: "sbs-row" }, ...cell(left, "old"), ...cell(right, "new")));
  }
  return el("div", { class: "diff diff-sbs-wrap" }, el("table", { class: "diff-sbs", testid: "diff-sbs" }, body));
}

function cell(row, side) {
  if (!row) return [el("td", { class: "ln" }), el("td", { class: "sbs-cell sbs-empty", testid: `sbs-${side}` })];
  const cls = row.old !== null && row.new !== null ? "diff-context" : row.cls;
  const number = side === "old" ? row.old : row.new;
  const dataset = { side, line: String(number) };
  return [el("td", { class: "ln" }, String(number)),
    el("td", { class: `sbs-cell ${cls}`, testid: `sbs-${side}`, dataset }, ...code(row))];
}

function pairs(rows) {
  const out = [];
  let removed = [];
  let added = [];
  const flush = () => {
    for (let i = 0; i < Math.max(removed.length, added.length); i++) out.push([removed[i] || null, added[i] || null]);
    removed = [];
    added = [];
  };
  for (const row of rows) {
    if (row.cls === "diff-del") {
      if (added.length) flush();
      removed.push(row);
    } else if (row.cls === "diff-add") added.push(row);
    else {
      flush();
      out.push(row.old !== null && row.new !== null ? [row, row] : row);
    }
  }
  flush();
  return out;
}

/** Call ``onLine({side, line, after})`` when a line is clicked (not when text was being selected): ``after`` is
 *  the element a comment form goes after. */
export function onLineClick(view, onLine) {
  view.addEventListener("click", (e) => {
    if (String(window.getSelection() || "")) return;
    const hit = e.target instanceof Element ? e.target.closest("[data-side]") : null;
    if (!hit || !view.contains(hit)) return;
    onLine({ side: hit.dataset.side, line: Number(hit.dataset.line), after: hit.closest("tr") || hit });
  });
}
