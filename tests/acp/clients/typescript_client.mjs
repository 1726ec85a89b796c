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
// generated zod schemas.

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
const zod = await import(new URL("../schema/zod.gen.js", pathToFileURL(entry)).href);

const report = { pid: null, steps: [], updates: [], permissions: [], errors: [], exit: null };

// The SDK reports a notification that fails its schema with console.error.
const logError = console.error;
console.error = (...args) => {
  report.errors.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
  logError(...args);
};

const answers = { current: "allow-once" };

function checked(schema, method, result) {
  const parsed = schema.safeParse(result);
  if (!parsed.success) {
    report.errors.push(`${method} answer: ${parsed.error.message}`);
  }
  return result;
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
const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));

async function run(ctx) {
  const state = { sessionId: null, pending: null, cancelledAt: null };
  const prompt = (text) =>
    ctx.request(acp.methods.agent.session.prompt, {
      sessionId: state.sessionId,
      prompt: [{ type: "text", text }],
    });
  const stopped = (method, response) => {
    checked(zod.zPromptResponse, method, response);
    return { stopReason: response.stopReason };
  };
  const steps = {
    initialize: async () => {
      const response = await ctx.request(acp.methods.agent.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: {},
      });
      checked(zod.zInitializeResponse, "initialize", response);
      return { sdkProtocolVersion: acp.PROTOCOL_VERSION, protocolVersion: response.protocolVersion };
    },
    new: async (step) => {
      const response = await ctx.request(acp.methods.agent.session.new, { cwd: step.cwd, mcpServers: [] });
      checked(zod.zNewSessionResponse, "session/new", response);
      state.sessionId = response.sessionId;
      return { sessionId: response.sessionId };
    },
    load: async (step) => {
      const response = await ctx.request(acp.methods.agent.session.load, {
        sessionId: step.sessionId,
        cwd: step.cwd,
        mcpServers: [],
      });
      checked(zod.zLoadSessionResponse, "session/load", response);
      state.sessionId = step.sessionId;
      return {};
    },
    list: async () => {
      const response = await ctx.request(acp.methods.agent.session.list, {});
      checked(zod.zListSessionsResponse, "session/list", response);
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
  process.stdout.write(`${JSON.stringify({ report })}\n`);
  process.exit(0);
}
