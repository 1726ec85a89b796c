// Shared by both pages: the API client (CSRF header on every state change) and small helpers.
"use strict";

function csrfToken() {
  // Named by port, as the server names it: two servers on one host keep theirs apart.
  const name = location.port ? `tether_csrf_${location.port}` : "tether_csrf";
  const match = document.cookie.match(new RegExp(`(?:^|;\\s*)${name}=([^;]+)`));
  return match ? decodeURIComponent(match[1]) : "";
}

async function api(method, path, body) {
  const init = { method, headers: { "X-Tether-CSRF": csrfToken() }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    const error = new Error((data && data.error) || response.statusText);
    error.status = response.status;
    error.data = data;
    throw error;
  }
  return data;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function liveWhere(holder) {
  // Where a session is live elsewhere: its host where hosts share sessions, else its process.
  if (!holder) return "live elsewhere";
  if (holder.host) return "live on host " + holder.host;
  return holder.pid ? "live in process " + holder.pid : "live in another process";
}

function when(seconds) {
  if (!seconds) return "-";
  const date = new Date(seconds * 1000);
  return date.toLocaleString();
}

function showError(message) {
  const bar = document.getElementById("error");
  if (!bar) return;
  bar.textContent = message || "";
  bar.hidden = !message;
}
