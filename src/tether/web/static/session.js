// The session page: the transcript as it streams, prompt / steer / stop, permission
// questions, background tasks and subagents. Every record of the log arrives once, in seq
// order, over one EventSource; the page checks that (data-last-seq, data-gaps, data-dups).
"use strict";

const sessionId = decodeURIComponent(window.location.pathname.split("/").pop());
const transcript = () => document.getElementById("transcript");

const view = {
  lastSeq: -1,
  gaps: 0,
  dups: 0,
  turn: null, // the element of the open turn
  stream: null, // {kind, node} the text or reasoning block being streamed
  step: null, // the element holding the current step's output
  answer: null, // the element of the answer being streamed (rendered when it is whole)
  calls: new Map(), // tool call id -> element
  children: new Map(), // tool call id -> the subagent it started {id, call, task}
  asking: new Set(), // ids of the calls a question is open about
  running: false,
  live: false,
};

function atBottom() {
  const t = transcript();
  return t.scrollHeight - t.scrollTop - t.clientHeight < 80;
}

function container() {
  if (view.step) return view.step;
  if (view.turn) return view.turn;
  return transcript();
}

function textOf(content) {
  if (!Array.isArray(content)) return "";
  return content.filter((b) => b && b.type === "text").map((b) => b.text).join("");
}

function streamBlock(kind) {
  if (view.stream && view.stream.kind === kind) return view.stream.node;
  let node;
  if (kind === "reasoning") {
    const details = el("details", "reasoning");
    details.append(el("summary", "", "Reasoning"));
    node = el("div", "reasoning-text");
    details.append(node);
    container().append(details);
  } else {
    node = el("div", "assistant");
    container().append(node);
    view.answer = node;
  }
  view.stream = { kind, node };
  return node;
}

// A file's diff as the server computed it (`tether.front.diffs`, the terminal's diff):
// numbered rows of unified hunks, each fold saying how many unchanged lines it hides. A
// diff of more than DIFF_ROWS rows shows that many, and a button for the rest.
const DIFF_ROWS = 400;

function renderDiff(diff) {
  const box = el("div", "diff");
  box.append(el("div", "path", diff.path));
  const rows = el("div", "diff-rows");
  const lines = [];
  for (const hunk of diff.hunks || []) {
    const folded = hunk.folded;
    if (folded) lines.push(() => el("div", "fold", `⋯ ${folded.toLocaleString()} unchanged line${folded === 1 ? "" : "s"}`));
    for (const row of hunk.rows) lines.push(() => diffRow(row));
  }
  if (!lines.length) lines.push(() => el("div", "fold", diff.note || "no change"));
  else if (diff.note) lines.push(() => el("div", "fold", diff.note));
  for (const make of lines.slice(0, DIFF_ROWS)) rows.append(make());
  if (lines.length > DIFF_ROWS) {
    const more = el("button", "small more", `Show ${(lines.length - DIFF_ROWS).toLocaleString()} more lines`);
    more.type = "button";
    more.addEventListener("click", () => {
      more.remove();
      for (const make of lines.slice(DIFF_ROWS)) rows.append(make());
    });
    box.append(rows, more);
    return box;
  }
  box.append(rows);
  return box;
}

function diffRow([kind, oldNo, newNo, text]) {
  const kinds = { "+": "add", "-": "del", " ": "ctx" };
  const row = el("div", "row " + (kinds[kind] || "ctx"));
  const number = (n) => el("span", "ln", n === null ? "" : String(n));
  row.append(number(oldNo), number(newNo), el("span", "code", kind + " " + text));
  return row;
}

// A call's arguments as its tool presents them (`shown`, sent with the record): the
// change it makes as its diffs, a command as a command line, else the arguments as JSON.
function renderArgs(shown, args, diffs) {
  const box = el("div", "args");
  const how = shown || {};
  if (diffs && diffs.length) {
    for (const diff of diffs) box.append(renderDiff(diff));
    return box;
  }
  const command = how.command == null || !args ? undefined : args[how.command];
  if (typeof command === "string") {
    box.append(el("pre", "command", "$ " + command + (args.run_in_background ? "   &" : "")));
    return box;
  }
  box.append(el("pre", "json", JSON.stringify(args, null, 2)));
  return box;
}

