// An editor's side of ACP written with the official TypeScript SDK
// (@agentclientprotocol/sdk, its v1 client app): it spawns an agent, runs a
// plan of steps against it and prints one JSON report on stdout.
//
//   node typescript_client.mjs PLAN_JSON
//
// The plan: {"sdk": the directory whose node_modules holds the SDK,
// "command": the agent's command line, "cwd": its working directory,
// "steps": [...]}. The agent gets this process's environment, a session
// of its own (so the processes it leaves behind can be found) and its
// stderr. Each step is an object with an "op":
//
//   initialize                   protocol version 1, no client capabilities
//   new {cwd}                    session/new; later steps use its session id
//   load {sessionId, cwd}        session/load; later steps use that session id
//   list                         session/list
//   prompt {text, answer?}       session/prompt, awaited; permission requests
//                                are answered with the option id `answer`
//                                ("cancelled": the outcome cancelled)
//   start {text}                 session/prompt, not awaited
//   read {path}                  reads a file (a FIFO: until its writer closes)
//   cancel                       session/cancel
//   finish                       awaits the prompt `start` sent
//   checkpoint {name}            prints {"checkpoint": name, "pid": the agent's
//                                pid, "steps": the results so far} and waits
//                                for a line on stdin
//
// The report: {"pid", "steps": one result per step, "updates": every
// session/update's params in order, "permissions": every permission request's
// params with the answer given, "errors": every message that failed the SDK's
// schema validation, "exit": the agent's exit code}. The SDK validates the
// requests and notifications it receives and logs a notification that fails;
// the answers to the client's own requests are checked here against the same
// generated zod schemas. As those schemas drop an invalid optional value
// rather than fail, a message the parse did not keep whole is an error too.

import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const plan = JSON.parse(process.argv[2]);
const require = createRequire(`${plan.sdk}/package.json`);
const entry = require.resolve("@agentclientprotocol/sdk");
const acp = await import(pathToFileURL(entry).href);
// The SDK's generated zod schemas: the stable ones its client parses with, and
// the full ones (stable plus unstable), which know every field of the protocol.
const stable = await import(new URL("../schema/zod.gen.js", pathToFileURL(entry)).href);
const full = await import(new URL("../unstable/schema/zod.gen.js", pathToFileURL(entry)).href);

const report = { pid: null, steps: [], updates: [], permissions: [], errors: [], exit: null };

// The SDK reports a notification that fails its schema with console.error.
const logError = console.error;
console.error = (...args) => {
  report.errors.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
  logError(...args);
};

const answers = { current: "allow-once" };

// The path of the first value sent that a parse dropped or changed, or null
// (the defaults a parse adds are not differences).
function difference(sent, seen, path = "") {
  if (sent === null || seen === null || typeof sent !== "object" || typeof seen !== "object") {
    return sent === seen ? null : path || "/";
  }
  if (Array.isArray(sent) !== Array.isArray(seen) || (Array.isArray(sent) && sent.length !== seen.length)) {
    return path || "/";
  }
  for (const key of Object.keys(sent)) {
    const found = difference(sent[key], seen[key], `${path}/${key}`);
    if (found !== null) {
      return found;
    }
  }
  return null;
}

// The schemas salvage an invalid optional value (they drop it) and drop
// fields they do not know, so a message is valid only when the full schema's
// parse keeps it whole.
function lossless(what, schema, sent) {
  const parsed = full[schema].safeParse(sent);
  const changed = parsed.success ? difference(sent, JSON.parse(JSON.stringify(parsed.data))) : "/";
  if (changed !== null) {
    report.errors.push(`${what}: the schema's parse changed ${changed}`);
  }
}

function checked(schema, method, result) {
  const parsed = stable[schema].safeParse(result);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((issue) => `/${issue.path.join("/")}: ${issue.message}`);
    report.errors.push(`${method} answer: ${issues.join("; ")}`);
  } else {
    lossless(`${method} answer`, schema, result);
  }
  return result;
}

// Received requests and notifications as sent, before the SDK parses them.
const received = { [acp.methods.client.session.update]: [], [acp.methods.client.session.requestPermission]: [] };
const tap = new TransformStream({
  transform(message, controller) {
    received[message.method]?.push(message.params);
    controller.enqueue(message);
  },
});

