// The sessions page: every stored and live session, a filter, and the new-session form.
"use strict";

let filterTimer = null;
let pendingTimer = null;
const PAGE = 200; // rows asked for at first, and added by "Show more"
const REFRESH_MS = 3000; // the listing is read again this often while the page is seen
const PENDING_MS = 300; // … and sooner while the server still folds some sessions' figures
let limit = PAGE;
let asked = 0; // the listings asked for: only the latest one's answer is shown
let listingFailed = false; // whether the error line holds the listing's own failure

async function loadSessions() {
  const query = new URLSearchParams();
  const needle = document.getElementById("filter").value.trim();
  if (needle) query.set("q", needle);
  const cwd = document.getElementById("filter-cwd").value;
  if (cwd) query.set("cwd", cwd);
  const state = document.getElementById("filter-state").value;
  if (state) query.set("state", state);
  if (document.getElementById("live-only").checked) query.set("live", "1");
  query.set("sort", document.getElementById("sort").value);
  query.set("limit", String(limit));
  clearTimeout(pendingTimer);
  const mine = ++asked;
  try {
    const data = await api("GET", "/api/sessions?" + query.toString());
    if (mine !== asked) return; // a later listing was asked for meanwhile
    render(data.sessions);
    document.body.dataset.listedFor = query.toString();
    showDirectories(data.directories);
    showCount(data.sessions.length, data.total);
    if (listingFailed) showError(""); // only the listing's own error: a failed create's stays
    listingFailed = false;
    if (data.pending) pendingTimer = setTimeout(loadSessions, PENDING_MS);
  } catch (error) {
    listingFailed = true;
    showError("Could not list sessions: " + error.message);
  }
}

const count = (n) => Number(n).toLocaleString("en-US");

function contextText(context) {
  if (!context) return "-";
  if (!context.window) return count(context.used);
  return `${count(context.used)} / ${count(context.window)} (${Math.round((100 * context.used) / context.window)}%)`;
}

function costText(session) {
  return session.cost === null || session.cost === undefined ? "-" : `${session.cost.toFixed(4)} ${session.currency}`;
}

function liveText(session) {
  if (session.live === "elsewhere") return liveWhere(session.holder);
  if (session.live !== "here") return "";
  const host = session.holder && session.holder.host ? ` (host ${session.holder.host})` : "";
  return (session.running ? "running" : "live") + host;
}

function render(sessions) {
  const body = document.querySelector("#sessions tbody");
  const rows = document.createDocumentFragment();
  for (const session of sessions) {
    const row = el("tr", session.live ? "live" : "");
    row.dataset.id = session.id;
    const titleCell = el("td");
    const link = el("a", "title", session.title || session.id);
    link.href = "/s/" + encodeURIComponent(session.id);
    titleCell.append(link);
    if (session.parent) titleCell.append(el("span", "muted", " (subagent)"));
    row.append(
      titleCell,
      el("td", "cwd", session.cwd || "-"),
      el("td", "model", session.model || "-"),
      el("td", "when", when(session.last_activity)),
      el("td", "turns", String(session.turns)),
      el("td", "context", contextText(session.context)),
      el("td", "cost", costText(session)),
      el("td", "live-cell " + (session.running ? "running" : ""), liveText(session)),
    );
    rows.append(row);
  }
  body.replaceChildren(rows);
  document.getElementById("empty").hidden = sessions.length > 0;
  document.body.dataset.listed = String(sessions.length);
  performance.mark("tether-listed"); // what bench/bench_web.py reads
}

function showDirectories(directories) {
  const select = document.getElementById("filter-cwd");
  const chosen = select.value;
  const known = Array.from(select.options, (o) => o.value).slice(1);
  if (known.length === directories.length && known.every((d, i) => d === directories[i])) return;
  const options = [el("option", "", "all")];
  options[0].value = "";
  for (const directory of directories) options.push(el("option", "", directory));
  select.replaceChildren(...options);
  select.value = directories.includes(chosen) ? chosen : "";
}

function showCount(shown, total) {
  const noun = total === 1 ? "session" : "sessions";
  document.getElementById("shown").textContent =
    shown < total ? `${count(shown)} of ${count(total)} ${noun}` : `${count(total)} ${noun}`;
  document.getElementById("more").hidden = shown >= total;
}

async function loadModels() {
  try {
    const data = await api("GET", "/api/models");
    const list = document.getElementById("providers");
    for (const provider of data.providers) list.append(el("option", "", provider));
    if (data.default_model) document.getElementById("new-model").placeholder = data.default_model;
    // The defaults arrive after the form is shown: a choice made before then stands.
    const mode = document.getElementById("new-mode");
    if (!mode.dataset.chosen) mode.value = data.default_mode;
    const sandbox = document.getElementById("new-sandbox");
    for (const name of data.sandbox_modes) sandbox.append(el("option", "", name));
    if (data.default_sandbox && !sandbox.dataset.chosen) sandbox.value = data.default_sandbox;
    document.getElementById("new-sandbox-label").hidden = data.sandbox_modes.length === 0;
    const cwd = document.getElementById("new-cwd");
    if (!cwd.value && data.cwd) cwd.value = data.cwd; // the server's directory by default
  } catch (error) {
    showError("Could not read the models: " + error.message);
  }
}

async function createSession(event) {
  event.preventDefault();
  const body = {
    cwd: document.getElementById("new-cwd").value.trim(),
    mode: document.getElementById("new-mode").value,
  };
  const model = document.getElementById("new-model").value.trim();
  if (model) body.model = model;
  const sandbox = document.getElementById("new-sandbox").value;
  if (sandbox) body.sandbox = sandbox;
  try {
    const created = await api("POST", "/api/sessions", body);
    window.location.href = "/s/" + encodeURIComponent(created.id);
  } catch (error) {
    showError(error.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("new-session").addEventListener("submit", createSession);
  for (const id of ["new-mode", "new-sandbox"]) {
    const field = document.getElementById(id);
    field.addEventListener("change", () => (field.dataset.chosen = "1"));
  }
  document.getElementById("filter").addEventListener("input", () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(loadSessions, 150);
  });
  for (const id of ["live-only", "filter-cwd", "filter-state", "sort"]) {
    document.getElementById(id).addEventListener("change", () => {
      limit = PAGE;
      loadSessions();
    });
  }
  document.getElementById("more").addEventListener("click", () => {
    limit += PAGE;
    loadSessions();
  });
  loadModels();
  loadSessions();
  // The listing is read every REFRESH_MS while the page is seen; a tab in the
  // background asks nothing, and reads it again as soon as it is shown.
  setInterval(() => {
    if (!document.hidden) loadSessions();
  }, REFRESH_MS);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) loadSessions();
  });
});
