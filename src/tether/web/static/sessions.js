// The sessions page: every stored and live session, a filter, and the new-session form.
"use strict";

let filterTimer = null;

async function loadSessions() {
  const query = new URLSearchParams();
  const needle = document.getElementById("filter").value.trim();
  if (needle) query.set("q", needle);
  if (document.getElementById("live-only").checked) query.set("live", "1");
  try {
    const data = await api("GET", "/api/sessions?" + query.toString());
    render(data.sessions);
    showError("");
  } catch (error) {
    showError("Could not list sessions: " + error.message);
  }
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
    );
    let live = "";
    if (session.live === "here") live = session.running ? "running" : "live";
    else if (session.live === "elsewhere") live = liveWhere(session.holder);
    row.append(el("td", "live-cell " + (session.running ? "running" : ""), live));
    rows.append(row);
  }
  body.replaceChildren(rows);
  document.getElementById("empty").hidden = sessions.length > 0;
}

async function loadModels() {
  try {
    const data = await api("GET", "/api/models");
    const list = document.getElementById("providers");
    for (const provider of data.providers) list.append(el("option", "", provider));
    if (data.default_model) document.getElementById("new-model").placeholder = data.default_model;
    document.getElementById("new-mode").value = data.default_mode;
    const sandbox = document.getElementById("new-sandbox");
    for (const mode of data.sandbox_modes) sandbox.append(el("option", "", mode));
    if (data.default_sandbox) sandbox.value = data.default_sandbox;
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
  document.getElementById("filter").addEventListener("input", () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(loadSessions, 150);
  });
  document.getElementById("live-only").addEventListener("change", loadSessions);
  loadModels();
  loadSessions();
  // The listing is read every 3 s while the page is seen; a tab in the
  // background asks nothing, and reads it again as soon as it is shown.
  setInterval(() => {
    if (!document.hidden) loadSessions();
  }, 3000);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) loadSessions();
  });
});
