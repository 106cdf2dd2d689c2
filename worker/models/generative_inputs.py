"""A generative request's ``inputs``: a prompt or chat messages, plus sampling settings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

# JSON 1 and 1.0 both mean one; true does not, and NaN or Infinity never pass the bounds.
Number = StrictFloat | StrictInt
StopString = Annotated[StrictStr, Field(min_length=1, max_length=64)]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: StrictStr


class GenerationInputs(BaseModel):
    """``{"prompt": "..."}`` or ``{"messages": [...]}``, with optional sampling settings
    (a bare string is a prompt with the defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    prompt: StrictStr | None = None
    messages: Annotated[list[Message], Field(min_length=1, max_length=256)] | None = None
    max_new_tokens: Annotated[StrictInt, Field(ge=1)] | None = None  # None: the model's default
    temperature: Annotated[Number, Field(ge=0, le=100)] = 0.0  # 0: greedy
    top_p: Annotated[Number, Field(gt=0, le=1)] = 1.0
    seed: Annotated[StrictInt, Field(ge=0, lt=2**63)] = 0
    stop: Annotated[list[StopString], Field(max_length=8)] = []
    return_tokens: StrictBool = False  # outputs also carry "token_ids", the generated tokens

    @model_validator(mode="after")
    def _one_source(self) -> GenerationInputs:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' (a string) or 'messages' (a list)")
        return self
