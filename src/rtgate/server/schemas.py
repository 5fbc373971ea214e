"""Request and response bodies (pydantic), which are also the OpenAPI schema.

Request models validate what comes in. Response models document what goes out; endpoints
write their JSON directly (no second validation pass on the hot path).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "ChatCompletionRequest",
    "ChatMessageIn",
    "ContentPart",
    "ErrorOut",
    "GateAnswer",
    "GateBody",
    "JobOut",
    "WsRequest",
]


def _not_bool(value: object) -> object:
    """JSON ``true`` is not 1 ms: pydantic's lax mode would take it as one."""
    if isinstance(value, bool):
        raise ValueError("must be a number of milliseconds, not true/false")
    return value


BudgetMs = Annotated[float | None, BeforeValidator(_not_bool)]
"""A budget in milliseconds as JSON sends it: a number (bounds on each field)."""


class GateMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str


class GateBody(BaseModel):
    """``POST /v1/gate``."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(min_length=1, description="What to answer (the last user turn).")
    budget_ms: BudgetMs = Field(
        None, gt=0, description="Latency budget; the X-Budget-Ms header also sets it."
    )
    stream: bool = Field(False, description="Answer as server-sent events.")
    follow: bool = Field(
        True, description="When streaming, keep the stream open for the delegated answer."
    )
    delegate: bool | None = Field(
        None, description="Run the better tier in the background when it cannot fit."
    )
    max_tokens: int | None = Field(None, ge=1)
    messages: list[GateMessage] | None = Field(
        None, description="The conversation so far, for model tiers (optional)."
    )


class GateAnswer(BaseModel):
    """The in-budget answer."""

    answer: str
    route: str = Field(description="The tier that answered, or 'silent'.")
    placeholder: bool
    job_id: str | None = Field(description="The delegated job, when a deeper answer follows.")
    data: list[dict[str, Any]]
    trace: dict[str, Any]


class JobOut(BaseModel):
    """A delegated job (``GET /v1/jobs/{id}``; the SSE ``followup`` event)."""

    id: str
    tier: str
    status: Literal["queued", "running", "done", "failed", "cancelled"]
    text: str
    data: list[dict[str, Any]]
    error: str | None
    created: float
    finished: float | None
    ttft_ms: float | None
    elapsed_ms: float | None


class ErrorDetail(BaseModel):
    code: str
    message: str
    type: str
    param: str | None = None


class ErrorOut(BaseModel):
    error: ErrorDetail


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool | None = None


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` (OpenAI-compatible; unknown fields are ignored)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="'auto' (or another configured name) goes through the gate.")
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    stop: str | list[str] | None = None
    n: int | None = Field(None, ge=1)
    budget_ms: BudgetMs = Field(None, gt=0, description="rtgate: the latency budget.")
    delegate: bool | None = Field(None, description="rtgate: allow a delegated deeper answer.")


class WsRequest(BaseModel):
    """A message on ``WS /v1/ws``: a new request (``type: gate``) or ``type: cancel``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["gate", "cancel"] = "gate"
    seq: int = Field(ge=0, description="Strictly increasing; a newer one cancels older work.")
    input: str = ""
    budget_ms: BudgetMs = Field(None, gt=0)
    stream: bool = True
    delegate: bool | None = None
    max_tokens: int | None = Field(None, ge=1)
