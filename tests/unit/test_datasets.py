"""Raw datasets -> verl parquet (``a3rl.planning.datasets``), on the simulator's stand-in snapshots.

What the training run relies on: the recipe's file names, rows verl can read (prompt,
data_source, reward_model.ground_truth, extra_info.index), the recipe's deepscaler split,
verl's own gsm8k conversion, byte-identical re-runs, and validation messages that name
the file, the row and the column.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
try:
    from a3rl.planning import datasets
    from a3rl.rewards import deepscaler as reward
    from a3rl.sim import datasets_fixture as fixture
except ImportError:  # not installed into this interpreter: use the source tree
    sys.path.insert(0, str(REPO / "tools"))
    from a3rl.planning import datasets
    from a3rl.rewards import deepscaler as reward
    from a3rl.sim import datasets_fixture as fixture


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> dict[str, Path]:
    return fixture.write_raw_datasets(tmp_path_factory.mktemp("hub"))


@pytest.fixture(scope="module")
def prepared(raw, tmp_path_factory) -> dict[str, list[Path]]:
    out = tmp_path_factory.mktemp("data")
    return {name: datasets.prepare(name, raw[name], out / name) for name in datasets.RAW_FORMATS}


def rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def write(table: pa.Table, path: Path) -> Path:
    pq.write_table(table, path)
    return path


# ------------------------------------------------------------------ stand-in snapshots


def test_fixture_writes_the_hub_layout_once(raw, tmp_path):
    assert raw["deepscaler"].parts[-3:] == (
        "datasets",
        "agentica-org",
        "DeepScaleR-Preview-Dataset",
    )
    expected = {
        "deepscaler": ["deepscaler.json"],
        "dapo_math_17k": ["data/dapo-math-17k.parquet"],
        "aime_2024": ["data/aime-2024.parquet"],
        "gsm8k": ["main/test-00000-of-00001.parquet", "main/train-00000-of-00001.parquet"],
    }
    for name, files in expected.items():
        found = sorted(str(p.relative_to(raw[name])) for p in raw[name].rglob("*") if p.is_file())
        assert found == files, name
    first = fixture.write_raw_datasets(tmp_path)
    files = sorted(p for folder in first.values() for p in folder.rglob("*") if p.is_file())
    for p in files:
        os.utime(p, (1_000_000, 1_000_000))
    before = {p: p.read_bytes() for p in files}
    fixture.write_raw_datasets(tmp_path)
    assert all(p.stat().st_mtime == 1_000_000 and p.read_bytes() == before[p] for p in files)


def test_fixture_bytes_are_the_same_everywhere(raw, tmp_path):
    again = fixture.write_raw_datasets(tmp_path)
    for name, folder in raw.items():
        for p in folder.rglob("*"):
            if p.is_file():
                assert (again[name] / p.relative_to(folder)).read_bytes() == p.read_bytes(), p


# ------------------------------------------------------------------------ conversion


def test_outputs_carry_the_recipe_file_names_and_validate(prepared):
    assert {name: [p.name for p in paths] for name, paths in prepared.items()} == {
        "deepscaler": ["train.parquet", "valid.parquet"],
        "dapo_math_17k": ["dapo-math-17k.parquet"],
        "aime_2024": ["aime-2024.parquet"],
        "gsm8k": ["train.parquet", "test.parquet"],
    }
    for paths in prepared.values():
        for p in paths:
            assert datasets.validate(p) == [], p
    assert not [p for paths in prepared.values() for p in paths[0].parent.glob(".*")]


def test_deepscaler_matches_the_recipes_conversion(prepared):
    train, valid = prepared["deepscaler"]
    # int(14 * 0.9) = 12: the first 12 items train, no shuffle; 2 of them have no answer.
    assert datasets.summary(train)["rows"] == 10
    assert datasets.summary(valid)["data_sources"] == {"deepscaler": 2}
    assert rows(train)[1] == {
        "data_source": "deepscaler",
        "prompt": [{"role": "user", "content": "Compute $\\frac{3}{6}$ in lowest terms."}],
        "ability": "math",
        "reward_model": {"ground_truth": "\\frac{1}{2}", "style": "rule"},
        "extra_info": {
            "split": "train",
            "index": 1,
            "answer": "Divide by 3: $\\boxed{\\frac{1}{2}}$.",
        },
    }
    held_out = rows(valid)
    assert [r["extra_info"]["index"] for r in held_out] == [12, 13]
    assert 4 not in [r["extra_info"]["index"] for r in rows(train)]
    assert {r["extra_info"]["split"] for r in held_out} == {"valid"}


def test_deepscaler_split_and_instruction_are_parameters(raw, tmp_path):
    train, valid = datasets.prepare(
        "deepscaler",
        raw["deepscaler"],
        tmp_path,
        train_ratio=0.5,
        instruction=datasets.DEEPSCALER_INSTRUCTION,
    )
    assert (len(rows(train)), len(rows(valid))) == (6, 6)
    assert rows(train)[0]["prompt"][0]["content"] == (
        "What is $1 + 1$? Let's think step by step and output the final answer within \\boxed{}."
    )
    for bad in (0, 1, 1.5, True, "0.9"):
        with pytest.raises(datasets.DatasetError, match="train_ratio"):
            datasets.prepare("deepscaler", raw["deepscaler"], tmp_path, train_ratio=bad)
    with pytest.raises(datasets.DatasetError, match=r"unknown parameter\(s\) dedupe"):
        datasets.prepare("deepscaler", raw["deepscaler"], tmp_path, dedupe=True)
    with pytest.raises(datasets.DatasetError, match="unknown dataset 'math'"):
        datasets.prepare("math", raw["deepscaler"], tmp_path)


def test_the_fixtures_worked_solutions_earn_the_reward(prepared):
    """The reward the GRPO runs use pays each stand-in solution its own answer."""
    for path in prepared["deepscaler"]:
        for row in rows(path):
            truth = row["reward_model"]["ground_truth"]
            assert reward.compute_score("deepscaler", row["extra_info"]["answer"], truth) == 1.0


def test_gsm8k_is_converted_as_verls_script_does(prepared):
    train, test = prepared["gsm8k"]
    question = fixture.GSM8K_ROWS["train"][0][0]
    answer = fixture.GSM8K_ROWS["train"][0][1]
    assert rows(train)[0] == {
        "data_source": "openai/gsm8k",
        "prompt": [
            {
                "role": "user",
                "content": question
                + ' Let\'s think step by step and output the final answer after "####".',
            }
        ],
        "ability": "math",
        "reward_model": {"ground_truth": "72", "style": "rule"},
        "extra_info": {"split": "train", "index": 0, "answer": answer, "question": question},
    }
    assert rows(train)[2]["reward_model"]["ground_truth"] == "1250"  # "#### 1,250"
    assert [r["extra_info"]["index"] for r in rows(test)] == [0, 1, 2]
    assert {r["extra_info"]["split"] for r in rows(test)} == {"test"}


def test_dapo_is_kept_as_published_with_normalised_types(prepared, raw):
    (out,) = prepared["dapo_math_17k"]
    table = pq.read_table(out)
    assert table.num_rows == 8  # every prompt twice, as in the stand-in (100 times upstream)
    assert table.schema.field("prompt").type.value_type == pa.struct(
        [("role", pa.string()), ("content", pa.string())]
    )
    assert table.schema.field("reward_model").type == pa.struct(
        [("ground_truth", pa.string()), ("style", pa.string())]
    )
    source = pq.read_table(raw["dapo_math_17k"] / "data" / "dapo-math-17k.parquet").to_pylist()
    first = table.to_pylist()[5]
    assert first["prompt"] == [{"role": "user", "content": source[5]["prompt"][0]["content"]}]
    assert first["reward_model"] == source[5]["reward_model"]
    assert first["extra_info"] == {"index": 5, "source_index": source[5]["extra_info"]["index"]}
    assert first["data_source"] == "math_dapo" and first["ability"] == "MATH"


def test_dedupe_keeps_the_first_of_each_prompt(raw, tmp_path):
    (out,) = datasets.prepare("dapo_math_17k", raw["dapo_math_17k"], tmp_path, dedupe=True)
    kept = rows(out)
    assert [r["reward_model"]["ground_truth"] for r in kept] == [
        a for _, a in fixture.DAPO_PROBLEMS
    ]
    assert [r["extra_info"]["index"] for r in kept] == [0, 1, 2, 3]
    # The stand-in's repeats are equal row for row, so which one stays shows only when
    # they differ: here each repeat has an index of its own, and the problems come back
    # in another order, so keeping the last of each changes both the ids and the order.
    problems = fixture.DAPO_PROBLEMS
    twice = problems + problems[::-1]
    ids = [f"id-{n}" for n in range(len(twice))]
    snapshot = tmp_path / "dapo"
    (snapshot / "data").mkdir(parents=True)
    write(fixture._dapo_shaped(twice, ids, repeats=1), snapshot / "data/dapo-math-17k.parquet")
    (out,) = datasets.prepare("dapo_math_17k", snapshot, tmp_path / "out", dedupe=True)
    kept = rows(out)
    assert [r["extra_info"]["source_index"] for r in kept] == ids[: len(problems)]
    assert [r["reward_model"]["ground_truth"] for r in kept] == [a for _, a in problems]
    (aime,) = datasets.prepare("aime_2024", raw["aime_2024"], tmp_path, dedupe=True)
    assert len(rows(aime)) == len(fixture.AIME_PROBLEMS)


def test_an_integer_index_is_kept(prepared):
    (out,) = prepared["aime_2024"]
    assert [r["extra_info"] for r in rows(out)] == [{"index": i} for i in (0, 1, 2, 0, 1, 2)]


def test_a_rerun_gives_the_same_bytes_and_leaves_the_file_alone(raw, prepared, tmp_path):
    for name, paths in prepared.items():
        again = datasets.prepare(name, raw[name], tmp_path / name)
        assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths], name
    target = tmp_path / "deepscaler" / "train.parquet"
    os.utime(target, (1_000_000, 1_000_000))
    datasets.prepare("deepscaler", raw["deepscaler"], tmp_path / "deepscaler")
    assert target.stat().st_mtime == 1_000_000
    meta = pq.ParquetFile(target).metadata
    assert meta.created_by.startswith("parquet-cpp-arrow") and set(meta.metadata) == {
        b"ARROW:schema"
    }
    assert datasets.output_fingerprint().startswith(datasets.CONVERTER_VERSION + "+pyarrow-")
    # Read from pyarrow's metadata (a3rl.planning.converter_version), it is what pyarrow reports.
    assert datasets.output_fingerprint() == f"{datasets.CONVERTER_VERSION}+pyarrow-{pa.__version__}"


def test_summary_reports_rows_sources_and_digest(prepared):
    s = datasets.summary(prepared["gsm8k"][0])
    assert s["file"] == "train.parquet" and s["rows"] == 4
    assert s["data_sources"] == {"openai/gsm8k": 4}
    assert len(s["sha256"]) == 64 and s["bytes"] > 0


# ------------------------------------------------------------------- raw-side errors


def test_a_snapshot_without_its_file_names_what_was_looked_for(raw, tmp_path):
    snapshot = tmp_path / "BytedTsinghua-SIA" / "DAPO-Math-17k"
    (snapshot / "data").mkdir(parents=True)
    (snapshot / "README.md").write_text("card\n")
    (snapshot / "data" / "other.parquet").write_bytes(b"")
    (snapshot / ".msc").write_text("modelscope bookkeeping\n")
    with pytest.raises(datasets.DatasetError) as err:
        datasets.prepare("dapo_math_17k", snapshot, tmp_path / "out")
    text = str(err.value)
    assert "data/dapo-math-17k.parquet" in text and "BytedTsinghua-SIA/DAPO-Math-17k" in text
    assert "README.md, data/other.parquet" in text and ".msc" not in text
    assert not (tmp_path / "out").exists()
    with pytest.raises(datasets.DatasetError, match="does not exist"):
        datasets.prepare("gsm8k", tmp_path / "nowhere", tmp_path / "out")
    partial = tmp_path / "gsm8k"
    (partial / "main").mkdir(parents=True)
    (partial / "main" / "train-00000-of-00001.parquet").write_bytes(
        (raw["gsm8k"] / "main" / "train-00000-of-00001.parquet").read_bytes()
    )
    with pytest.raises(datasets.DatasetError, match=r"has no main/test-\*\.parquet"):
        datasets.prepare("gsm8k", partial, tmp_path / "out")


def test_a_folder_holding_just_the_file_is_accepted(raw, prepared, tmp_path):
    """What a download limited to the one file, or a hand-placed file, looks like."""
    source = raw["dapo_math_17k"] / "data" / "dapo-math-17k.parquet"
    (tmp_path / "dapo-math-17k.parquet").write_bytes(source.read_bytes())
    (out,) = datasets.prepare("dapo_math_17k", tmp_path, tmp_path / "out")
    assert out.read_bytes() == prepared["dapo_math_17k"][0].read_bytes()


def test_a_gsm8k_answer_without_its_final_line_is_refused(tmp_path):
    snapshot = tmp_path / "gsm8k"
    (snapshot / "main").mkdir(parents=True)
    good = pa.table({"question": ["q0", "q1"], "answer": ["a\n#### 3", "a\n#### 4"]})
    bad = pa.table({"question": ["q0", "q1"], "answer": ["a\n#### 3", "no final line"]})
    write(good, snapshot / "main" / "train-00000-of-00001.parquet")
    write(bad, snapshot / "main" / "test-00000-of-00001.parquet")
    with pytest.raises(datasets.DatasetError, match="gsm8k: test row 1: .*'#### <number>'"):
        datasets.prepare("gsm8k", snapshot, tmp_path / "out")


def test_flawed_deepscaler_items_are_dropped_by_position_and_the_split_kept(tmp_path):
    """Items with no answer (the published file reportedly has 6) are dropped and
    reported; the 90/10 cut is on the original positions, as the recipe's script makes it."""
    snapshot = tmp_path / "ds"
    snapshot.mkdir()
    items = [{"problem": f"p{i}", "answer": str(i)} for i in range(20)]
    items[3] = {"problem": "p3"}  # no answer, in the train part
    items[7]["answer"] = "  "
    items[18] = {"problem": "p18", "answer": None}  # in the valid part
    (snapshot / "deepscaler.json").write_text(json.dumps(items))
    (train, valid), dropped = datasets.prepare_report("deepscaler", snapshot, tmp_path / "out")
    assert [r["extra_info"]["index"] for r in rows(train)] == [
        i for i in range(18) if i not in (3, 7)]
    assert [r["extra_info"]["index"] for r in rows(valid)] == [19]
    assert dropped["count"] == 3 and dropped["of"] == 20
    assert dropped["positions"] == [3, 7, 18]
    assert "'answer' is missing or empty" in dropped["reasons"]["3"]