// `html` is the answer's Markdown rendered and sanitized by the server
// (`tether.web.markdown`): no raw HTML of the model's reaches the page.
function showMarkdown(node, html) {
  node.innerHTML = html;
  node.classList.add("markdown");
  for (const pre of node.querySelectorAll("pre")) {
    const block = el("div", "code-block");
    pre.replaceWith(block);
    pre.tabIndex = 0; // a block wider than the screen scrolls from the keyboard too
    const copy = el("button", "copy", "Copy");
    copy.type = "button";
    copy.setAttribute("aria-label", "Copy the code");
    copy.addEventListener("click", () => copyCode(pre, copy));
    block.append(copy, pre);
  }
}

async function copyCode(pre, button) {
  const text = pre.innerText;
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) {
    const range = document.createRange(); // no clipboard API: select it, and copy that
    range.selectNodeContents(pre);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    document.execCommand("copy");
  }
  button.textContent = "Copied";
  setTimeout(() => (button.textContent = "Copy"), 1500);
}

function renderCall(data, shown, diffs) {
  const call = el("details", "tool-call");
  call.open = true;
  call.dataset.callId = data.id;
  const summary = el("summary", "");
  summary.append(el("span", "tool-name", data.name), el("span", "tool-state", "running"));
  call.append(summary, renderArgs(shown, data.arguments, diffs));
  if (shown && shown.delegates && data.arguments && data.arguments.description) {
    call.append(el("div", "muted subagent-task", "subagent: " + data.arguments.description));
  }
  if (view.asking.has(data.id)) call.classList.add("asking");
  container().append(call);
  view.calls.set(data.id, call);
  const child = view.children.get(data.id); // known before its call was shown
  if (child) showChild(child);
}

function renderResult(data, shown) {
  let call = view.calls.get(data.id);
  if (!call) {
    renderCall({ id: data.id, name: data.name, arguments: {} }, shown);
    call = view.calls.get(data.id);
  }
  call.classList.remove("asking");
  const state = call.querySelector(".tool-state");
  state.textContent = data.is_error ? "failed" : "done";
  call.classList.add(data.is_error ? "error" : "ok");
  for (const node of call.querySelectorAll(".tool-progress")) node.remove();
  const output = el("pre", "tool-output", data.content);
  call.append(output);
  if (/^started |background task/i.test(data.content) || (shown && shown.shell_tasks)) loadTasks();
}

function renderReceipt(data) {
  const box = el("div", "receipt");
  box.append(el("div", "receipt-title", "Stop receipt (cause: " + data.cause + ")"));
  const list = el("ul", "");
  for (const s of data.stopped || []) {
    const how = (s.signals || []).join(" → ") || "no signal";
    const end = s.exit_signal ? "ended by " + s.exit_signal : "exit " + s.exit_code;
    const secs = s.seconds === null ? "still exiting" : s.seconds.toFixed(3) + " s";
    list.append(el("li", "", `${s.kind} ${s.id}: process group ${s.pgid}, ${how}, ${end}, ${secs}`));
  }
  for (const a of data.agents || []) {
    list.append(el("li", "", `subagent ${a.id}: ${a.ended}${a.cause ? " (" + a.cause + ")" : ""}`));
  }
  if (!list.children.length) list.append(el("li", "", "nothing was running"));
  box.append(list);
  container().append(box);
}

// The todo list as a checklist: a box ticked once its task is completed, the task in
// progress marked as such (each box read-only: the model keeps the list).
const PLAN_STATES = { completed: "done", in_progress: "in progress", pending: "to do" };

function renderPlan(data) {
  const box = el("div", "plan");
  const entries = data.entries || [];
  const done = entries.filter((entry) => entry.status === "completed").length;
  box.append(el("div", "plan-title", `Plan (${done} of ${entries.length} done)`));
  const list = el("ul", "checklist");
  for (const entry of entries) {
    const item = el("li", "plan-" + entry.status);
    const tick = el("input");
    tick.type = "checkbox";
    tick.checked = entry.status === "completed";
    tick.disabled = true;
    tick.setAttribute("aria-label", PLAN_STATES[entry.status] || entry.status);
    item.append(tick, el("span", "plan-content", entry.content));
    if (entry.status === "in_progress") item.append(el("span", "plan-state", "in progress"));
    list.append(item);
  }
  box.append(list);
  container().append(box);
}

// How a turn ended: a failure as the terminal says it (`outcome`: what failed, what to do).
function endReason(reason, outcome) {
  if (!reason) return "ended";
  if (reason.kind === "error" && outcome) return outcome;
  if (reason.kind === "aborted") return "cancelled (" + reason.cause + ")";
  if (reason.kind === "error") return "error: " + reason.error;
  if (reason.kind === "budget") return "stopped: the spend budget is exhausted";
  return reason.kind;
}

