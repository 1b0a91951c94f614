r"""verl custom reward for the recipe's GRPO runs on DeepScaleR data (data_source "deepscaler").

verl's default scorer has no rule for ``data_source="deepscaler"``. By default the GRPO
runs use the recipe's own ``deepscaler.py`` from the working directory, as the recipe's
scripts do; this file, the project's grader, is used only with the opt-in feature
``a3rl_grader`` (a deviation from the recipe: docs/recipe-conformance.md), which names it
in ``custom_reward_function.path`` and ``compute_score`` in ``custom_reward_function.name``.
verl calls ``compute_score(data_source=..., solution_str=...,
ground_truth=..., extra_info=...)`` once per response and uses the float as the reward:
1.0 when the response's final answer is right, 0.0 otherwise. It never raises: one odd
response must not kill a training step that took an hour of rollout.

The file is copied into the recipe's working directory and imported there by verl inside
the training container, where ``a3rl`` is not installed: standard library only.

What it is based on
-------------------
* The recipe's own ``llm_rl/qwen3/deepscaler.py`` (hicann/cann-recipes-train): 1.0 when
  ``ground_truth in solution_str``, or when mathruler's ``extract_boxed_content`` (the last
  ``\boxed{...}``, braces matched) equals the ground truth exactly. That is the default
  here (``recipe_substring_match=True``), so runs reproduce the recipe's reward and can be
  set beside its published figures. The substring test pays any response that merely
  contains the answer's characters (a ground truth of ``2`` is "in" almost every
  response); for the stricter grading below alone, pass
  ``++custom_reward_function.reward_kwargs.recipe_substring_match=False``.
* DeepScaleR's ``deepscaler/rewards/math_reward.py`` and ``math_utils/utils.py``
  (agentica-project): grade only what follows ``</think>`` (a response still thinking has
  no answer); take the last ``\boxed{}`` (or ``\fbox{}``, or ``\boxed 5``) with nested
  braces matched; the ground truth may be a list (any one matching is enough), and a
  ground truth that is itself boxed is unboxed first; compare after Hendrycks' MATH
  normalisation (``\left``/``\right``, ``\!``, ``dfrac``/``tfrac``, ``^\circ``, ``\$``,
  ``\text{}`` units, ``x = `` prefixes, ``\frac12``, ``a/b``) or, failing that, with sympy.
  Sympy is not available here, so that last step is exact rational arithmetic on plain
  numbers (``0.5`` = ``\frac{1}{2}`` = ``1/2``, ``10`` = ``10.0``, ``1,000`` = ``1000``)
  and element-wise comparison of tuples, intervals and sets. Answers that only sympy
  would prove equal (``2\sqrt{2}`` vs ``\sqrt{8}``) score 0 here.
* Unlike DeepScaleR, a response with no think tags at all (thinking disabled) is graded
  whole rather than scored 0.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction

__all__ = ["compute_score", "extract_boxed", "is_equiv", "normalize"]

# Long answers are not normalised character by character; they can only match verbatim.
_MAX_ANSWER_CHARS = 1000
_MAX_NUMBER_CHARS = 80

_TEXT_WRAPPERS = re.compile(
    r"\\(?:text|textbf|textrm|textit|mbox|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}"
)
_TRAILING_TEXT_UNIT = re.compile(
    r"^(.+?)\\(?:text|textrm|mbox|mathrm)\s*\{[^{}]*\}(?:\^\{?\d+\}?)?$"
)
_UNIT_WORDS = re.compile(
    r"(?<=[\d}])\s*(?:degrees?|cm|centimeters?|meters?|km|kilometers?|miles?|seconds?|minutes?"
    r"|hours?|days?|weeks?|months?|years?|feet|foot|inch(?:es)?|yards?|units?|dollars?|cents?"
    r"|square\s+units?)(?:\^\{?\d+\}?)?$"
)
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_PLAIN_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)$")
_FRAC_NUMBER = re.compile(
    r"^([-+]?)\\frac\{([-+]?(?:\d+\.?\d*|\.\d+))\}\{([-+]?(?:\d+\.?\d*|\.\d+))\}$"
)
_SLASH_INTS = re.compile(r"^(-?\d+)/(-?\d+)$")


def compute_score(
    data_source: object,
    solution_str: object,
    ground_truth: object,
    extra_info: object = None,
    *,
    recipe_substring_match: bool = True,
    **_ignored: object,
) -> float:
    """1.0 when the response's last boxed answer equals (one of) the ground truth(s), or
    (the recipe's rule, on unless ``recipe_substring_match=False``) a ground truth appears
    in the response; else 0.0.

    ``data_source`` and ``extra_info`` are accepted for verl's calling convention and not
    used: the GRPO runs feed only DeepScaleR rows, and the rule is the same for any math
    row. Extra keyword arguments (verl's ``reward_kwargs``) other than
    ``recipe_substring_match`` are ignored rather than refused.
    """
    try:
        text = _as_text(solution_str)
        truths = _ground_truths(ground_truth)
        if text is None or not truths:
            return 0.0
        if recipe_substring_match and _recipe_rule(text, truths):
            return 1.0
        answer = extract_boxed(_final_part(text))
        if answer is None:
            return 0.0
        for truth in truths:
            if "\\boxed" in truth or "\\fbox" in truth:
                unboxed = extract_boxed(truth)
                if unboxed is None:
                    continue
                truth = unboxed
            if is_equiv(answer, truth):
                return 1.0
        return 0.0
    except Exception:  # noqa: BLE001 - a reward must never take the training step down
        return 0.0


def extract_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}``/``\fbox{...}`` (nested braces matched), or of
    ``\boxed 5`` up to ``$`` or the end of the line; None when there is none or the last one
    is cut off (a response truncated at the length limit)."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    j = i
    while j < len(text) and text[j] in " \t":
        j += 1
    if j < len(text) and text[j] == "{":
        depth = 0
        k = j
        while k < len(text):
            char = text[k]
            if char == "\\":  # \{ and \} are literal braces, not grouping
                k += 2
                continue
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return text[j + 1 : k].strip()
            k += 1
        return None
    if j > i:  # "\boxed 5": verl and DeepScaleR read up to the closing "$"
        answer = re.split(r"[$\n]", text[j:], maxsplit=1)[0].strip()
        return answer or None
    return None


def is_equiv(answer: str, truth: str) -> bool:
    """Whether two final answers are the same after normalisation, as numbers, or element
    by element for tuples, intervals and sets."""
    a, b = normalize(answer), normalize(truth)
    if not a or not b:
        return False
    if a == b:
        return True
    if len(a) > _MAX_ANSWER_CHARS or len(b) > _MAX_ANSWER_CHARS:
        return False
    if _same_number(a, b):
        return True
    return _same_sequence(a, b)


def normalize(answer: str) -> str:
    """Hendrycks' MATH normalisation (as DeepScaleR's ``mathd`` grader uses it), extended
    with the cases listed in the module docstring."""
    s = answer.strip()
    if len(s) > _MAX_ANSWER_CHARS:
        return s
    s = s.replace("\n", "").replace("\r", "")
    for thin_space in ("\\!", "\\,", "\\;", "\\:", "\\quad", "\\qquad", "~"):
        s = s.replace(thin_space, "")
    s = s.replace("\\\\", "\\")
    s = s.replace("\\displaystyle", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\left", "").replace("\\right", "")
    for degree in ("^{\\circ}", "^\\circ", "°", "\\degree"):
        s = s.replace(degree, "")
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\%", "").replace("%", "")
    s = s.strip()
    trailing = _TRAILING_TEXT_UNIT.match(s)
    if trailing and trailing.group(1).strip():
        s = trailing.group(1).strip()
    s = _TEXT_WRAPPERS.sub(r"\1", s)
    s = _UNIT_WORDS.sub("", s).strip()
    parts = s.split("=")
    if len(parts) == 2 and len(parts[0].strip()) <= 2:
        s = parts[1]
    s = re.sub(r"\\sqrt\s*([0-9a-zA-Z])", r"\\sqrt{\1}", s)
    s = s.replace(" ", "").replace("\t", "")
    s = re.sub(r"\\frac([0-9a-zA-Z])([0-9a-zA-Z])", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac([0-9a-zA-Z])\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\{([^{}]*)\}([0-9a-zA-Z])", r"\\frac{\1}{\2}", s)
    s = s.rstrip(".")
    s = s.replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    while len(s) >= 2 and s[0] == "{" and s[-1] == "}" and _matching_close(s, 0) == len(s) - 1:
        s = s[1:-1]
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    slash = _SLASH_INTS.match(s)
    if slash:
        s = f"\\frac{{{slash.group(1)}}}{{{slash.group(2)}}}"
    return s.lower()


def _as_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return None


def _ground_truths(value: object) -> list[str]:
    """The ground truth as a list of non-empty strings: verl hands over a string, a number,
    or (from a parquet list column) a list or numpy array."""
    if value is None or isinstance(value, Mapping):
        return []
    if isinstance(value, str | bytes | bytearray | int | float | Fraction):
        items: Iterable[object] = [value]
    else:
        try:
            items = list(value)  # type: ignore[call-overload]
        except TypeError:
            items = [value]
    truths = []
    for item in items:
        text = _as_text(item)
        if text is None and isinstance(item, numbers.Real) and not isinstance(item, bool):
            text = str(item)
        if text is not None and text.strip():
            truths.append(text.strip())
    return truths


def _final_part(text: str) -> str:
    """What follows the last ``</think>``; empty when a thought was opened and never closed
    (DeepScaleR scores that 0); the whole text when there are no think tags at all."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return ""
    return text


def _recipe_rule(text: str, truths: list[str]) -> bool:
    """The recipe's rule, verbatim in effect: substring, or exact last-boxed match."""
    boxed = extract_boxed(text)
    return any(truth in text or boxed == truth for truth in truths)


def _matching_close(s: str, open_at: int) -> int:
    """Index of the brace closing the one at ``open_at``, or -1."""
    depth = 0
    for k in range(open_at, len(s)):
        if s[k] == "{":
            depth += 1
        elif s[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return -1


def _number(s: str) -> Fraction | None:
    if len(s) > _MAX_NUMBER_CHARS:
        return None
    if _PLAIN_NUMBER.match(s):
        return Fraction(s)
    frac = _FRAC_NUMBER.match(s)
    if frac:
        denominator = Fraction(frac.group(3))
        if denominator == 0:
            return None
        value = Fraction(frac.group(2)) / denominator
        return -value if frac.group(1) == "-" else value
    return None


def _same_number(a: str, b: str) -> bool:
    x, y = _number(a), _number(b)
    return x is not None and y is not None and x == y


def _split_top_level(inner: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in inner:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _same_element(x: str, y: str) -> bool:
    return bool(x) and (x == y or _same_number(x, y))


def _same_sequence(a: str, b: str) -> bool:
    """(1,2) = (1.0, 2); [0,\\frac12) = [0,0.5); \\{1,2\\} = \\{2,1\\}; open and closed ends
    must agree."""
    if a.startswith("\\{") and a.endswith("\\}") and b.startswith("\\{") and b.endswith("\\}"):
        xs, ys = _split_top_level(a[2:-2]), _split_top_level(b[2:-2])
        if len(xs) != len(ys):
            return False
        remaining = list(ys)
        for x in xs:
            match = next((y for y in remaining if _same_element(x, y)), None)
            if match is None:
                return False
            remaining.remove(match)
        return True
    if len(a) < 2 or len(b) < 2 or a[0] != b[0] or a[-1] != b[-1]:
        return False
    if a[0] not in "([" or a[-1] not in ")]":
        return False
    xs, ys = _split_top_level(a[1:-1]), _split_top_level(b[1:-1])
    return len(xs) == len(ys) and len(xs) > 1 and all(map(_same_element, xs, ys))
