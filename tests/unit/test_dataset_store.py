"""Prepared datasets in the artifact store (a3rl.planning.dataset_store): converted from the raw
artifact once, recorded like any artifact, redone only when an input changes."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from a3rl.node import artifacts
from a3rl.planning import dataset_store
from a3rl.sim import datasets_fixture

SPEC = {"source": "aime_raw", "format": "aime_2024", "dest": "data/dapo_math"}


@pytest.fixture()
def store(tmp_path):
    raw = datasets_fixture.write_raw_datasets(tmp_path / "hub")
    store = tmp_path / "store"
    artifacts.ensure(str(store), "aime_raw",
                     {"kind": "file", "path": str(raw["aime_2024"]), "dest": "raw/aime_2024"})
    return store


def test_prepared_once_then_present(store):
    first = dataset_store.ensure(str(store), "aime_2024", SPEC)
    assert first["action"] == "prepared"
    assert [f["path"] for f in first["entry"]["files"]] == ["data/dapo_math/aime-2024.parquet"]
    again = dataset_store.ensure(str(store), "aime_2024", SPEC)
    assert again["action"] == "present" and not again["changed"]
    record = artifacts.read_manifest(str(store))["artifacts"]
    assert record["dataset:aime_2024"]["source"] == "aime_raw"


def test_check_mode_prepares_nothing(store):
    got = dataset_store.ensure(str(store), "aime_2024", SPEC, check=True)
    assert got["action"] == "would_prepare"
    assert not (store / "data").exists()


def test_new_parameters_or_a_damaged_output_prepare_again(store):
    dataset_store.ensure(str(store), "aime_2024", SPEC)
    changed = dataset_store.ensure(str(store), "aime_2024", {**SPEC, "params": {"dedupe": True}})
    assert changed["action"] == "prepared" and "parameters" in changed["reason"]
    out = store / "data/dapo_math/aime-2024.parquet"
    out.write_bytes(out.read_bytes()[:-10] + b"0123456789")
    again = dataset_store.ensure(str(store), "aime_2024", {**SPEC, "params": {"dedupe": True}})
    assert again["action"] == "prepared"


def test_malformed_raw_data_is_refused_and_nothing_recorded(tmp_path):
    bad = tmp_path / "bad/data"
    bad.mkdir(parents=True)
    rows = [{"data_source": "aime", "prompt": "not a list of messages", "ability": "math",
             "reward_model": {"ground_truth": "1", "style": "rule"},
             "extra_info": {"index": 0}}]
    pq.write_table(pa.Table.from_pylist(rows), bad / "aime-2024.parquet")
    store = tmp_path / "store"
    artifacts.ensure(str(store), "aime_raw",
                     {"kind": "file", "path": str(bad.parent), "dest": "raw/aime_2024"})
    with pytest.raises(dataset_store.DatasetError, match="row 0.*prompt|prompt.*row 0"):
        dataset_store.ensure(str(store), "aime_2024", SPEC)
    assert "dataset:aime_2024" not in json.loads((store / "manifest.json").read_text())[
        "artifacts"]
    assert not (store / "data/dapo_math/aime-2024.parquet").exists()


def test_unknown_format_and_missing_source_name_the_fix(store):
    with pytest.raises(dataset_store.DatasetError, match="format 'csv' is not one of"):
        dataset_store.ensure(str(store), "x", {**SPEC, "format": "csv"})
    with pytest.raises(dataset_store.DatasetError, match="not in the store"):
        dataset_store.ensure(str(store), "x", {**SPEC, "source": "nope"})
    # --check before the first fetch: it would be prepared, nothing fails.
    got = dataset_store.ensure(str(store), "x", {**SPEC, "source": "nope"}, check=True)
    assert got["action"] == "would_prepare"


def test_a_single_file_source_is_found_in_its_folder(tmp_path):
    """An http or file source is one file (deepscaler.json), not a snapshot folder."""
    raw = datasets_fixture.write_raw_datasets(tmp_path / "hub")
    store = tmp_path / "store"
    artifacts.ensure(str(store), "ds_raw", {
        "kind": "file", "path": str(raw["deepscaler"] / "deepscaler.json"),
        "dest": "raw/deepscaler/deepscaler.json"})
    got = dataset_store.ensure(str(store), "deepscaler", {
        "source": "ds_raw", "format": "deepscaler", "dest": "data/deepscaler"})
    assert [f["path"] for f in got["entry"]["files"]] == [
        "data/deepscaler/train.parquet", "data/deepscaler/valid.parquet"]


def test_two_datasets_may_not_write_the_same_file(store):
    dataset_store.ensure(str(store), "aime_2024", SPEC)
    with pytest.raises(dataset_store.DatasetError, match="already the output of dataset:aime"):
        dataset_store.ensure(str(store), "aime_again", SPEC)


def test_probe_inputs_follow_the_store_and_the_converter(store, monkeypatch):
    """What the data role's probe digests (manifest.store_state, dataset_store.digests):
    the same on a re-run, changed by a store file touched or removed on the controller and
    by a new converter, as ensure() would notice each."""
    from a3rl.planning import converter_version, manifest

    dataset_store.ensure(str(store), "aime_2024", SPEC)
    record = artifacts.read_manifest(str(store))
    names = ["aime_raw", "dataset:aime_2024", "dataset:none"]
    state = manifest.store_state(record, names, str(store))
    assert state["dataset:none"] is None
    assert state == manifest.store_state(record, names, str(store))
    key = dataset_store.digests({"aime_2024": SPEC}, ["aime_2024"], record)
    assert key == {"aime_2024": record["artifacts"]["dataset:aime_2024"]["spec_digest"]}
    assert dataset_store.digests({"x": {**SPEC, "source": "gone"}}, ["x"], record) == {"x": None}
    monkeypatch.setattr(converter_version, "CONVERTER_VERSION", "another")
    assert dataset_store.digests({"aime_2024": SPEC}, ["aime_2024"], record) != key
    out = store / "data/dapo_math/aime-2024.parquet"
    os.utime(out, ns=(1, 1))
    assert manifest.store_state(record, names, str(store)) != state
    out.unlink()
    seen = manifest.store_state(record, names, str(store))["dataset:aime_2024"]["seen"]
    assert seen == [["data/dapo_math/aime-2024.parquet", None, None]]


def test_placed_paths_name_each_file_and_its_stamp(store):
    from a3rl.planning import manifest

    dataset_store.ensure(str(store), "aime_2024", SPEC)
    record = artifacts.read_manifest(str(store))
    assert manifest.placed_paths(record, ["dataset:aime_2024", "missing"], "/data/a3rl/",
                                 "/data/a3rl/.a3rl/stamps") == [
        "/data/a3rl/data/dapo_math/aime-2024.parquet",
        "/data/a3rl/.a3rl/stamps/data/dapo_math/aime-2024.parquet.sha256"]


def test_the_probe_key_is_computed_without_importing_pyarrow(tmp_path):
    """digests() runs in Ansible's forked workers (the a3rl_dataset_digests filter): it
    must not import pyarrow (a3rl.planning.converter_version), yet gives the key ensure()
    records."""
    import subprocess
    import sys

    code = (
        "import sys, json\n"
        "from a3rl.planning import dataset_store\n"
        "spec = json.loads(sys.argv[1])\n"
        "record = {'artifacts': {'raw': {'files': [{'path': 'a', 'sha256': 'b'}]}}}\n"
        "print(dataset_store.digests({'x': spec}, ['x'], record)['x'])\n"
        "print('pyarrow' in sys.modules)\n"
    )
    spec = {**SPEC, "source": "raw"}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)],
                          capture_output=True, text=True, check=True)
    key, imported = proc.stdout.split()
    assert imported == "False"
    record = {"artifacts": {"raw": {"files": [{"path": "a", "sha256": "b"}]}}}
    assert key == dataset_store.digest(spec, record["artifacts"]["raw"])