function amount(unit, value) {
  return unit === "usd" ? `${value.toFixed(4)} USD` : `${Math.round(value).toLocaleString("en")} tokens`;
}

// budget/exhausted: the receipt of the request that was not sent (as tether.session.budget says it).
function renderBudget(data) {
  const whose =
    { session: "this session's", turn: "this turn's", day: "today's", cluster: "all hosts' daily" }[data.budget] ||
    `the ${data.budget} budget's`;
  const text =
    `budget exhausted: ${amount(data.unit, data.spent)} of ${whose} ${amount(data.unit, data.limit)} ` +
    `spent; the next request to ${data.model} would reserve ${amount(data.unit, data.reserving)}, ` +
    "so it was not sent";
  container().append(el("div", "budget-receipt", text));
}
const count = (n) => Number(n).toLocaleString("en-US"); // 12,345: as the terminal writes it

async function loadUsage() {
  let data;
  try {
    data = await api("GET", `/api/sessions/${encodeURIComponent(sessionId)}/usage`);
  } catch (error) {
    return;
  }
  showUsageNow(data);
  const box = document.getElementById("usage");
  if (!data.turns.length) return;
  box.classList.remove("muted");
  box.textContent = data.turns
    .map((u) => {
      const cost = u.cost === null ? "" : `, ${u.cost.toFixed(4)} ${u.currency}`;
      return `turn ${u.turn}: ${count(u.input_tokens)} in, ${count(u.output_tokens)} out${cost}`;
    })
    .join("\n");
}

// The page's title: the session's title once it has one, until then its first prompt,
// and its id before any prompt (`from`: "title", "prompt" or "id").
function showTitle(text, from) {
  if (!text || (from !== "title" && (view.titled || view.prompted))) return;
  if (from === "title") view.titled = true;
  if (from === "prompt") view.prompted = true;
  document.getElementById("title").textContent = text;
  document.title = text + " — tether";
}

function firstLine(text) {
  const line = String(text).trim().split("\n")[0];
  return line.length > 80 ? line.slice(0, 79) + "…" : line;
}

function apply(record) {
  const data = record.data || {};
  switch (record.type) {
    case "turn/start": {
      view.turn = el("section", "turn");
      view.turn.dataset.turn = data.turn;
      view.turn.append(turnLabel(data.turn));
      transcript().append(view.turn);
      view.stream = null;
      view.running = true;
      break;
    }
    case "user/message": {
      const box = el("div", "user", textOf(data.content));
      showTitle(firstLine(textOf(data.content)), "prompt");
      container().append(box);
      view.stream = null;
      break;
    }
    case "step/start":
      view.step = el("div", "step");
      (view.turn || transcript()).append(view.step);
      view.stream = null;
      break;
    case "step/end":
      view.step = null;
      view.stream = null;
      break;
    case "assistant/chunk": {
      const node = streamBlock(data.kind === "reasoning" ? "reasoning" : "text");
      node.textContent += data.delta;
      break;
    }
    case "assistant/message": {
      if (data.interrupted && view.stream) view.stream.node.classList.add("interrupted");
      // The answer streamed as text; once whole, the server's rendering of its Markdown.
      if (record.html) showMarkdown(view.answer || streamBlock("text"), record.html);
      view.stream = null;
      view.answer = null;
      break;
    }
    case "llm/retry": {
      // The attempt's chunks are abandoned: the answer is what the next attempt streams.
      if (view.step) for (const node of view.step.querySelectorAll(".assistant, .reasoning")) node.remove();
      view.stream = null;
      container().append(el("div", "retry", `retry ${data.attempt}: ${data.error} (in ${data.delay}s)`));
      break;
    }
    case "tool/call":
      view.stream = null;
      renderCall(data, record.shown, record.diffs);
      break;
    case "tool/result":
      renderResult(data, record.shown);
      if (record.shown && record.shown.delegates) view.turnsEnded = true; // a subagent: refresh the links
      break;
    case "tool/stopped":
      renderReceipt(data);
      break;
    case "budget/exhausted":
      renderBudget(data);
      break;
    case "llm/prompt-cut":
    case "elicitation/completed":
      // The model server dropped the front of the prompt, or an MCP server says what it sent
      // the person to its URL for is done: the terminal's notice, as the server words it.
      view.stream = null;
      container().append(el("div", "notice", record.notice));
      break;
    case "plan/updated":
      renderPlan(data);
      break;
    case "session/title":
      showTitle(data.title, "title");
      break;
    case "turn/end": {
      const label = endReason(data.reason, record.outcome);
      const end = el("div", "turn-end " + (data.reason && data.reason.kind), label);
      (view.turn || transcript()).append(end);
      view.turn = null;
      view.step = null;
      view.stream = null;
      view.running = false;
      view.turnsEnded = true;
      break;
    }
    default:
      break;
  }
}

