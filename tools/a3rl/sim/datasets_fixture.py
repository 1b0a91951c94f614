r"""STAND-IN raw datasets for the simulator and the tests: the hub is not reachable here.

The data stage downloads four datasets from ModelScope and converts them with
``a3rl.planning.datasets.prepare``. The simulated cluster has no route to ModelScope, so this module
writes small STAND-INs in the simulated hub's layout, ``<root>/datasets/<owner>/<name>/``,
with the real datasets' file names and schemas and made-up rows (a dozen or fewer each):

* ``agentica-org/DeepScaleR-Preview-Dataset``: ``deepscaler.json``, a JSON list of
  ``{problem, answer, solution}`` objects (the real one has 40,315). Answers are strings,
  some in LaTeX (``\frac{1}{2}``, ``2\sqrt{2}``, ``(3, -1)``), solutions end in ``\boxed{}``.
  Two of its 14 items have no answer (``DEEPSCALER_FLAWED``: one lacks the key, one has an
  empty string), as the real file reportedly has 6 such items (a discussion on the
  dataset's hub page; their exact form, missing key, null or empty, is not known).
* ``BytedTsinghua-SIA/DAPO-Math-17k``: ``data/dapo-math-17k.parquet`` with ``data_source``
  "math_dapo", ``prompt`` (one user message in DAPO's "Solve the following math problem
  step by step ... Answer:" template), ``ability`` "MATH", ``reward_model`` {ground_truth,
  style "rule-lighteval/MATH_v2"} and ``extra_info`` {index: a UUID string}. Like the real
  file, which repeats each prompt about 100 times, every row appears twice (the whole set,
  then the whole set again, same UUIDs: how the real repeats are ordered is not known).
* ``BytedTsinghua-SIA/AIME-2024``: ``data/aime-2024.parquet``, the same shape as DAPO's and
  each problem repeated, as the real file repeats its 30 problems 32 times. Its index is an
  integer here: the real file's index type was not confirmed, and the converter handles both.
* ``modelscope/gsm8k``: ``main/train-00000-of-00001.parquet`` and
  ``main/test-00000-of-00001.parquet`` with ``question`` and ``answer`` ("... #### 72"),
  as on the hub.

The bytes are fixed (sorted inputs, fixed writer options), and a file whose bytes are
already in place is not rewritten, so its mtime stays put across runs.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

DATASETS = {
    "deepscaler": "agentica-org/DeepScaleR-Preview-Dataset",
    "dapo_math_17k": "BytedTsinghua-SIA/DAPO-Math-17k",
    "aime_2024": "BytedTsinghua-SIA/AIME-2024",
    "gsm8k": "modelscope/gsm8k",
}

DEEPSCALER_ITEMS = [
    ("What is $1 + 1$?", "2", "Adding, $1 + 1 = 2$. So the answer is $\\boxed{2}$."),
    (
        "Compute $\\frac{3}{6}$ in lowest terms.",
        "\\frac{1}{2}",
        "Divide by 3: $\\boxed{\\frac{1}{2}}$.",
    ),
    (
        "Find the diagonal of a unit square scaled by 2.",
        "2\\sqrt{2}",
        "It is $2\\sqrt{2}$, so $\\boxed{2\\sqrt{2}}$.",
    ),
    ("Solve $x + y = 2$, $x - y = 4$.", "(3, -1)", "Adding gives $x = 3$, so $\\boxed{(3, -1)}$."),
    ("How many degrees are in a right angle?", "90", "A right angle is $\\boxed{90^\\circ}$."),
    ("What is $10\\%$ of $250$?", "25", "$0.1 \\cdot 250 = \\boxed{25}$."),
    (
        "Compute $\\left(\\frac{1}{2}\\right)^2$.",
        "\\frac{1}{4}",
        "Squaring, $\\boxed{\\dfrac{1}{4}}$.",
    ),
    ("What is $-7 + 3$?", "-4", "$-7 + 3 = \\boxed{-4}$."),
    ("Evaluate $\\sqrt{49}$.", "7", "$\\sqrt{49} = \\boxed{7}$."),
    ("What is $1000 \\times 3$?", "3000", "$\\boxed{3000}$."),
    ("Give the interval where $x^2 < 1$.", "(-1, 1)", "So $x \\in \\boxed{(-1, 1)}$."),
    ("What is $0.25 + 0.25$?", "\\frac{1}{2}", "$0.5 = \\boxed{\\frac{1}{2}}$."),
]

DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem."
    '\n\n{problem}\n\nRemember to put your answer on its own line after "Answer:".'
)
DAPO_PROBLEMS = [
    ("Find the number of positive divisors of $36$.", "9"),
    ("Let $a + b = 10$ and $ab = 21$. Find $a^2 + b^2$.", "58"),
    ("What is the remainder when $2^{10}$ is divided by $7$?", "2"),
    ("How many ways can $3$ people sit in a row?", "6"),
]
AIME_PROBLEMS = [
    ("Find the sum of all positive integers $n < 10$ such that $n^2 + 1$ is prime.", "16"),
    ("Compute the number of subsets of $\\{1,2,3,4\\}$ with an even sum.", "8"),
    ("Find the last three digits of $7^{4}$.", "401"),
]
GSM8K_ROWS = {
    "train": [
        (
            "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
            "clips in May. How many clips did Natalia sell altogether in April and May?",
            "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
            "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
        ),
        (
            "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of "
            "babysitting. How much did she earn?",
            "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\n"
            "Working 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
        ),
        (
            "A company bought 5 machines at $250 each. How much did it spend?",
            "It spent 5 * 250 = $<<5*250=1250>>1,250.\n#### 1,250",
        ),
        (
            "Betty has 3 apples and eats 1. How many are left?",
            "Betty has 3 - 1 = <<3-1=2>>2 apples left.\n#### 2",
        ),
    ],
    "test": [
        (
            "Janet's ducks lay 16 eggs per day. She eats three and bakes with four. She sells "
            "the rest at $2 each. How much does she make every day?",
            "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
            "She makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18",
        ),
        (
            "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts "
            "in total does it take?",
            "It takes 2/2=<<2/2=1>>1 bolt of white fiber\nSo the total is 2+1=<<2+1=3>>3\n#### 3",
        ),
        (
            "Tom has 10 marbles and gives away 4. How many does he keep?",
            "He keeps 10 - 4 = <<10-4=6>>6.\n#### 6",
        ),
    ],
}

# Items with no answer, at their positions in deepscaler.json (both in the train part).
DEEPSCALER_FLAWED = [
    (4, {"problem": "What is $2 + 2$?", "solution": "$\\boxed{4}$."}),
    (8, {"problem": "Evaluate $3^2$.", "answer": "", "solution": "$\\boxed{9}$."}),
]

# pyarrow writes the messages' struct fields in this order, as pandas does from the dicts
# the hub's files were made from; the converter reorders them.
_MESSAGE = pa.struct([("content", pa.string()), ("role", pa.string())])
_REWARD = pa.struct([("ground_truth", pa.string()), ("style", pa.string())])
_UUIDS = uuid.UUID("6f1d7c1e-5a52-4c1b-9a53-a3a3a3a3a3a3")  # namespace for stable UUIDs


def write_raw_datasets(root: Path) -> dict[str, Path]:
    """Write the stand-in snapshots under ``root/datasets`` and return each one's folder,
    keyed like ``a3rl.planning.datasets.RAW_FORMATS``."""
    base = Path(root) / "datasets"
    folders = {key: base / hub_id for key, hub_id in DATASETS.items()}
    items: list[dict] = [
        {"problem": p, "answer": a, "solution": s} for p, a, s in DEEPSCALER_ITEMS]
    for at, item in DEEPSCALER_FLAWED:
        items.insert(at, item)
    _write_if_changed(
        folders["deepscaler"] / "deepscaler.json",
        (json.dumps(items, indent=2, ensure_ascii=False) + "\n").encode(),
    )
    _write_if_changed(
        folders["dapo_math_17k"] / "data" / "dapo-math-17k.parquet",
        _parquet(
            _dapo_shaped(DAPO_PROBLEMS, [str(uuid.uuid5(_UUIDS, p)) for p, _ in DAPO_PROBLEMS])
        ),
    )
    _write_if_changed(
        folders["aime_2024"] / "data" / "aime-2024.parquet",
        _parquet(_dapo_shaped(AIME_PROBLEMS, list(range(len(AIME_PROBLEMS))))),
    )
    for split, rows in GSM8K_ROWS.items():
        table = pa.table(
            {
                "question": pa.array([q for q, _ in rows], pa.string()),
                "answer": pa.array([a for _, a in rows], pa.string()),
            }
        )
        _write_if_changed(
            folders["gsm8k"] / "main" / f"{split}-00000-of-00001.parquet", _parquet(table)
        )
    return folders


def _dapo_shaped(
    problems: list[tuple[str, str]], indexes: list[str] | list[int], repeats: int = 2
) -> pa.Table:
    rows = [(p, a, i) for (p, a), i in zip(problems, indexes, strict=True)] * repeats
    index_type = pa.string() if isinstance(indexes[0], str) else pa.int64()
    return pa.table(
        {
            "data_source": pa.array(["math_dapo"] * len(rows), pa.string()),
            "prompt": pa.array(
                [
                    [{"content": DAPO_TEMPLATE.format(problem=p), "role": "user"}]
                    for p, _, _ in rows
                ],
                pa.list_(_MESSAGE),
            ),
            "ability": pa.array(["MATH"] * len(rows), pa.string()),
            "reward_model": pa.array(
                [{"ground_truth": a, "style": "rule-lighteval/MATH_v2"} for _, a, _ in rows],
                _REWARD,
            ),
            "extra_info": pa.array(
                [{"index": i} for _, _, i in rows], pa.struct([("index", index_type)])
            ),
        }
    )


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy", row_group_size=65536, version="2.6")
    return sink.getvalue().to_pybytes()


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
