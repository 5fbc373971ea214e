"""A bare OpenAI-compatible upstream for ``rtgate bench proxy``: it parses the request and
answers one fixed chat completion at once, so what is measured in front of it is the
gateway's own cost. ``python -m rtgate.bench._bare_upstream PORT`` serves it (uvicorn,
httptools, one worker)."""

from __future__ import annotations

import json
import sys
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["MODEL", "app"]

MODEL = "bare"


async def _chat(request: Request) -> Response:
    body = json.loads(await request.body())
    answer = {
        "id": "chatcmpl-bare",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", MODEL),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
    return Response(json.dumps(answer), media_type="application/json")


async def _models(request: Request) -> Response:
    data = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]}
    return Response(json.dumps(data), media_type="application/json")


app = Starlette(
    routes=[
        Route("/v1/chat/completions", _chat, methods=["POST"]),
        Route("/v1/models", _models, methods=["GET"]),
    ]
)


def main() -> None:
    import uvicorn

    port = int(sys.argv[1])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", http="httptools")


if __name__ == "__main__":
    main()