// How long live records took from their append on the server to a painted page (ms),
// the last 1000: what `bench/bench_web.py` reads. Replayed records (older than the page) are
// not counted.
const lag = (window.tetherLag = []);
const pageOpened = Date.now();

function measureLag(records) {
  const appended = records.filter((r) => r.time * 1000 >= pageOpened).map((r) => r.time * 1000);
  if (!appended.length) return;
  requestAnimationFrame(() => {
    const painted = Date.now();
    for (const at of appended) lag.push(painted - at);
    if (lag.length > 1000) lag.splice(0, lag.length - 1000);
  });
}

function onEvents(message) {
  const records = JSON.parse(message.data);
  const follow = atBottom();
  measureLag(records);
  for (const record of records) {
    if (record.seq <= view.lastSeq) {
      view.dups += 1;
      continue;
    }
    if (record.seq !== view.lastSeq + 1) view.gaps += 1;
    view.lastSeq = record.seq;
    apply(record);
  }
  const body = document.body.dataset;
  body.lastSeq = String(view.lastSeq);
  body.gaps = String(view.gaps);
  body.dups = String(view.dups);
  renderStatus();
  if (view.turnsEnded) {
    view.turnsEnded = false;
    loadUsage();
    if (!view.titled) loadSession();
  }
  if (follow) transcript().scrollTop = transcript().scrollHeight;
}

function renderStatus() {
  const status = document.getElementById("status");
  let text = view.live ? (view.running ? "running" : "idle") : "not live here";
  if (!view.live && view.running) text = "running elsewhere";
  status.textContent = text;
  status.className = "status " + text.replace(/\s+/g, "-");
  document.body.dataset.running = String(view.running);
}

function onState(message) {
  const state = JSON.parse(message.data);
  view.live = state.live;
  renderStatus();
  renderQuestions(state.questions);
  renderElicitations(state.elicitations || []);
  renderProgress(state.progress || []);
  for (const child of state.children || []) showChild(child);
}

// A running command's time and last lines of output, under its call until its result.
function renderProgress(progress) {
  const running = new Set(progress.map((p) => p.call_id));
  for (const node of document.querySelectorAll(".tool-progress")) {
    if (!running.has(node.parentElement.dataset.callId)) node.remove();
  }
  for (const p of progress) {
    const call = view.calls.get(p.call_id);
    if (!call || call.querySelector(".tool-output")) continue;
    let node = call.querySelector(".tool-progress");
    if (!node) call.append((node = el("pre", "tool-progress", "")));
    node.textContent = [`running ${Math.floor(p.elapsed)} s`, ...p.tail].join("\n");
  }
}

function renderQuestions(questions) {
  const box = document.getElementById("questions");
  box.replaceChildren();
  for (const call of view.calls.values()) call.classList.remove("asking");
  view.asking = new Set(questions.map((q) => q.call_id));
  for (const q of questions) {
    const call = view.calls.get(q.call_id);
    if (call) call.classList.add("asking");
    const card = el("div", "question");
    card.dataset.questionId = q.id;
    card.append(el("div", "question-title", `Allow ${q.tool}${q.title ? ": " + q.title : ""}?`));
    card.append(renderArgs(q.shown, q.arguments, q.diffs));
    for (const rows of card.querySelectorAll(".diff-rows")) {
      rows.tabIndex = 0; // a long diff scrolls in the card, Allow and Reject stay in view
      rows.setAttribute("aria-label", "the change, scrollable");
    }
    const allow = el("button", "allow", "Allow");
    const reject = el("button", "reject", "Reject");
    allow.type = reject.type = "button";
    allow.addEventListener("click", () => answer(q.id, true));
    reject.addEventListener("click", () => answer(q.id, false));
    card.append(allow);
    if (q.always) {
      const always = el("button", "allow-always", q.always);
      always.type = "button";
      always.addEventListener("click", () => answer(q.id, true, true));
      card.append(always);
    }
    card.append(reject);
    if (q.not_always) card.append(el("div", "not-always", `Not "always": ${q.not_always}`));
    if (q.asked_by) card.append(el("div", "asked-by", `Asked whatever the mode: ${q.asked_by}`));
    box.append(card);
  }
}

