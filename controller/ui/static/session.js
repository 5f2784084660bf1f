// One session (#/sessions/<id>): its transcript, live over SSE, with cancel and follow-up,
// and its changes below (changes.js).
//
// The event stream closes whenever no turn runs, and a reconnect replays from the URL's
// `after=`; so the page closes the EventSource itself when the stream ends, asks the
// session's record whether a turn still runs, reopens from the last seq if so, and
// ignores every event whose seq it has already seen.
import { get, post, sessionPath, withKey, ApiError } from "./api.js";
import { el, replace, setText, visible, fmtDuration, fmtTokens, totalTokens, statusBadge, firstLine, sessionWhere } from "./dom.js";
import { mountChanges } from "./changes.js";

const EVENT_TYPES = [
  "session_started", "user_message", "text", "tool_call", "command_output", "tool_result", "usage", "context_edited",
  "status", "session_finished", "changes", "applied", "reverted", "rewound", "discarded",
  "setup_output", "error",
];
const REFRESHING = new Set(["session_finished", "changes", "applied", "reverted", "rewound", "discarded"]);
const RECONNECT_MS = 500;
const JUST_NOW_S = 10; // a command's result that came this recently replaces its live output open
const RECORD_DELAY_MS = 200; // record refreshes asked for within this long share one request

export function showSession(view, id, { changesOnly = false } = {}) {
  const page = new SessionPage(view, id, changesOnly);
  page.start();
  return page;
}

class SessionPage {
  constructor(view, id, changesOnly) {
    this.view = view;
    this.id = id;
    this.changesOnly = changesOnly;
    this.lastSeq = 0;
    this.source = null;
    this.timers = new Set();
    this.stopped = false;
    this.assistant = null; // the Text node the current assistant block's deltas go into
    this.tools = new Map(); // tool_use id -> its element
    this.record = null;
    this.unreverted = 0; // applies not reverted yet, counted from the events: the revert button's state
    this.build();
  }

  build() {
    this.status = el("span", { testid: "status" });
    this.steps = el("span", { class: "num", testid: "steps" }, "0");
    this.tokens = el("span", { class: "num", testid: "tokens" }, "0");
    this.finish = el("span", { testid: "finish-reason" }, "—");
    this.stream = el("span", { class: "muted small", testid: "stream-state" }, "connecting");
    this.repo = el("span", { class: "mono", testid: "session-repo" });
    this.model = el("span", { class: "mono", testid: "session-model" });
    this.detail = el("p", { class: "muted small", testid: "session-detail", hidden: true });
    this.actionError = el("p", { class: "error", testid: "action-error", hidden: true });
    this.transcript = el("div", { class: "transcript", testid: "transcript", dataset: { lastSeq: "0" } });

    this.cancelButton = el("button", { type: "button", class: "danger", testid: "cancel", disabled: true }, "Cancel turn");
    this.cancelButton.addEventListener("click", () => this.cancel());
    this.followText = el("textarea", { rows: 2, testid: "followup-text", name: "followup",
      placeholder: "Follow-up message (when the turn has ended)", required: true });
    this.followSend = el("button", { type: "submit", testid: "followup-send" }, "Send");
    const follow = el("form", { class: "followup", testid: "followup-form" }, this.followText, this.followSend);
    follow.addEventListener("submit", (e) => { e.preventDefault(); this.followUp(); });

    const changesLink = el("button", { type: "button", class: "linkish", testid: "to-changes" },
      this.changesOnly ? "Transcript" : "Changes");
    changesLink.addEventListener("click", () => {
      location.hash = `#/sessions/${encodeURIComponent(this.id)}${this.changesOnly ? "" : "/changes"}`;
    });
    const back = el("button", { type: "button", class: "linkish", testid: "back" }, "← Sessions");
    back.addEventListener("click", () => { location.hash = "#/"; });

    const header = el("section", { class: "card session-head", testid: "session-head" },
      el("div", { class: "section-head" }, back, el("h1", { class: "mono", testid: "session-id" }, this.id),
        el("span", { class: "spacer" }), changesLink),
      el("dl", { class: "facts" },
        el("dt", {}, "Status"), el("dd", {}, this.status, " ", this.stream),
        el("dt", {}, "Repository"), el("dd", {}, this.repo),
        el("dt", {}, "Model"), el("dd", {}, this.model),
        el("dt", {}, "Steps"), el("dd", {}, this.steps),
        el("dt", {}, "Tokens"), el("dd", {}, this.tokens),
        el("dt", {}, "Finish"), el("dd", {}, this.finish)),
      this.detail);

    this.changesBox = el("section", { class: "card", testid: "changes" });
    // An apply, revert, rewind or discard records an event even between turns: fetch it (the stream then closes).
    this.changes = mountChanges(this.changesBox, this.id, () => {
      this.refreshRecord().catch(() => null);
      this.connect();
    }, () => this.unreverted);
    const controls = el("section", { class: "card controls", testid: "controls" },
      el("div", { class: "actions" }, this.cancelButton), follow, this.actionError);
    const transcriptCard = el("section", { class: "card", hidden: this.changesOnly },
      el("h2", {}, "Transcript"), this.transcript);
    replace(this.view, header, transcriptCard, controls, this.changesBox);
  }

