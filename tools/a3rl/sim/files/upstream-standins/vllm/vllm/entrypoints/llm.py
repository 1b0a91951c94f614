# STAND-IN made by a3rl's simulator for vllm v0.14.1: the offline LLM engine loop
"""The LLM class: only the engine loop, which the recipe patches."""

from collections.abc import Sequence


class LLM:
    def __init__(self, llm_engine):
        self.llm_engine = llm_engine

    def _run_engine(self, *, use_tqdm: bool = True) -> Sequence:
        outputs = []
        while self.llm_engine.has_unfinished_requests():
            step_outputs = self.llm_engine.step()
            for output in step_outputs:
                if output.finished:
                    outputs.append(output)
        return outputs