def test_deepscaler_items_whose_answer_is_not_a_finite_number_are_dropped(tmp_path):
    snapshot = tmp_path / "ds"
    snapshot.mkdir()
    items = [{"problem": f"p{i}", "answer": str(i)} for i in range(20)]
    items[12]["answer"] = "\\infty"  # LaTeX: a real answer, kept
    # json.dumps writes NaN and Infinity as the bare literals a tool's dump holds.
    text = json.dumps(items).replace('"answer": "1"', '"answer": NaN').replace(
        '"answer": "2"', '"answer": Infinity').replace('"answer": "4"', '"answer": -Infinity')
    text = text.replace('"answer": "5"', '"answer": "nan"').replace(
        '"answer": "6"', '"answer": " +inf "').replace('"answer": "19"', '"answer": "Infinity"')
    (snapshot / "deepscaler.json").write_text(text)
    (train, valid), dropped = datasets.prepare_report("deepscaler", snapshot, tmp_path / "out")
    assert dropped["positions"] == [1, 2, 4, 5, 6, 19] and dropped["count"] == 6
    assert "'answer' 'nan' is not a finite number" in dropped["reasons"]["1"]
    assert "'answer' '+inf' is not a finite number" in dropped["reasons"]["6"]
    truths = [r["reward_model"]["ground_truth"] for r in rows(train) + rows(valid)]
    assert "\\infty" in truths and len(truths) == 14
    assert not {t.lower().strip("+- ") for t in truths} & {"nan", "inf", "infinity"}


