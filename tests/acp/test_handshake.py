"""``initialize`` answered before the SDK loads is the answer the SDK model describes."""

from acp.meta import PROTOCOL_VERSION
from acp.schema import InitializeResponse

from tether.acp.handshake import early_initialize, initialize_result


def test_the_early_answer_is_a_valid_initialize_response() -> None:
    for images in (False, True):
        result = initialize_result(images=images)
        model = InitializeResponse.model_validate(result)
        assert model.protocol_version == PROTOCOL_VERSION
        assert model.agent_capabilities is not None and model.agent_capabilities.load_session
        dumped = model.model_dump(by_alias=True, exclude_none=True)
        assert dumped["agentCapabilities"]["promptCapabilities"]["image"] is images
        assert dumped["agentInfo"]["name"] == "tether"


def test_only_a_well_formed_initialize_is_answered_early() -> None:
    good = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    assert early_initialize(good, images=False) == {
        "jsonrpc": "2.0",
        "id": 0,
        "result": initialize_result(images=False),
    }
    for frame in (
        {"jsonrpc": "2.0", "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "1"}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/"}},
    ):
        assert early_initialize(frame, images=False) is None


async def test_a_frame_over_the_limit_is_refused_and_serving_continues() -> None:
    import asyncio
    import json

    from tether.acp.transport import FrameTransport

    reader = asyncio.StreamReader(limit=16)
    written: list[bytes] = []

    class Sink:
        def write(self, data: bytes) -> None:
            written.append(data)

        def is_closing(self) -> bool:
            return False

        async def drain(self) -> None:
            return None

    transport = FrameTransport(reader, Sink(), max_frame_bytes=64)  # type: ignore[arg-type]
    big = json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"pad": "y" * 500}})
    small = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ok"})
    reader.feed_data(f"{big}\n{small}\n".encode())
    reader.feed_eof()
    frame = await transport.receive()
    assert frame == {"jsonrpc": "2.0", "id": 1, "method": "ok"}
    await transport.drain()
    errors = [json.loads(line) for line in b"".join(written).splitlines()]
    assert errors[0]["error"]["code"] == -32600
    assert "longer than 64 bytes" in errors[0]["error"]["message"]
    assert await transport.receive() is None