  async start() {
    this.connect(); // the stream is most of the page: open it at once, the record comes alongside
    await this.refreshRecord();
    this.changes.refresh();
    if (this.changesOnly) this.changesBox.scrollIntoView();
  }

  stop() {
    this.stopped = true;
    this.closeStream();
    for (const t of this.timers) clearTimeout(t);
  }

  later(fn, ms) {
    const t = setTimeout(() => { this.timers.delete(t); if (!this.stopped) fn(); }, ms);
    this.timers.add(t);
  }

  // --- the stream -------------------------------------------------------------------------

  connect() {
    if (this.stopped || this.source) return;
    const source = new EventSource(withKey(`${sessionPath(this.id)}/events?after=${this.lastSeq}`));
    this.source = source;
    this.setStream("connecting");
    source.addEventListener("open", () => this.setStream("live"));
    for (const type of EVENT_TYPES) source.addEventListener(type, (message) => this.onMessage(message));
    // The server ends the stream when no turn runs, and the network may drop it: either way the
    // browser would reconnect to the same URL (a replay), so close it and decide here.
    source.addEventListener("error", (e) => {
      // A session's own "error" event arrives by this name too (a MessageEvent, handled above): not an end.
      if (this.source !== source || e instanceof MessageEvent) return;
      this.closeStream();
      this.afterClose();
    });
  }

  closeStream() {
    if (this.source) this.source.close();
    this.source = null;
    this.setStream("closed");
  }

  async afterClose() {
    try {
      const record = await this.refreshRecord();
      if (record && record.status === "running") {
        this.setStream("reconnecting");
        this.later(() => this.connect(), RECONNECT_MS);
      }
    } catch {
      this.setStream("reconnecting");
      this.later(() => this.afterClose(), RECONNECT_MS * 4);
    }
  }

  setStream(state) {
    this.stream.textContent = state;
    this.stream.dataset.state = state;
  }

  onMessage(message) {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    if (typeof event.seq !== "number" || event.seq <= this.lastSeq) return; // a replay after a reconnect
    this.lastSeq = event.seq;
    this.transcript.dataset.lastSeq = String(event.seq);
    this.render(event);
    if (REFRESHING.has(event.type)) this.changes.refresh();
    if (event.type === "session_finished" || event.type === "status") this.refreshSoon();
  }

  /** Fetch the record shortly, once for however many events ask meanwhile (a replay has one usage event a step). */
  refreshSoon() {
    if (this.recordDue) return;
    this.recordDue = true;
    this.later(() => {
      this.recordDue = false;
      this.refreshRecord().catch(() => null);
    }, RECORD_DELAY_MS);
  }

  // --- the record -------------------------------------------------------------------------

  async refreshRecord() {
    const record = await get(sessionPath(this.id)).catch((err) => {
      if (err instanceof ApiError && err.status === 404) {
        replace(this.view, el("p", { class: "error", testid: "not-found" }, `No session ${this.id}.`));
        this.stop();
        return null;
      }
      throw err;
    });
    if (!record || this.stopped) return record;
    this.record = record;
    replace(this.status, statusBadge(record.status, "status-badge"));
    this.status.dataset.status = record.status;
    this.steps.textContent = String(record.steps);
    this.tokens.textContent = fmtTokens(totalTokens(record.usage));
    this.tokens.title = `${totalTokens(record.usage)} tokens`;
    setText(this.finish, record.finish_reason || "—");
    // A session on a git remote shows where its files came from; nothing is applied there, so the patch is offered.
    this.repo.textContent = visible(sessionWhere(record));
    this.changes.setRemote(Boolean(record.source));
    this.model.textContent = visible(record.model);
    this.detail.textContent = visible(record.detail || "");
    this.detail.hidden = !record.detail;
    const running = record.status === "running";
    this.cancelButton.disabled = !running;
    this.followSend.disabled = running;
    this.changes.setRunning(running);
    return record;
  }