def test_more_flawed_items_than_the_share_is_refused(tmp_path):
    snapshot = tmp_path / "ds"
    snapshot.mkdir()
    items = [{"problem": f"p{i}", "answer": "" if i % 3 == 0 else "1"} for i in range(60)]
    (snapshot / "deepscaler.json").write_text(json.dumps(items))
    with pytest.raises(datasets.DatasetError,
                       match="20 of 60 items in deepscaler.json are flawed .*Fix: fetch"):
        datasets.prepare("deepscaler", snapshot, tmp_path / "out")
    # Allowed: max(1% of 60, 10) = 10 < 20; a share of 0.5 allows 30.
    datasets.prepare("deepscaler", snapshot, tmp_path / "out", max_flawed_share=0.5)
    for bad in (1, -0.1, True, "0.1"):
        with pytest.raises(datasets.DatasetError, match="max_flawed_share must be"):
            datasets.prepare("deepscaler", snapshot, tmp_path / "out", max_flawed_share=bad)


def test_unreadable_deepscaler_json_is_refused(tmp_path):
    snapshot = tmp_path / "ds"
    snapshot.mkdir()
    (snapshot / "deepscaler.json").write_text("{not json")
    with pytest.raises(datasets.DatasetError, match="not readable JSON"):
        datasets.prepare("deepscaler", snapshot, tmp_path / "out")


