"""/voice/ws and an unusable audio frame: an error message, then close 1007."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
import websockets

from rtgate.apps.voice.session import VoiceModels
from rtgate.apps.voice.web import VoiceService, create_app


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("frame", [b"\x01", b"\x01\x02\x03"])
async def test_an_odd_sized_pcm_frame_is_refused_with_1007(
    models: VoiceModels, frame: bytes
) -> None:
    import uvicorn

    service = VoiceService(models.cfg)
    service._models = models  # share the session's loaded models
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(create_app(service=service), log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}/ws") as ws:
            assert json.loads(await ws.recv())["type"] == "ready"
            await ws.send(frame)
            seen = []
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    msg = await ws.recv()
                    if isinstance(msg, str):
                        seen.append(json.loads(msg))
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
            errors = [m for m in seen if m["type"] == "error"]
            assert errors and errors[0]["error"]["code"] == "invalid_audio_frame"
    finally:
        server.should_exit = True
        await serving
        sock.close()