// A server's request for input: a form built from its fields, or a link to open. A card
// already shown is kept as it is (what the person typed stays) until it is answered.
function renderElicitations(elicitations) {
  const box = document.getElementById("elicitations");
  const open = new Set(elicitations.map((e) => e.id));
  for (const card of [...box.children]) {
    if (!open.has(card.dataset.elicitationId)) card.remove();
  }
  const shown = new Set([...box.children].map((card) => card.dataset.elicitationId));
  for (const e of elicitations) {
    if (!shown.has(e.id)) box.append(elicitationCard(e));
  }
}

function elicitationCard(e) {
  const card = el("form", "question elicitation");
  card.dataset.elicitationId = e.id;
  card.append(el("div", "question-title", `${e.server} asks: ${e.message}`));
  if (e.mode === "url") {
    const link = el("a", "elicitation-url", e.url);
    link.href = e.url;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    card.append(link);
  }
  for (const f of e.fields) card.append(fieldInput(f));
  const accept = el("button", "allow", e.mode === "url" ? "Opened, continue" : "Submit");
  const decline = el("button", "reject", "Decline");
  const cancel = el("button", "cancel", "Cancel");
  accept.type = "submit";
  decline.type = cancel.type = "button";
  card.addEventListener("submit", (event) => {
    event.preventDefault();
    answerElicitation(e.id, "accept", e.mode === "form" ? formContent(card, e.fields) : undefined);
  });
  decline.addEventListener("click", () => answerElicitation(e.id, "decline"));
  cancel.addEventListener("click", () => answerElicitation(e.id, "cancel"));
  card.append(accept, decline, cancel);
  return card;
}

function fieldInput(f) {
  const label = el("label", "elicitation-field");
  label.append(el("span", "field-label", f.label + (f.required ? " *" : "")));
  let input;
  if (f.kind === "boolean") {
    input = el("input");
    input.type = "checkbox";
    input.checked = f.default === true;
  } else if (f.options.length) {
    input = el("select");
    input.multiple = f.kind === "array";
    if (!f.required && f.kind !== "array") input.append(el("option", "", ""));
    for (const o of f.options) {
      const option = el("option", "", o.title);
      option.value = o.value;
      option.selected = Array.isArray(f.default) ? f.default.includes(o.value) : f.default === o.value;
      input.append(option);
    }
  } else {
    input = el("input");
    input.type = f.kind === "string" ? "text" : "number";
    if (f.kind === "integer") input.step = "1";
    if (f.kind === "number") input.step = "any";
    if (f.minimum !== null) input.min = String(f.minimum);
    if (f.maximum !== null) input.max = String(f.maximum);
    if (f.default !== null) input.value = String(f.default);
    input.required = f.required;
  }
  input.name = f.name;
  label.append(input);
  if (f.description) label.append(el("span", "field-description", f.description));
  return label;
}

function formContent(card, fields) {
  const content = {};
  for (const f of fields) {
    const input = card.elements[f.name];
    if (f.kind === "boolean") content[f.name] = input.checked;
    else if (f.kind === "array") content[f.name] = [...input.selectedOptions].map((o) => o.value);
    else if (input.value === "") continue;
    else if (f.kind === "string") content[f.name] = input.value;
    else content[f.name] = Number(input.value);
  }
  return content;
}

async function answerElicitation(elicitationId, action, content) {
  try {
    const path = `/api/sessions/${encodeURIComponent(sessionId)}/elicitations/${elicitationId}`;
    await api("POST", path, content === undefined ? { action } : { action, content });
  } catch (error) {
    showError(error.message);
  }
}

async function answer(questionId, allow, always = false) {
  try {
    await api("POST", `/api/sessions/${encodeURIComponent(sessionId)}/questions/${questionId}`, { allow, always });
  } catch (error) {
    showError(error.message);
  }
}

async function send(steer) {
  const box = document.getElementById("prompt");
  const text = box.value;
  if (!text.trim()) return;
  try {
    const sent = await api("POST", `/api/sessions/${encodeURIComponent(sessionId)}/prompt`, { text, steer });
    // What was typed while the prompt was being stored is the next prompt: it stays.
    if (box.value === text) box.value = "";
    showError("");
    // What a command answered, or the resources the prompt's mentions attached.
    showSaid(sent.command ? [sent.answer || `/${sent.command} done`] : sent.attached || []);
  } catch (error) {
    showError(error.message);
  }
}

