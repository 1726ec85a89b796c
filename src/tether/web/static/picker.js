// The prompt box's picker: `/` at the start of the prompt offers the session's slash commands
// (a server's prompts with their arguments), `@` at the start of a word the resources its MCP
// servers list. Arrows move, Enter or Tab takes the highlighted entry, Esc closes the list.
// Every text from a server is set as text (textContent), never as HTML.
"use strict";

// What the text before the caret asks for: {kind: "command" | "resource", start, query}, or
// null. A command while the prompt is `/name` with no space yet; a resource while the word
// at the caret starts with `@`.
function pickerToken(text, caret) {
  const before = text.slice(0, caret);
  const command = /^\/([a-z0-9_-]*)$/.exec(before);
  if (command) return { kind: "command", start: 0, query: command[1] };
  const mention = /(^|\s)@(\S*)$/.exec(before);
  if (mention) return { kind: "resource", start: caret - mention[2].length - 1, query: mention[2] };
  return null;
}

function commandEntries(commands, query) {
  return commands
    .filter((c) => c.name.includes(query))
    .map((c) => ({
      insert: "/" + c.name + " ",
      label: "/" + c.name,
      detail: c.description,
      args: c.arguments.map((a) => a.name + (a.required ? "" : "?") + (a.description ? ": " + a.description : "")),
    }));
}

function resourceEntries(servers, query) {
  const entries = [];
  for (const server of servers) {
    const named = server.server + ":";
    if (server.error) {
      if (!named.startsWith(query) && !query.startsWith(named)) continue;
      entries.push({ label: server.server, detail: "could not list its resources: " + server.error, disabled: true });
      continue;
    }
    for (const r of server.resources) {
      const mention = "@" + server.server + ":" + r.uri;
      if (!mention.slice(1).toLowerCase().includes(query.toLowerCase())) continue;
      const about = [r.title || r.name, r.description, r.mime_type].filter(Boolean).join(" · ");
      entries.push({ insert: mention + " ", label: mention, detail: about, args: [] });
    }
  }
  return entries;
}

function makePicker(box, list, load) {
  // `offered`: what was loaded for the list open now ({kind, answer}), read once per opening.
  const state = { token: null, entries: [], active: -1, asked: 0, offered: null };

  function choosable() {
    return state.entries.map((e, i) => (e.disabled ? -1 : i)).filter((i) => i >= 0);
  }

  function offered(kind) {
    if (!state.offered || state.offered.kind !== kind) state.offered = { kind, answer: load(kind) };
    return state.offered.answer;
  }

  function close() {
    state.offered = null;
    state.token = null;
    state.entries = [];
    state.active = -1;
    list.hidden = true;
    list.replaceChildren();
    box.removeAttribute("aria-activedescendant");
  }

  function highlight(index) {
    state.active = index;
    for (const [i, node] of [...list.children].entries()) {
      node.setAttribute("aria-selected", String(i === index));
      if (i === index) {
        box.setAttribute("aria-activedescendant", node.id);
        node.scrollIntoView({ block: "nearest" });
      }
    }
  }

  function move(step) {
    const indexes = choosable();
    if (!indexes.length) return;
    const at = indexes.indexOf(state.active);
    const next = at < 0 ? (step > 0 ? 0 : indexes.length - 1) : (at + step + indexes.length) % indexes.length;
    highlight(indexes[next]);
  }

  function take(index) {
    const entry = state.entries[index];
    if (!entry || entry.disabled || !state.token) return;
    const caret = box.selectionStart;
    const text = box.value;
    box.value = text.slice(0, state.token.start) + entry.insert + text.slice(caret);
    const at = state.token.start + entry.insert.length;
    box.setSelectionRange(at, at);
    close();
    box.focus();
  }

  function option(entry, index) {
    const node = el("li", "pick" + (entry.disabled ? " pick-error" : ""));
    node.id = "pick-" + index;
    node.setAttribute("role", "option");
    node.setAttribute("aria-selected", "false");
    if (entry.disabled) node.setAttribute("aria-disabled", "true");
    node.append(el("span", "pick-label", entry.label));
    if (entry.detail) node.append(el("span", "pick-detail", entry.detail));
    for (const arg of entry.args || []) node.append(el("span", "pick-arg", arg));
    node.addEventListener("mousedown", (event) => event.preventDefault()); // the box keeps focus
    node.addEventListener("click", () => take(index));
    return node;
  }

  async function update() {
    const token = pickerToken(box.value, box.selectionStart);
    if (!token) {
      close();
      return;
    }
    const asked = ++state.asked;
    let entries;
    try {
      const answer = await offered(token.kind);
      entries = token.kind === "command" ? commandEntries(answer, token.query) : resourceEntries(answer, token.query);
    } catch (error) {
      entries = [{ label: token.kind === "command" ? "commands" : "resources", detail: error.message, disabled: true }];
    }
    if (asked !== state.asked) return; // a later keystroke asked again
    if (!entries.length) {
      close();
      return;
    }
    state.token = token;
    state.entries = entries;
    state.active = -1;
    list.replaceChildren(...entries.map(option));
    list.hidden = false;
    move(1);
  }

  // Handles a key of the box while the list is open; whether it did.
  function key(event) {
    if (list.hidden) return false;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      move(event.key === "ArrowDown" ? 1 : -1);
    } else if ((event.key === "Enter" && !event.shiftKey) || event.key === "Tab") {
      if (state.active < 0) return false;
      take(state.active);
    } else if (event.key === "Escape") {
      close();
    } else {
      return false;
    }
    event.preventDefault();
    event.stopPropagation();
    return true;
  }

  box.addEventListener("input", update);
  box.addEventListener("blur", close); // a click on an entry keeps the focus (mousedown)
  return { key, close };
}
