// Syntax highlighting that never writes HTML. Prism (vendored: prism.js, its licence beside it) only
// tokenizes; the token tree becomes [text, class] segments here, and diff.js puts each text in a Text node
// (dom.js, so invisible characters are spelled out) inside a span whose class comes from the fixed list
// below. What the file says, and what Prism's grammar names a token, can never become markup or a class of its own.
import "./prism-manual.js";
import "./prism.js";

/** Prism's token types that get a class (tok-TYPE); any other type is drawn as plain text. */
const TYPES = new Set([
  "atrule", "attr-name", "attr-value", "boolean", "builtin", "char", "class-name", "comment", "constant",
  "decorator", "deleted", "doctype", "entity", "function", "important", "inserted", "keyword", "macro",
  "namespace", "number", "operator", "prolog", "property", "punctuation", "regex", "selector", "string",
  "symbol", "tag", "url", "variable",
]);

/** Beyond these a diff is shown plain: highlighting costs time the reviewer should not pay for a hostile file.
 *  Several of Prism's grammars take time quadratic in what one call tokenizes (measured in node: CSS made of
 *  " :" takes 0.13 s at 8 KiB, 0.5 s at 16 KiB, 8 s at 64 KiB), so each piece tokenized (a hunk's side) is
 *  bounded, and so is the time one drawing of the page spends (``budget``): past it the rest is drawn plain. */
export const MAX_CHARS = 8 * 1024;
export const MAX_LINE = 2000;
export const PAGE_BUDGET_MS = 400;

/** The time one drawing of the page may spend highlighting, shared by its diffs. */
export function budget() {
  return { left: PAGE_BUDGET_MS };
}

const BY_SUFFIX = {
  py: "python", pyi: "python", js: "javascript", mjs: "javascript", cjs: "javascript", jsx: "javascript",
  ts: "typescript", tsx: "typescript", json: "json", sh: "bash", bash: "bash", zsh: "bash", yml: "yaml",
  yaml: "yaml", toml: "toml", go: "go", rs: "rust", c: "c", h: "c", java: "java", sql: "sql", css: "css",
  html: "markup", htm: "markup", xml: "markup", svg: "markup",
};

/** The language a path's name suggests (a key of the table above, or docker), or null. */
export function languageOf(path) {
  const name = String(path).split("/").pop();
  if (name === "Dockerfile" || name.startsWith("Dockerfile.")) return "docker";
  const dot = name.lastIndexOf(".");
  const suffix = dot > 0 ? name.slice(dot + 1).toLowerCase() : "";
  return Object.hasOwn(BY_SUFFIX, suffix) ? BY_SUFFIX[suffix] : null;
}

/** ``text``'s lines, each a list of [text, className] segments ("" for plain), or null when not highlighted
 *  (no grammar for the language, Prism missing, the text past the bounds, or the page's ``spend`` used up). */
export function highlightLines(text, language, spend = budget()) {
  const prism = globalThis.Prism;
  const grammar = language && prism && prism.languages && Object.hasOwn(prism.languages, language)
    ? prism.languages[language] : null;
  if (!grammar || typeof prism.tokenize !== "function" || text.length > MAX_CHARS || spend.left <= 0) return null;
  const started = performance.now();
  const lines = [[]];
  walk(prism.tokenize(text, grammar), "", lines);
  spend.left -= performance.now() - started;
  return lines;
}

export function tooLong(lines) {
  return lines.some((line) => line.length > MAX_LINE);
}

function walk(stream, cls, lines) {
  for (const token of Array.isArray(stream) ? stream : [stream]) {
    if (typeof token === "string") push(token, cls, lines);
    else if (token && typeof token === "object") walk(token.content, classOf(token) || cls, lines);
  }
}

function push(text, cls, lines) {
  text.split("\n").forEach((part, i) => {
    if (i) lines.push([]);
    if (part) lines[lines.length - 1].push([part, cls]);
  });
}

function classOf(token) {
  const names = [token.type, ...[].concat(token.alias || [])];
  return names.filter((name) => TYPES.has(name)).map((name) => `tok-${name}`).join(" ");
}