function showSaid(lines) {
  const said = document.getElementById("said");
  said.textContent = lines.join("\n");
  said.hidden = !lines.length;
}

async function stop() {
  try {
    await api("POST", `/api/sessions/${encodeURIComponent(sessionId)}/cancel`);
  } catch (error) {
    showError(error.message);
  }
}

let tasksTimer = null;

async function loadTasks() {
  clearTimeout(tasksTimer);
  let data;
  try {
    data = await api("GET", `/api/sessions/${encodeURIComponent(sessionId)}/tasks`);
  } catch (error) {
    return;
  }
  // A task whose status did not change keeps its element (and the keyboard focus in it);
  // an open one reads its tail again.
  const list = document.getElementById("tasks");
  const shown = new Map([...list.children].map((item) => [item.dataset.taskId, item]));
  const items = data.tasks.map((task) => {
    const kept = shown.get(task.id);
    if (!kept || kept.dataset.status !== task.status) return taskItem(task, kept);
    const details = kept.querySelector("details");
    if (details.open) loadTail(task.id, kept.querySelector(".task-tail"));
    return kept;
  });
  items.forEach((item, at) => {
    if (list.children[at] !== item) list.insertBefore(item, list.children[at] || null);
  });
  while (list.children.length > items.length) list.lastElementChild.remove();
  document.getElementById("no-tasks").hidden = data.tasks.length > 0;
  if (data.tasks.some((t) => t.status === "running")) tasksTimer = setTimeout(loadTasks, 1500);
}

// One task of the panel: its status, its command and tail (folded), and Kill while it runs.
function taskItem(task, replaced) {
  const item = el("li", "task " + task.status);
  item.dataset.taskId = task.id;
  item.dataset.status = task.status;
  const details = el("details", "");
  details.dataset.taskId = task.id;
  const summary = el("summary", "");
  let status = task.status;
  if (task.status !== "running") status += task.signal ? ` (${task.signal})` : ` (exit ${task.exit_code})`;
  summary.append(el("code", "task-id", task.id), el("span", "task-status", status));
  details.append(summary, el("pre", "task-command", "$ " + task.command));
  const tail = el("pre", "task-tail", "");
  details.append(tail);
  details.addEventListener("toggle", () => details.open && loadTail(task.id, tail));
  if (replaced && replaced.querySelector("details").open) {
    details.open = true;
    loadTail(task.id, tail);
  }
  item.append(details);
  if (task.status === "running") {
    const kill = el("button", "kill", "Kill");
    kill.type = "button";
    kill.addEventListener("click", () => killTask(task.id));
    item.append(kill);
  }
  if (replaced) replaced.replaceWith(item);
  return item;
}

async function loadTail(taskId, node) {
  try {
    const data = await api("GET", `/api/sessions/${encodeURIComponent(sessionId)}/tasks/${taskId}`);
    node.textContent = (data.stdout || "") + (data.stderr ? "\n[stderr]\n" + data.stderr : "") || "(no output yet)";
  } catch (error) {
    node.textContent = error.message;
  }
}

async function killTask(taskId) {
  try {
    await api("POST", `/api/sessions/${encodeURIComponent(sessionId)}/tasks/${taskId}/kill`);
  } catch (error) {
    showError(error.message);
  }
  loadTasks();
}

// Rewind, fork and diff of a turn (the /rewind, /fork and /diff of the chat and the editor).
function turnLabel(turn) {
  const label = el("div", "turn-label", "Turn " + turn);
  const actions = el("span", "turn-actions");
  const button = (text, title, run) => {
    const b = el("button", "small", text);
    b.type = "button";
    b.title = title;
    b.addEventListener("click", () => run(turn));
    actions.append(b);
  };
  button("Diff", "What changed in the workspace since this turn started", showDiff);
  button("Rewind", "Take the workspace and/or the conversation back to this turn's start", rewindTo);
  button("Fork", "Go on in a branch of this session made before this turn", forkAt);
  label.append(actions);
  return label;
}

const sessionPath = () => `/api/sessions/${encodeURIComponent(sessionId)}`;

async function showDiff(turn) {
  const section = document.querySelector(`section.turn[data-turn="${turn}"]`);
  const old = section && section.querySelector(".turn-diff");
  if (old) {
    old.remove();
    return;
  }
  try {
    const data = await api("GET", `${sessionPath()}/diff?turn=${turn}`);
    const notes = [];
    if (data.outside.length) notes.push("changed outside the agent: " + data.outside.join(", "));
    if (data.unrestorable.length) notes.push("not in any snapshot: " + data.unrestorable.join(", "));
    const box = el("div", "turn-diff");
    if (!data.files.length) notes.push(`no file changed since turn ${turn} started`);
    for (const note of notes) box.append(el("div", "muted", note));
    for (const file of data.files) box.append(renderDiff(file));
    (section || transcript()).querySelector(".turn-label").after(box);
  } catch (error) {
    showError(error.message);
  }
}