  // --- actions ----------------------------------------------------------------------------

  showError(err) {
    setText(this.actionError, err instanceof ApiError ? `${err.status}: ${err.message}` : String(err));
    this.actionError.hidden = false;
  }

  async cancel() {
    this.actionError.hidden = true;
    this.cancelButton.disabled = true;
    try {
      await post(`${sessionPath(this.id)}/cancel`);
    } catch (err) {
      this.showError(err);
    }
    await this.refreshRecord().catch(() => null);
  }

  async followUp() {
    const text = this.followText.value;
    if (!text.trim()) return;
    this.actionError.hidden = true;
    this.followSend.disabled = true;
    try {
      await post(`${sessionPath(this.id)}/messages`, { text });
      this.followText.value = "";
      await this.refreshRecord();
      this.connect();
    } catch (err) {
      this.showError(err);
      this.followSend.disabled = false;
    }
  }

  // --- rendering events -------------------------------------------------------------------

  add(node) {
    // Whether to follow the bottom is read once per frame, before that frame's appends: reading the
    // page's height after every append laid the whole page out once per event (seconds for a replay).
    if (this.following === undefined) {
      this.following = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
      requestAnimationFrame(() => {
        const last = this.transcript.lastElementChild;
        if (this.following && !this.changesOnly && last) last.scrollIntoView({ block: "end" });
        this.following = undefined;
      });
    }
    this.transcript.append(node);
    return node;
  }

  block(kind, testid, seq, ...children) {
    return el("div", { class: `block ${kind}`, testid, dataset: { seq: String(seq) } }, ...children);
  }

  render(event) {
    const render = RENDER[event.type];
    if (render) render.call(this, event);
    else this.add(this.block("note", "note", event.seq, `(${event.type})`));
  }
}

function label(text) {
  return el("div", { class: "label" }, text);
}

function pre(text, testid, cls = "") {
  return el("pre", { class: `output ${cls}`.trim(), testid }, text);
}

function argsSummary(name, input) {
  if (input && typeof input === "object") {
    if (typeof input.command === "string") return firstLine(input.command, 160);
    if (typeof input.path === "string") return input.path;
    if (typeof input.pattern === "string") return input.pattern;
  }
  return firstLine(JSON.stringify(input), 160);
}

