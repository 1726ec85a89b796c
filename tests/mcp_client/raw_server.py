"""A hand-written stdio MCP server that misbehaves on purpose: ``python raw_server.py``.

A 2025-era server: it answers ``initialize`` and ``tools/list`` (one tool, ``bad``, and one with
an unusable schema, ``broken``), and answers every ``tools/call`` with a
result whose content is not valid MCP content. Only the standard library, so
it starts in milliseconds (the benchmarks use it too, with ``--good``: then
``bad`` answers a valid text result). Any other request, ``server/discover``
among them, is answered "method not found", as JSON-RPC says; with ``--mute``
it is not answered at all. With ``--resources`` it declares the ``resources``
capability, and ``resources/list`` is one of those requests it does not know;
with ``--stuck-resources`` it declares it too, and never answers ``resources/list``.
"""

from __future__ import annotations

import json
import sys

GOOD = "--good" in sys.argv
MUTE = "--mute" in sys.argv
STUCK = "--stuck-resources" in sys.argv
RESOURCES = "--resources" in sys.argv or STUCK


def answer(request_id: object, result: object) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    if "id" not in message:
        continue
    if method == "initialize":
        answer(
            message["id"],
            {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}, **({"resources": {}} if RESOURCES else {})},
                "serverInfo": {"name": "raw", "version": "1"},
            },
        )
    elif method == "tools/list":
        tools = [{"name": "bad", "inputSchema": {"type": "object"}}]
        if not GOOD:
            tools.append(
                {
                    "name": "broken",
                    "inputSchema": {"type": "object", "properties": {"a": {"type": 3}}},
                }
            )
        answer(message["id"], {"tools": tools})
    elif method == "tools/call":
        if GOOD:
            answer(message["id"], {"content": [{"type": "text", "text": "ok"}]})
        else:
            answer(message["id"], {"content": [{"type": "bogus", "what": 1}]})
    elif method == "resources/list" and STUCK:
        continue
    elif method == "ping":
        answer(message["id"], {})
    elif MUTE:
        continue  # as some 2025-era servers do with a request before initialize
    else:  # server/discover too: this is a 2025-era server, which does not know it
        error = {"code": -32601, "message": f"Method not found: {method}"}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}) + "\n")
        sys.stdout.flush()