async function rewindTo(turn) {
  const what = prompt(
    `Rewind to the start of turn ${turn}: code (the files), conversation (a branch), or both?`,
    "both",
  );
  if (what === null) return;
  const body = { turn, what: what.trim() || "both" };
  let data;
  try {
    data = await api("POST", `${sessionPath()}/rewind`, body);
  } catch (error) {
    const outside = error.data && error.data.outside;
    if (error.status !== 409 || !outside) return showError(error.message);
    const sure = confirm(
      "These files were changed outside the agent since that turn started and would be " +
        "overwritten:\n" + outside.join("\n") + "\n\nOverwrite them?",
    );
    if (!sure) return;
    try {
      data = await api("POST", `${sessionPath()}/rewind`, { ...body, force: true });
    } catch (again) {
      return showError(again.message);
    }
  }
  alert(data.lines.join("\n"));
  if (data.branch) location.href = "/s/" + encodeURIComponent(data.branch);
}

async function forkAt(turn) {
  try {
    const data = await api("POST", `${sessionPath()}/fork`, { turn });
    location.href = "/s/" + encodeURIComponent(data.id);
  } catch (error) {
    showError(error.message);
  }
}

// The model and the permission mode, switchable from the header: each change is logged
// in the session (`session/config`) and obeyed from the next request or tool call.
let settings = null;

function settingControls() {
  if (settings) return settings;
  const model = el("input", "setting");
  model.id = "model";
  model.setAttribute("list", "model-choices");
  model.setAttribute("aria-label", "Model");
  model.addEventListener("change", () => configure("model", model.value.trim()));
  const choices = el("datalist");
  choices.id = "model-choices";
  const mode = el("select", "setting");
  mode.id = "mode";
  mode.setAttribute("aria-label", "Permission mode");
  for (const name of ["ask", "auto"]) mode.append(el("option", "", name));
  mode.addEventListener("change", () => configure("mode", mode.value));
  const modelLabel = el("label", "", "model ");
  modelLabel.append(model, choices);
  const modeLabel = el("label", "", "mode ");
  modeLabel.append(mode);
  // The sandbox of the next processes, shown with the network policy (when there is one).
  const sandbox = el("select", "setting");
  sandbox.id = "sandbox";
  sandbox.setAttribute("aria-label", "Sandbox");
  for (const name of ["read-only", "workspace-write", "full-access"]) sandbox.append(el("option", "", name));
  sandbox.addEventListener("change", () => configure("sandbox", sandbox.value));
  const network = el("span", "network");
  const sandboxLabel = el("label", "sandbox", "sandbox ");
  sandboxLabel.append(sandbox, network);
  settings = { model, mode, sandbox, network, sandboxLabel, labels: [modelLabel, modeLabel] };
  api("GET", "/api/models").then((data) => {
    const names = new Set([data.default_model, ...data.providers.map((p) => p + ":")]);
    for (const name of names) if (name) choices.append(el("option", "", name));
  }, () => {});
  return settings;
}

let configuring = 0; // how many switches were asked: only the latest one's answer is shown

async function configure(option, value) {
  if (!value) return;
  const mine = ++configuring;
  try {
    const now = await api("POST", `/api/sessions/${encodeURIComponent(sessionId)}/config`, { option, value });
    if (mine !== configuring) return; // a later switch answers for the header and the error line
    // What was typed into the model field while this was under way stays there.
    const typing = document.activeElement === settings.model && settings.model.value.trim() !== value;
    if (!typing) settings.model.value = now.model;
    settings.mode.value = now.mode;
    showSandbox(now.sandbox);
    showError("");
  } catch (error) {
    if (mine !== configuring) return;
    showError(`${option}: ${error.message}`);
    try {
      const info = await api("GET", `/api/sessions/${encodeURIComponent(sessionId)}`);
      settings.model.value = info.model || ""; // back to what the session has
      settings.mode.value = info.mode;
      showSandbox(info.sandbox);
    } catch (_) {
      // the error above says enough
    }
  }
}

function showSandbox(sandbox) {
  if (!settings || !sandbox) return;
  settings.sandbox.value = sandbox.mode;
  settings.network.textContent = ` (${sandbox.network})`;
}