function compareReceived(method, schema, handled) {
  const sent = received[method];
  if (sent.length !== handled) {
    report.errors.push(`${method}: the SDK passed on ${handled} of ${sent.length}`);
  }
  sent.forEach((params, index) => lossless(`${method} ${index}`, schema, params));
}

const stdinLines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

const app = acp
  .client({ name: "tether-test" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    report.updates.push(params);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    const answer = answers.current;
    report.permissions.push({ ...params, answer });
    if (answer === "cancelled") {
      return { outcome: { outcome: "cancelled" } };
    }
    return { outcome: { outcome: "selected", optionId: answer } };
  });

const agent = spawn(plan.command[0], plan.command.slice(1), {
  cwd: plan.cwd,
  stdio: ["pipe", "pipe", "inherit"],
  detached: true,
});
report.pid = agent.pid;
const exited = new Promise((resolve) => agent.on("exit", (code, signal) => resolve(code ?? signal)));
const wire = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
const stream = { writable: wire.writable, readable: wire.readable.pipeThrough(tap) };

async function run(ctx) {
  const state = { sessionId: null, pending: null, cancelledAt: null };
  const prompt = (text) =>
    ctx.request(acp.methods.agent.session.prompt, {
      sessionId: state.sessionId,
      prompt: [{ type: "text", text }],
    });
  const stopped = (method, response) => {
    checked("zPromptResponse", method, response);
    return { stopReason: response.stopReason };
  };
  const steps = {
    initialize: async () => {
      const response = await ctx.request(acp.methods.agent.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: {},
      });
      checked("zInitializeResponse", "initialize", response);
      return { sdkProtocolVersion: acp.PROTOCOL_VERSION, protocolVersion: response.protocolVersion };
    },
    new: async (step) => {
      const response = await ctx.request(acp.methods.agent.session.new, { cwd: step.cwd, mcpServers: [] });
      checked("zNewSessionResponse", "session/new", response);
      state.sessionId = response.sessionId;
      return { sessionId: response.sessionId };
    },
    load: async (step) => {
      const response = await ctx.request(acp.methods.agent.session.load, {
        sessionId: step.sessionId,
        cwd: step.cwd,
        mcpServers: [],
      });
      checked("zLoadSessionResponse", "session/load", response);
      state.sessionId = step.sessionId;
      return {};
    },
    list: async () => {
      const response = await ctx.request(acp.methods.agent.session.list, {});
      checked("zListSessionsResponse", "session/list", response);
      return { sessionIds: response.sessions.map((s) => s.sessionId) };
    },
    prompt: async (step) => {
      answers.current = step.answer ?? "allow-once";
      return stopped("session/prompt", await prompt(step.text));
    },
    start: async (step) => {
      state.pending = prompt(step.text);
      state.pending.catch(() => {});
      return {};
    },
    read: async (step) => ({ text: await readFile(step.path, "utf8") }),
    cancel: async () => {
      state.cancelledAt = performance.now();
      await ctx.notify(acp.methods.agent.session.cancel, { sessionId: state.sessionId });
      return {};
    },
    finish: async () => {
      const result = stopped("session/prompt", await state.pending);
      if (state.cancelledAt !== null) {
        result.secondsAfterCancel = (performance.now() - state.cancelledAt) / 1000;
      }
      return result;
    },
    checkpoint: async (step) => {
      const said = { checkpoint: step.name, pid: agent.pid, steps: report.steps };
      process.stdout.write(`${JSON.stringify(said)}\n`);
      await stdinLines.next();
      return {};
    },
  };
  for (const step of plan.steps) {
    try {
      report.steps.push({ op: step.op, ...(await steps[step.op](step)) });
    } catch (error) {
      report.steps.push({ op: step.op, error: error?.message ?? String(error) });
      break;
    }
  }
}

try {
  await app.connectWith(stream, run);
} finally {
  agent.stdin.end();
  report.exit = await exited;
  const { update, requestPermission } = acp.methods.client.session;
  compareReceived(update, "zSessionNotification", report.updates.length);
  compareReceived(requestPermission, "zRequestPermissionRequest", report.permissions.length);
  process.stdout.write(`${JSON.stringify({ report })}\n`);
  process.exit(0);
}
