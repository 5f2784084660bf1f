// Building the DOM from untrusted data, safely: elements are created one by one and every
// piece of text goes in through textContent (or a Text node). Nothing here parses HTML, and
// no attribute is ever set from data except data-* ids, classes from fixed lists and values.

import INVISIBLE from "./invisible.json" with { type: "json" };

/** Make what would act on the page or hide in it visible, as the terminal view does: every code
 *  point of the table both read (invisible.json: controls, format and bidi characters, separators,
 *  surrogates, variation selectors, tags and other default-ignorable code points, letters drawn
 *  blank). ESC shows as ␛, other C0 controls as their Control Pictures, DEL as ␡, the rest as a
 *  visible ⟦U+XXXX⟧, so nothing can reorder text, hide in a name or pass for something else.
 *  A Control Picture or ⟦ written as itself is spelled ⟦U+XXXX⟧ too, so no two texts show alike
 *  (a name with ESC and one with ␛; the C1 control U+009B and the six characters ⟦U+009B⟧), as the
 *  terminal spells U+009B \u009b and the byte 0x9B \x9b. Newlines and tabs stay. */
export function visible(text) {
  return String(text).replace(HIDDEN, (c) => {
    const code = c.codePointAt(0);
    if (code === 0x1b) return "␛";
    if (code < 0x20) return String.fromCharCode(0x2400 + code);
    if (code === 0x7f) return "␡";
    return `⟦U+${code.toString(16).toUpperCase().padStart(4, "0")}⟧`;
  });
}

const codePoint = (code) => `\\u{${code.toString(16)}}`;
const LOOK_ALIKES = [[0x2400, 0x2421], [0x27e6, 0x27e6]]; // the pictures and bracket drawn above
const HIDDEN = new RegExp(
  `[${[...INVISIBLE.ranges, ...LOOK_ALIKES].map(([first, last]) => `${codePoint(first)}-${codePoint(last)}`).join("")}]`,
  "gu");

/** Put untrusted text in a node, made visible. */
export function setText(node, text) {
  node.textContent = visible(text);
  return node;
}

/** el("div", {class: "x", testid: "y"}, child, "text", ...): an element; strings become Text nodes. */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "testid") node.dataset.testid = value;
    else if (key === "text") node.textContent = visible(value);
    else if (key === "on") for (const [type, fn] of Object.entries(value)) node.addEventListener(type, fn);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (SAFE_PROPS.has(key)) node[key] = value;
    else throw new Error(`el(): property ${key} is not on the safe list`);
  }
  append(node, ...children);
  return node;
}

// Properties that cannot load anything or run code (no href, src, style, on*...).
const SAFE_PROPS = new Set([
  "id", "type", "name", "value", "placeholder", "disabled", "hidden", "checked", "selected",
  "required", "min", "max", "step", "rows", "autocomplete", "open", "title", "htmlFor", "lang", "colSpan",
]);

/** Append children: nodes as they are, anything else as visible text. */
export function append(node, ...children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
  return node;
}

/** Replace all of node's children. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, ...children);
}

// Where a session's files are: its checkout, or a git remote's URL and commit (the ref asked for while its files
// are still being fetched); never the controller's tree of a remote.
export function sessionWhere(s) {
  if (!s.source) return s.repo;
  if (!s.source.commit) return `${s.source.url} (${s.source.ref || "HEAD"}, not fetched)`;
  return `${s.source.url} @ ${s.source.commit.slice(0, 12)}`;
}

export function fmtTokens(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e4) return `${Math.round(n / 1e3)}k`;
  return String(n);
}

export function totalTokens(usage) {
  if (!usage) return 0;
  return (usage.input_tokens || 0) + (usage.output_tokens || 0)
    + (usage.cache_creation_input_tokens || 0) + (usage.cache_read_input_tokens || 0);
}

export function fmtAge(ts) {
  const s = Math.max(0, Date.now() / 1000 - ts);
  if (s < 60) return `${Math.floor(s)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function fmtDuration(seconds) {
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  return `${Math.floor(seconds / 60)}m ${Math.round(seconds % 60)}s`;
}

export function firstLine(text, max = 120) {
  const line = String(text).split("\n", 1)[0];
  return line.length > max ? `${line.slice(0, max)}…` : line;
}

/** A status badge: the class comes from a fixed list, never from the data itself. */
const STATUSES = new Set(["running", "idle", "interrupted", "cancelled", "failed"]);
export function statusBadge(status, testid) {
  const known = STATUSES.has(status) ? status : "unknown";
  return el("span", { class: `badge status-${known}`, testid, text: status });
}
