"""``rtgate fake-llm``: a fault-injecting OpenAI-compatible server for tests and drills."""

from __future__ import annotations

import typer

from rtgate.core.errors import InvalidRequest
from rtgate.fakellm.faults import MODES, Timing, parse_plan

app = typer.Typer(add_completion=False, no_args_is_help=False)


@app.command("fake-llm")
def fake_llm(
    host: str = typer.Option("127.0.0.1", help="address to bind"),
    port: int = typer.Option(8001, help="port to bind"),
    mode: str = typer.Option(
        "ok", help=f"a mode or a weighted mix like 'ok=0.8,hang=0.1,500=0.1'; modes: {MODES}"
    ),
    seed: int = typer.Option(0, help="seed of the per-request draws"),
    ttft_ms: float = typer.Option(20.0, help="time to first token"),
    tpot_ms: float = typer.Option(5.0, help="time between tokens"),
    slow_ms: float = typer.Option(3000.0, help="time to first token in 'slow' mode"),
    trickle_ms: float = typer.Option(500.0, help="time between tokens in 'trickle' mode"),
    tokens: int = typer.Option(16, help="words in a full reply (max_tokens may cut it)"),
    fault_at: int = typer.Option(1, help="tokens sent before stall/reset/malformed/truncate"),
    jitter: float = typer.Option(0.0, help="relative noise on every delay, 0..1"),
    model: list[str] = typer.Option(["fake"], help="model names listed by /v1/models"),
    log_level: str = typer.Option("info", help="uvicorn log level"),
) -> None:
    """Serve /v1/chat/completions and /v1/completions that misbehave on purpose.

    A request may pick its own fault with an 'X-Fake-Mode: MODE' header (and timings with
    X-Fake-Ttft-Ms, X-Fake-Tpot-Ms, X-Fake-Tokens, X-Fake-Fault-At). GET /fake/stats
    counts requests per mode; POST /fake/mode {"mode": SPEC} changes the mix.
    """
    from rtgate.fakellm.faults import FakeLLMConfig
    from rtgate.fakellm.server import serve

    try:
        plan = parse_plan(mode)
        timing = Timing(ttft_ms, tpot_ms, slow_ms, trickle_ms, tokens, fault_at, jitter)
    except InvalidRequest as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"fake-llm on http://{host}:{port}/v1  mode={plan.spec()}  seed={seed}")
    serve(FakeLLMConfig(plan, timing, seed, tuple(model)), host, port, log_level)


if __name__ == "__main__":
    app()
