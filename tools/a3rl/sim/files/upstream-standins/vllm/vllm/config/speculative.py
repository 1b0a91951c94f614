# STAND-IN made by a3rl's simulator for vllm v0.14.1: speculative decoding config
"""Speculative decoding configuration."""

from dataclasses import dataclass
from typing import Literal

SpeculativeMethod = Literal["ngram", "eagle", "eagle3", "medusa", "mtp"]


@dataclass
class SpeculativeConfig:
    method: SpeculativeMethod | None = None
    num_speculative_tokens: int | None = None
