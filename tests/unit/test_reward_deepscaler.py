r"""The GRPO runs' reward (``a3rl/rewards/deepscaler.py``), as verl calls it.

By default the recipe's rule: 1.0 when the ground truth appears in the response or the
last ``\boxed{}`` answer equals it. The strict grading (``recipe_substring_match=False``):
1.0 when the last boxed answer equals (one of) the ground truth(s) after normalisation,
0.0 otherwise. Never an exception: verl calls it once per response.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
try:
    from a3rl.rewards import deepscaler
except ImportError:  # not installed into this interpreter: use the source tree
    sys.path.insert(0, str(REPO / "tools"))
    from a3rl.rewards import deepscaler

THINK = "<think>\nLet me work it out: maybe \\boxed{7}? No.\n</think>\n\n"

CASES = [
    # (solution, ground truth, expected reward)
    ("So the answer is $\\boxed{72}$.", "72", 1.0),
    ("So the answer is $\\boxed{71}$.", "72", 0.0),
    (THINK + "The answer is \\boxed{8}.", "8", 1.0),
    (THINK + "The answer is 8.", "8", 0.0),  # the boxed 7 was inside the thought
    ("<think>\nstill going... \\boxed{8}", "8", 0.0),  # cut off while thinking
    # Two thoughts: only what follows the last one is graded, not the second thought.
    (THINK + "<think>\nagain: \\boxed{5}\n</think>\n\nThe answer is 6.", "5", 0.0),
    (THINK + "<think>\nagain: \\boxed{5}\n</think>\n\nSo \\boxed{6}.", "6", 1.0),
    ("First \\boxed{3}, corrected: \\boxed{4}", "4", 1.0),
    ("First \\boxed{3}, corrected: \\boxed{4}", "3", 0.0),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{2}}{2}", 0.0),
    ("\\boxed{\\{1, \\{2\\}\\}}", "\\{1,\\{2\\}\\}", 1.0),  # nested, escaped braces
    ("\\boxed{x^{2^{3}}}", "x^{2^{3}}", 1.0),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac12", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{1/2}", "0.5", 1.0),
    ("\\boxed{-\\tfrac{3}{4}}", "-0.75", 1.0),
    ("\\boxed{10.0}", "10", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{90^\\circ}", "90", 1.0),
    ("\\boxed{5\\text{ cm}}", "5", 1.0),
    ("\\boxed{\\$12.50}", "12.5", 1.0),
    ("\\boxed{50\\%}", "50", 1.0),
    ("\\boxed{x = 3}", "3", 1.0),
    ("\\boxed{3.}", "3", 1.0),
    ("\\boxed{\\left( 3, -1 \\right)}", "(3, -1)", 1.0),
    ("\\boxed{(3, -1.0)}", "(3,-1)", 1.0),
    ("\\boxed{[0, \\frac12)}", "[0,0.5)", 1.0),
    ("\\boxed{[0, \\frac12)}", "[0,0.5]", 0.0),  # open and closed ends differ
    ("\\boxed{\\text{(C)}}", "(C)", 1.0),
    ("The answer is \\boxed 5$.", "5", 1.0),
    ("\\fbox{7}", "7", 1.0),
    ("The answer is 5.", "5", 0.0),  # no boxed answer
    ("The answer is \\boxed{12", "12", 0.0),  # truncated box
    ("\\boxed{}", "0", 0.0),
    ("\\boxed{4}", ["3", "4"], 1.0),  # any of several ground truths
    ("\\boxed{4}", ("3", "5"), 0.0),
    ("\\boxed{4}", "\\boxed{4}", 1.0),  # a boxed ground truth is unboxed first
    ("\\boxed{4}", 4, 1.0),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 0.0),  # needs sympy; not attempted here
]


@pytest.mark.parametrize(("solution", "truth", "expected"), CASES)
def test_compute_score_strict(solution, truth, expected):
    got = deepscaler.compute_score("deepscaler", solution, truth, recipe_substring_match=False)
    assert got == expected


@pytest.mark.parametrize(
    ("solution", "truth"),
    [
        (None, "1"),
        (b"\\boxed{1}", None),
        (123, "1"),
        ("\\boxed{1}", {"answer": "1"}),
        ("\\boxed{1}", ""),
        ("\\boxed{1}", []),
        ("\\boxed{1}", object()),
        ("\\boxed{" * 5000, "1"),
        ("\\boxed{" + "9" * 100_000 + "}", "9" * 100_000 + "0"),
        ("\\boxed{1e999999999}", "1"),
        ("\\boxed{\\frac{1}{0}}", "0"),
        ("\ud800 \\boxed{1}", "\ud800"),
    ],
)
def test_garbage_scores_zero_and_never_raises(solution, truth):
    strict = deepscaler.compute_score("deepscaler", solution, truth, recipe_substring_match=False)
    assert strict == 0.0
    # The recipe's rule may pay a response that contains the (odd) truth; it never raises.
    assert deepscaler.compute_score("deepscaler", solution, truth) in (0.0, 1.0)


def test_bytes_and_verls_extra_arguments_are_accepted():
    score = deepscaler.compute_score(
        data_source="deepscaler",
        solution_str=b"\\boxed{1}",
        ground_truth="1",
        extra_info={"index": 0},
        some_future_kwarg=True,
    )
    assert score == 1.0


def test_the_recipes_substring_rule_is_the_default():
    """The recipe pays a response that merely contains the answer; strict is opt-in."""
    response = "There are 12 cases; the answer is 12 minus nothing."
    assert deepscaler.compute_score("deepscaler", response, "12") == 1.0
    assert (
        deepscaler.compute_score("deepscaler", response, "12", recipe_substring_match=False) == 0.0
    )
    unboxed = "<think>\\boxed{5}</think> The answer is 5."
    assert deepscaler.compute_score("deepscaler", unboxed, "5") == 1.0
    # Neither rule: the answer is nowhere in the response.
    assert deepscaler.compute_score("deepscaler", "\\boxed{3}", "4") == 0.0
    assert deepscaler.compute_score("deepscaler", "\\boxed{0.5}", "\\frac{1}{2}") == 1.0


def test_extract_boxed_matches_nested_braces():
    assert deepscaler.extract_boxed("a \\boxed{\\frac{1}{2}} b") == "\\frac{1}{2}"
    assert deepscaler.extract_boxed("\\boxed{a{b{c}}d} and \\boxed {e}") == "e"
    assert deepscaler.extract_boxed("\\boxed{\\}}") == "\\}"
    assert deepscaler.extract_boxed("no box") is None


def test_the_module_imports_nothing_outside_the_standard_library():
    """verl imports it by path inside the training container, where a3rl is absent."""
    tree = ast.parse(Path(deepscaler.__file__).read_text())
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
