"""The ACP bridge: tether served to editors over the Agent Client Protocol.

* :mod:`tether.acp.bridge` — the plugin: ownership of the client's sessions, teardown;
* :mod:`tether.acp.record` — one session as the bridge keeps it, and its client link;
* :mod:`tether.acp.prompts` — the stop reason a prompt's turn handle answers it with;
* :mod:`tether.acp.asking` — ``session/request_permission``, failing closed;
* :mod:`tether.acp.errors` — the bridge's errors;
* :mod:`tether.acp.server` — the agent side of ACP over the bridge;
* :mod:`tether.acp.rpc` — JSON-RPC: dispatch to the server, requests to the client;
* :mod:`tether.acp.wire` — the wire types, generated from the official ACP schema;
* :mod:`tether.acp.updates` — session events as ``session/update`` payloads;
* :mod:`tether.acp.replay` — ``session/load``'s replay of a stored session;
* :mod:`tether.acp.content` — prompt content blocks as a user message;
* :mod:`tether.acp.permissions` — modes and ``session/request_permission``;
* :mod:`tether.acp.transport`, :mod:`tether.acp.stdio` — frames on stdio;
* :mod:`tether.acp.gate` — strict JSON-RPC checks before a frame is dispatched;
* :mod:`tether.acp.source` — where a server's bridge comes from, launched once;
* :mod:`tether.acp.v2` — protocol version 2 (the draft), for a client that negotiates it;
* :mod:`tether.acp.remote`, :mod:`tether.acp.endpoint` — ACP over the network
  (``tether web``'s ``/acp``): connections resumed by frame number, over
  streamable HTTP and WebSocket.

The ``tether acp`` command itself is :mod:`tether.cli.acp`.

Nothing is imported here, so ``tether acp`` loads only what its handshake needs.
"""
