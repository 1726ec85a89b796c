"""ACP protocol version 2 (the draft), for a client whose ``initialize`` asks for it.

* :mod:`tether.acp.v2.wire` — the version 2 wire types, generated from the official schema;
* :mod:`tether.acp.v2.updates` — version 1 session updates in their version 2 shape;
* :mod:`tether.acp.v2.server` — the version 2 methods, over the same bridge as version 1.

Nothing is imported here, so ``tether acp`` loads only what its handshake needs.
"""
