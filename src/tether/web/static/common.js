// Shared by both pages: the API client (the access token on every request) and small helpers.
"use strict";

// The token comes in the URL tether web printed (?token=…). It is kept in this origin's
// localStorage (scheme, host and port: no page of another server can read it) and sent as a
// header, never as a cookie: a browser sends a host's cookies to every port of it.
const ACCESS_TOKEN = (() => {
  const params = new URLSearchParams(location.search);
  const given = params.get("token");
  if (given) {
    localStorage.setItem("tether_token", given);
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? "?" + rest : "") + location.hash);
  }
  return localStorage.getItem("tether_token") || "";
})();

function withToken(path) {
  // For an EventSource, which cannot send a header: the token as a query parameter.
  return path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(ACCESS_TOKEN);
}

async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + ACCESS_TOKEN }, credentials: "omit" };
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

const DATE_TIME = new Intl.DateTimeFormat(undefined, { dateStyle: "short", timeStyle: "medium" });

function when(seconds) {
  if (!seconds) return "-";
  return DATE_TIME.format(new Date(seconds * 1000)); // one formatter: a long listing formats fast
}

function showError(message) {
  const bar = document.getElementById("error");
  if (!bar) return;
  bar.textContent = message || "";
  bar.hidden = !message;
}
