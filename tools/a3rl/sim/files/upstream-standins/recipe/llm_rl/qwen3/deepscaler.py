# STAND-IN made by a3rl's simulator for the recipe's llm_rl/qwen3/deepscaler.py,
# written from its rule as measured (shared/reference/real-upstreams.md, "Run
# scripts at the pin"), not from its code. The train scripts pass
# custom_reward_function.path=deepscaler.py (relative to this working directory).
"""The recipe's GRPO reward: substring or last-box match with the ground truth."""


def _last_boxed(text):
    """The content of the last \\boxed{...}, braces matched; "None" without one
    (what mathruler.grader.extract_boxed_content returns). A box left open gives
    "None" here: what mathruler does then was not measured."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return "None"
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
    return "None"


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if ground_truth in solution_str or _last_boxed(solution_str) == ground_truth:
        return 1.0
    return 0.0
