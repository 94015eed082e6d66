"""Settings of the LLM setter, in one place, read from the environment.

    >>> s = LLMSettings.from_env()      # ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, VHD_LLM_*
    >>> s.cost(model="claude-sonnet-4-5", input_tokens=10_000, output_tokens=2_000)
    0.06
"""

from __future__ import annotations

import json
import os

from pydantic import BaseModel, ConfigDict, Field

# $ per million tokens (input, output); override with VHD_LLM_PRICES='{"model": [in, out]}'.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4-20250514": (3.0, 15.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku-latest": (0.8, 4.0),
}


class LLMSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    model: str = "claude-sonnet-4-5"
    api_key: str | None = None
    base_url: str | None = None
    prices: dict[str, tuple[float, float]] = Field(default_factory=lambda: dict(DEFAULT_PRICES))
    max_attempts: int = Field(3, ge=1, le=10)      # replies per module, the repair turns included
    max_tokens: int = Field(32_000, ge=256)         # a module is long: the runtime, a World, a SKIN
    timeout_seconds: float = Field(300.0, gt=0)     # per HTTP request
    max_retries: int = Field(4, ge=0)               # SDK retries (429, 408, 409, 5xx, timeouts) with backoff
    exemplars: int = Field(2, ge=0, le=3)

    @classmethod
    def from_env(cls, **overrides) -> "LLMSettings":
        env = os.environ
        values: dict = {"api_key": env.get("ANTHROPIC_API_KEY") or None, "base_url": env.get("ANTHROPIC_BASE_URL") or None}
        for key, name, kind in (("model", "VHD_LLM_MODEL", str), ("max_attempts", "VHD_LLM_MAX_ATTEMPTS", int),
                                ("max_tokens", "VHD_LLM_MAX_TOKENS", int), ("timeout_seconds", "VHD_LLM_TIMEOUT", float),
                                ("max_retries", "VHD_LLM_MAX_RETRIES", int), ("exemplars", "VHD_LLM_EXEMPLARS", int)):
            if env.get(name):
                values[key] = kind(env[name])
        if env.get("VHD_LLM_PRICES"):
            values["prices"] = {**DEFAULT_PRICES, **json.loads(env["VHD_LLM_PRICES"])}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        """Dollars for one reply; a model missing from the price table costs 0 and is named in the docs."""
        price_in, price_out = self.prices.get(model, (0.0, 0.0))
        return round((input_tokens * price_in + output_tokens * price_out) / 1e6, 6)
