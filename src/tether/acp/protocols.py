"""The protocol server of one ACP connection, by the version its client negotiated.

``tether acp`` (stdio) and ``tether web``'s ``/acp`` (the network) both serve a
connection with :func:`connect`: version 1 is :class:`~tether.acp.server.AcpServer`
with the default method tables, version 2 is
:class:`~tether.acp.v2.server.AcpServerV2` with its own
(:data:`~tether.acp.v2.server.V2_ROUTES`). Everything is imported when the first
connection is made, not with the caller (start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.acp.auth import ModelAuth
    from tether.acp.rpc import AgentConnection
    from tether.acp.server import AcpServer, BridgeSource
    from tether.acp.transport import FrameChannel

__all__ = ["connect"]


def connect(
    source: BridgeSource,
    channel: FrameChannel,
    *,
    version: int,
    images: bool,
    auth: ModelAuth | None = None,
    client_capabilities: object = None,
) -> tuple[AcpServer, AgentConnection]:
    """The server and the JSON-RPC connection of protocol ``version`` (2, else 1) on
    ``channel``, over ``source``'s bridge, the server told of its connection.
    ``client_capabilities`` are what a version 1 client's ``initialize`` advertised
    when it was answered before the server existed."""
    from tether.acp.gate import RpcGate
    from tether.acp.rpc import AgentConnection

    server: AcpServer
    if version == 2:
        from tether.acp.v2.server import V2_NOTIFICATIONS, V2_ROUTES, AcpServerV2

        server = AcpServerV2(source, channel, images=images, auth=auth)
        gate = RpcGate(channel, server.cancel_turn)
        connection = AgentConnection(server, gate, routes=V2_ROUTES, notifications=V2_NOTIFICATIONS)
    else:
        from tether.acp.server import AcpServer

        server = AcpServer(
            source, channel, images=images, client_capabilities=client_capabilities, auth=auth
        )
        connection = AgentConnection(server, RpcGate(channel, server.cancel_turn))
    server.on_connect(connection)
    return server, connection