def test_nothing_is_written_when_an_output_would_be_invalid(raw, tmp_path):
    source = pq.read_table(raw["dapo_math_17k"] / "data" / "dapo-math-17k.parquet")
    truths = pa.array([{"ground_truth": None if i == 3 else "1", "style": "s"} for i in range(8)])
    snapshot = tmp_path / "dapo"
    (snapshot / "data").mkdir(parents=True)
    write(source.set_column(3, "reward_model", truths), snapshot / "data" / "dapo-math-17k.parquet")
    with pytest.raises(datasets.DatasetError) as err:
        datasets.prepare("dapo_math_17k", snapshot, tmp_path / "out")
    assert "dapo-math-17k.parquet row 3, column reward_model.ground_truth: missing (null)" in str(
        err.value
    )
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ validation


@pytest.fixture()
def good(prepared) -> pa.Table:
    return pq.read_table(prepared["deepscaler"][0])


def set_field(table: pa.Table, column: str, field: str, values: pa.Array) -> pa.Table:
    struct = table.column(column).combine_chunks()
    names = [struct.type.field(i).name for i in range(struct.type.num_fields)]
    arrays = [values if n == field else struct.field(n) for n in names]
    return table.set_column(
        table.column_names.index(column), column, pa.StructArray.from_arrays(arrays, names)
    )