const RENDER = {
  session_started(e) {
    this.assistant = null;
    this.add(this.block("user", "user-message", e.seq, label("Task"), el("div", { class: "text", testid: "user-text" }, e.task)));
  },
  user_message(e) {
    this.assistant = null;
    this.add(this.block("user", "user-message", e.seq, label("Follow-up"), el("div", { class: "text", testid: "user-text" }, e.text)));
  },
  text(e) {
    if (!this.assistant) {
      this.assistant = document.createTextNode("");
      this.add(this.block("assistant", "assistant-text", e.seq, label("Agent"),
        el("div", { class: "text", testid: "assistant-body" }, this.assistant)));
    }
    this.assistant.appendData(visible(e.text));
  },
  tool_call(e) {
    this.assistant = null;
    const result = el("div", { class: "result pending", testid: "tool-pending" }, "running…");
    const node = this.block("tool", "tool-call", e.seq,
      el("div", { class: "tool-head" },
        el("span", { class: "tool-name", testid: "tool-name" }, e.name),
        el("span", { class: "tool-summary mono", testid: "tool-summary" }, argsSummary(e.name, e.input))),
      el("details", { class: "args", testid: "tool-args" }, el("summary", {}, "arguments"),
        pre(JSON.stringify(e.input, null, 2), "tool-args-json")),
      result);
    node.dataset.toolId = e.id;
    this.tools.set(e.id, { node, result, live: null });
    this.add(node);
  },
  command_output(e) {
    // The command's output as it runs, in a terminal pane above "running…" (capped by the server; shown inert).
    const tool = this.tools.get(e.tool_use_id);
    if (!tool || !tool.result.isConnected) return;
    if (!tool.live) {
      tool.live = { text: document.createTextNode(""), pane: null };
      tool.live.pane = el("pre", { class: "output live", testid: "live-output" }, tool.live.text);
      tool.result.before(tool.live.pane);
    }
    tool.live.text.appendData(visible(e.text));
    tool.live.pane.scrollTop = tool.live.pane.scrollHeight;
    if (e.truncated) {
      tool.live.pane.after(el("p", { class: "muted small", testid: "live-output-truncated" },
        "output truncated for display; the result shows what the model saw"));
    }
  },
  tool_result(e) {
    const tool = this.tools.get(e.id);
    const ok = !e.is_error && (e.exit_code === null || e.exit_code === undefined || e.exit_code === 0);
    const facts = [ok ? "✓" : "✗", e.name];
    if (e.exit_code !== null && e.exit_code !== undefined) facts.push(`exit ${e.exit_code}`);
    facts.push(fmtDuration(e.duration_s));
    const notKept = e.output_not_kept || 0;
    const size = notKept || e.output.length;
    facts.push(`${size} chars`);
    if (e.model_chars < size) facts.push(`model saw ${e.model_chars}`);
    const shown = notKept
      ? `(${notKept} characters of output were not stored: this session's stored events reached the server's cap)`
      : e.output;
    const details = el("details", { class: `result ${ok ? "ok" : "failed"}`, testid: "tool-result",
      dataset: { exitCode: e.exit_code === null || e.exit_code === undefined ? "" : String(e.exit_code), isError: String(e.is_error) } },
      el("summary", { testid: "tool-result-summary" }, facts.join(" · ")),
      pre(shown, "tool-output", notKept ? "not-kept" : ""));
    if (tool && tool.live) { // the result replaces the live pane; open if it ended just now (not in a replay),
      // so the output being watched stays in view
      tool.node.querySelectorAll('[data-testid="live-output"], [data-testid="live-output-truncated"]')
        .forEach((node) => node.remove());
      details.open = Date.now() / 1000 - e.ts < JUST_NOW_S;
    }
    if (tool) tool.result.replaceWith(details);
    else this.add(this.block("tool orphan", "tool-call", e.seq, details));
  },
  usage(e) {
    this.tokens.textContent = fmtTokens(totalTokens(e.session));
    this.refreshSoon();
  },
  context_edited(e) {
    this.add(this.block("note", "note", e.seq,
      `context ${e.kind} (${e.reason}): ~${e.tokens_before} → ~${e.tokens_after} tokens`));
  },
  status(e) {
    this.add(this.block("note status-note", "status-event", e.seq, `status: ${e.status}${e.detail ? ` — ${e.detail}` : ""}`));
  },
  session_finished(e) {
    this.assistant = null;
    for (const { result } of this.tools.values()) {
      if (result.isConnected) result.textContent = "no result (the turn ended)";
    }
    const node = this.block(`finished reason-${/^[a-z_]+$/.test(e.reason) ? e.reason : "other"}`, "finished", e.seq,
      el("strong", { testid: "finished-reason" }, e.reason),
      ` · ${e.steps} steps · ${fmtTokens(totalTokens(e.usage))} tokens`,
      e.detail ? el("div", { class: "small" }, e.detail) : null);
    this.add(node);
  },
  changes(e) {
    const s = e.summary;
    this.add(this.block("note", "changes-event", e.seq,
      `changes: ${s.files} files (+${s.lines_added} −${s.lines_removed})`,
      s.held_back ? `, ${s.held_back} held back` : "",
      e.checkpoint ? ` · checkpoint ${e.checkpoint}` : ""));
  },
  applied(e) {
    this.unreverted += 1;
    this.add(this.block("note", "applied-event", e.seq, `applied #${e.apply}: ${e.paths.length + (e.more || 0)} paths written`,
      e.skipped ? `, ${e.skipped} skipped` : ""));
  },
  reverted(e) {
    this.unreverted = Math.max(0, this.unreverted - 1);
    this.add(this.block("note", "reverted-event", e.seq, `reverted apply #${e.apply}: ${e.paths.length + (e.more || 0)} paths restored`));
  },
  rewound(e) {
    this.add(this.block("note", "rewound-event", e.seq, `files rewound to the end of turn ${e.turn}`));
  },
  discarded(e) {
    this.unreverted = 0; // the applies' records went with the layer
    this.add(this.block("note", "discarded-event", e.seq, "changes discarded"));
  },
  setup_output(e) {
    this.add(this.block("setup", "setup-output", e.seq,
      el("details", { open: true }, el("summary", {}, `setup: ${e.phase}`), pre(e.text, "setup-text"))));
  },
  error(e) {
    this.assistant = null;
    this.add(this.block("error-event", "error-event", e.seq, el("strong", {}, `error (${e.kind})`), el("div", {}, e.message)));
  },
};