// The context in use and the cost so far, in the header: always in view.
function usageNow() {
  let node = document.getElementById("usage-now");
  if (!node) {
    node = el("span", "usage-now", "context -");
    node.id = "usage-now";
  }
  return node;
}

function showUsageNow(data) {
  const context = data.context;
  let text = "context -";
  if (context && context.window) {
    const share = Math.round((100 * context.used) / context.window);
    text = `context ${count(context.used)} / ${count(context.window)} (${share}%, ${count(context.window - context.used)} left)`;
  } else if (context) text = `context ${count(context.used)} tokens`;
  if (data.cost !== null && data.cost !== undefined) text += ` · cost ${data.cost.toFixed(4)} ${data.currency}`;
  usageNow().textContent = text;
}

// A subagent: listed in the side panel, and nested under the task call that started it
// with its own live transcript a click away (its page), from the moment it starts.
function showChild(child) {
  const href = "/s/" + encodeURIComponent(child.id);
  const children = document.getElementById("children");
  if (!children.querySelector(`a[href="${CSS.escape(href)}"]`)) {
    const item = el("li", "");
    const link = el("a", "", child.task || child.title || child.id);
    link.href = href;
    item.append(link);
    children.append(item);
    document.getElementById("no-children").hidden = true;
  }
  if (child.call) view.children.set(child.call, child);
  const call = child.call && view.calls.get(child.call);
  if (call && !call.querySelector("a.child")) {
    const open = el("a", "child", "the subagent's live transcript ›");
    open.href = href;
    open.target = "_blank";
    open.rel = "noopener";
    const nested = el("div", "subagent");
    nested.append(open);
    (call.querySelector(".subagent-task") || call.querySelector(".args")).after(nested);
  }
}

async function loadSession() {
  try {
    const info = await api("GET", `/api/sessions/${encodeURIComponent(sessionId)}`);
    showTitle(info.title || info.id, info.title ? "title" : "id");
    const meta = document.getElementById("meta");
    const controls = settingControls();
    const usage = usageNow();
    if (controls.labels[0].parentNode === meta) {
      // Already shown: the controls stay where they are (moving them would take the
      // focus from a model name being typed); what follows them is shown anew.
      meta.firstChild.textContent = info.cwd;
      while (usage.nextSibling) usage.nextSibling.remove();
    } else {
      meta.replaceChildren(el("span", "", info.cwd), ...controls.labels, usage);
    }
    if (document.activeElement !== controls.model) controls.model.value = info.model || "";
    controls.mode.value = info.mode;
    if (info.sandbox) {
      meta.append(controls.sandboxLabel);
      showSandbox(info.sandbox);
    }
    if (info.parent) {
      const up = el("a", "", "parent session");
      up.href = "/s/" + encodeURIComponent(info.parent);
      meta.append(up);
    }
    if (info.live === "elsewhere") meta.append(el("span", "warn", liveWhere(info.holder)));
    for (const child of info.children) showChild(child);
  } catch (error) {
    showError(error.status === 404 ? "No such session." : error.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("prompt-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send(false);
  });
  const box = document.getElementById("prompt");
  const picker = makePicker(box, document.getElementById("picker"), (kind) => {
    const path = `/api/sessions/${encodeURIComponent(sessionId)}/${kind === "command" ? "commands" : "resources"}`;
    return api("GET", path).then((data) => (kind === "command" ? data.commands : data.servers));
  });
  // Enter queues, Ctrl-Enter (⌘-Enter) steers, Shift-Enter is a new line, Esc stops; while
  // the picker is open, its keys come first.
  box.addEventListener("keydown", (event) => {
    if (picker.key(event)) return;
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      send(event.ctrlKey || event.metaKey);
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !event.defaultPrevented && view.running) {
      event.preventDefault();
      stop();
    }
  });
  document.getElementById("steer").addEventListener("click", () => send(true));
  document.getElementById("stop").addEventListener("click", stop);
  loadSession();
  loadTasks();
  const source = new EventSource(withToken(`/api/sessions/${encodeURIComponent(sessionId)}/events`));
  source.addEventListener("events", onEvents);
  source.addEventListener("state", onState);
  source.addEventListener("failed", (message) => {
    source.close();
    document.body.dataset.connected = "false";
    showError(JSON.parse(message.data).message);
  });
  source.addEventListener("open", () => {
    document.body.dataset.connected = "true";
  });
  source.addEventListener("error", () => {
    document.body.dataset.connected = "false";
  });
});