def test_a_missing_column_is_named(good, tmp_path):
    path = write(good.drop_columns(["data_source"]), tmp_path / "train.parquet")
    assert datasets.validate(path) == [
        "train.parquet, column data_source: missing "
        "(columns: prompt, ability, reward_model, extra_info)"
    ]


def test_a_prompt_given_as_a_string_is_named_by_row(good, tmp_path):
    plain = pa.array([m[0]["content"] for m in good.column("prompt").to_pylist()])
    path = write(good.set_column(1, "prompt", plain), tmp_path / "train.parquet")
    problems = datasets.validate(path)
    assert problems[0] == (
        "train.parquet row 0, column prompt: "
        "expected a list of {role, content} messages, got a string"
    )
    assert len(problems) == 10


def test_empty_content_bad_role_and_empty_prompt_are_named(good, tmp_path):
    prompts = good.column("prompt").to_pylist()
    prompts[1] = [{"role": "user", "content": "  "}]
    prompts[4] = [{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}]
    prompts[7] = []
    table = good.set_column(1, "prompt", pa.array(prompts, good.schema.field("prompt").type))
    assert datasets.validate(write(table, tmp_path / "t.parquet")) == [
        "t.parquet row 1, column prompt: message 0: content is empty",
        "t.parquet row 4, column prompt: "
        "message 1: role 'bot' is not one of system, user, assistant",
        "t.parquet row 7, column prompt: empty list; expected at least one {role, content} message",
    ]


def test_missing_or_empty_ground_truth_is_named(good, tmp_path):
    truths = good.column("reward_model").combine_chunks().field("ground_truth").to_pylist()
    truths[2], truths[6] = None, ""
    table = set_field(good, "reward_model", "ground_truth", pa.array(truths, pa.string()))
    assert datasets.validate(write(table, tmp_path / "t.parquet")) == [
        "t.parquet row 2, column reward_model.ground_truth: missing (null)",
        "t.parquet row 6, column reward_model.ground_truth: empty",
    ]
    no_field = good.set_column(3, "reward_model", pa.array([{"style": "rule"}] * good.num_rows))
    assert datasets.validate(write(no_field, tmp_path / "u.parquet")) == [
        "u.parquet, column reward_model.ground_truth: missing (reward_model has fields: style)"
    ]


def test_a_non_integer_index_is_named(good, tmp_path):
    strings = pa.array([f"id-{i}" for i in range(good.num_rows)])
    path = write(set_field(good, "extra_info", "index", strings), tmp_path / "t.parquet")
    problems = datasets.validate(path)
    assert (
        problems[0]
        == "t.parquet row 0, column extra_info.index: expected an integer, got a string 'id-0'"
    )
    assert len(problems) == good.num_rows
    nulls = pa.array([None if i == 5 else i for i in range(good.num_rows)], pa.int64())
    path = write(set_field(good, "extra_info", "index", nulls), tmp_path / "u.parquet")
    assert datasets.validate(path) == ["u.parquet row 5, column extra_info.index: missing (null)"]


def test_a_file_that_is_not_parquet_is_one_problem(tmp_path):
    path = tmp_path / "train.parquet"
    path.write_text('{"prompt": "json, not parquet"}\n')
    (problem,) = datasets.validate(path)
    assert problem.startswith("train.parquet: not a parquet file (")
    assert datasets.validate(tmp_path / "absent.parquet") == [
        f"absent.parquet: no such file ({tmp_path / 'absent.parquet'})"
    ]
    empty = write(pa.table({"prompt": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    assert datasets.validate(empty) == ["empty.parquet: no rows"]


def test_the_list_is_capped_and_located_in_a_large_file(tmp_path):
    n = 40_000
    table = pa.table(
        {
            "data_source": pa.array(["deepscaler"] * n),
            "prompt": pa.array([[{"role": "user", "content": f"problem {i}"}] for i in range(n)]),
            "reward_model": pa.array([{"ground_truth": str(i), "style": "rule"} for i in range(n)]),
            "extra_info": pa.array([{"index": i} for i in range(n)]),
        }
    )
    assert datasets.validate(write(table, tmp_path / "big.parquet")) == []
    sources = pc.if_else(
        pc.greater_equal(pa.array(range(n)), n - 30), pa.scalar(""), table.column("data_source")
    )
    problems = datasets.validate(
        write(table.set_column(0, "data_source", sources), tmp_path / "bad.parquet")
    )
    assert len(problems) == datasets.MAX_PROBLEMS + 1
    assert problems[0] == f"bad.parquet row {n - 30}, column data_source: empty string"
    assert problems[-1] == "bad.parquet: and 10 more problems"


def test_the_cli_validates_and_prepares(raw, tmp_path, capsys):
    assert (
        datasets.main(["prepare", "aime_2024", str(raw["aime_2024"]), str(tmp_path), "--dedupe"])
        == 0
    )
    assert '"rows": 3' in capsys.readouterr().out
    assert datasets.main(["validate", str(tmp_path / "aime-2024.parquet")]) == 0
    (tmp_path / "x.parquet").write_text("no")
    assert datasets.main(["validate", str(tmp_path / "x.parquet")]) == 1
    assert "not a parquet file" in capsys.readouterr().out
    assert datasets.main(["prepare", "gsm8k", str(tmp_path / "none"), str(tmp_path)]) == 2
