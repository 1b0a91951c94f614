"""Data and weights on the simulated cluster: the datasets converted to verl parquet and
placed on the nodes, the GRPO reward staged, model files fetched once (through ModelScope's
real client against the STAND-IN hub, with an interruption) and placed, the disk checked
before anything starts, and the dist-checkpoint conversion (a STAND-IN converter under a
STAND-IN torchrun) redone only when USE_ALLTOALL_OVERLAP changes."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from a3rl.planning import datasets
from a3rl.sim import hub

from .conftest import failure_text, play, provision

# What this module asserts on is the same under either strategy: its plays run under
# Mitogen (conftest.play_strategy), except the weights play, which pins `linear` itself.
PLAY_STRATEGY = "mitogen"

DATA = "playbooks/data.yml"
WEIGHTS = "playbooks/weights.yml"
ASSETS = "/data/a3rl"
WORKDIR = "/data/a3rl/llm_rl/qwen3"
PARQUETS = [
    "data/deepscaler/train.parquet",
    "data/deepscaler/valid.parquet",
    "data/dapo_math/dapo-math-17k.parquet",
    "data/dapo_math/aime-2024.parquet",
    "data/gsm8k/train.parquet",
    "data/gsm8k/test.parquet",
]


def sh(node: str, script: str, check: bool = True) -> str:
    from a3rl.sim import podman

    return podman.exec_(node, "sh", "-c", script, check=check).stdout


def overrides(sim) -> dict:
    data = yaml.safe_load((sim.inventory_dir / "group_vars/all.yml").read_text())
    return copy.deepcopy(data["a3rl_artifact_overrides"])


def record(sim) -> dict:
    return json.loads((sim.state / "store/manifest.json").read_text())["artifacts"]


@pytest.fixture(scope="module")
def staged(sim):
    """site.yml, whose data and weights stages these are (a no-op after an earlier test)."""
    return provision(sim)


def test_datasets_on_every_node_in_verl_format(staged, tmp_path):
    rec = record(staged)
    # The stand-in deepscaler.json's two items with no answer were left out, recorded.
    dropped = rec["dataset:deepscaler"]["dropped"]
    assert (dropped["count"], dropped["of"], dropped["positions"]) == (2, 14, [4, 8])
    for node in staged.members():
        c = node.container
        for rel in PARQUETS:
            local = tmp_path / node.hostname / rel
            local.parent.mkdir(parents=True, exist_ok=True)
            from a3rl.sim import podman

            podman.run(["cp", f"{c}:{ASSETS}/{rel}", str(local)])
            assert datasets.validate(local) == [], rel
            stored = [f for e in rec.values() for f in e.get("files", []) if f["path"] == rel]
            digest = hashlib.sha256(local.read_bytes()).hexdigest()
            assert stored and stored[0]["sha256"] == digest
        # The stamps live beside the data, not in the dataset folders.
        assert sh(c, f"ls {ASSETS}/data/deepscaler").split() == ["train.parquet", "valid.parquet"]
        stamp = f"{ASSETS}/.a3rl/stamps/data/deepscaler/train.parquet.sha256"
        assert sh(c, f"test -f {stamp} && echo ok").strip() == "ok"
    row = pq.read_table(tmp_path / "node1" / PARQUETS[0]).slice(0, 1).to_pylist()[0]
    assert row["data_source"] == "deepscaler"
    assert row["prompt"][0]["role"] == "user" and row["reward_model"]["ground_truth"]


def test_reward_function_scores_inside_the_training_container(staged):
    """The staged deepscaler.py imported by the training image's Python, as verl would."""
    probe = (
        "import importlib.util as u; "
        f"s = u.spec_from_file_location('r', '{WORKDIR}/a3rl_rewards/deepscaler.py'); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); "
        "print(m.compute_score('deepscaler', 'so \\\\boxed{\\\\frac{1}{2}}', '\\\\frac{1}{2}'), "
        "m.compute_score('deepscaler', 'so \\\\boxed{3}', '4'))"
    )
    for node in staged.members():
        out = sh(node.container, f"docker exec a3rl-train python3 -c \"{probe}\"")
        assert out.split() == ["1.0", "0.0"], out


def test_model_files_on_every_node(staged):
    rec = record(staged)["qwen3_32b"]
    for node in staged.members():
        c = node.container
        for f in rec["files"]:
            got = sh(c, f"sha256sum {ASSETS}/{f['path']}").split()[0]
            assert got == f["sha256"], f["path"]
        names = sh(c, f"ls -A {ASSETS}/models/Qwen3-32B").split()
        assert "config.json" in names and not any(n.endswith(".sha256") for n in names), names


def test_random_init_places_config_files_only(staged):
    result = play(WEIGHTS, staged.inventory_dir,
                  extravars={"model": "qwen3_235b", "weights": "random"})
    assert result.ok, failure_text(result)
    for node in staged.members():
        names = sh(node.container, f"ls -A {ASSETS}/models/Qwen3-235B-A22B-config").split()
        assert sorted(names) == ["config.json", "generation_config.json", "tokenizer.json",
                                 "tokenizer_config.json", "vocab.json"], names
    # No conversion for random weights: the play never reached the converter.
    events = (result.record / "artifacts").rglob("job_events/*.json")
    ran = [json.loads(e.read_text()).get("event_data", {}).get("task") for e in events]
    assert "Weights | Check the models" in ran
    assert "Checkpoint | Compare with the checkpoint the node has" not in ran


def test_second_run_and_check_mode_change_nothing(staged):
    for playbook in (DATA, WEIGHTS):
        again = play(playbook, staged.inventory_dir)
        assert again.ok and again.changed == 0, (playbook, again.stats.get("changed"))
        check = play(playbook, staged.inventory_dir, check=True)
        assert check.ok and check.changed == 0, (playbook, failure_text(check))


def test_damage_on_one_node_or_in_the_store_is_repaired_by_a_rerun(staged):
    """The data and weights roles skip their tasks only when their probe finds everything
    as the last run left it: a placed file removed or edited on one node, a stamp gone, a
    reward function edited, or a converted file gone from the controller's store each make
    the next run repair it; the run after that changes nothing."""
    node2 = staged.members()[1].container
    rec = record(staged)
    model = next(f for f in rec["qwen3_32b"]["files"] if f["path"].endswith("config.json"))
    reward = f"{WORKDIR}/a3rl_rewards/deepscaler.py"
    good_reward = sh(node2, f"sha256sum {reward}").split()[0]
    sh(node2, f"rm {ASSETS}/{PARQUETS[5]} {ASSETS}/.a3rl/stamps/{PARQUETS[0]}.sha256"
              f" && echo '# edited' >> {reward} && echo ' ' >> {ASSETS}/{model['path']}")
    (staged.state / "store" / PARQUETS[3]).unlink()
    for playbook in (DATA, WEIGHTS):
        repaired = play(playbook, staged.inventory_dir)
        assert repaired.ok, failure_text(repaired)
        assert repaired.stats["changed"].get("node2", 0) > 0, (playbook, repaired.stats)
    rec = record(staged)
    assert (staged.state / "store" / PARQUETS[3]).is_file()
    files = [f for name in ("dataset:gsm8k", "dataset:aime_2024", "qwen3_32b")
             for f in rec[name]["files"]]
    for f in files:
        assert sh(node2, f"sha256sum {ASSETS}/{f['path']}").split()[0] == f["sha256"], f
    assert sh(node2, f"sha256sum {reward}").split()[0] == good_reward
    assert sh(node2, f"test -f {ASSETS}/.a3rl/stamps/{PARQUETS[0]}.sha256 && echo ok") == "ok\n"
    for playbook in (DATA, WEIGHTS):
        again = play(playbook, staged.inventory_dir)
        assert again.ok and again.changed == 0, (playbook, again.stats.get("changed"))


def test_malformed_dataset_is_refused_naming_row_and_column(staged, tmp_path):
    import pyarrow as pa

    bad = tmp_path / "aime-bad"
    (bad / "data").mkdir(parents=True)
    rows = [
        {"data_source": "aime", "prompt": [{"role": "user", "content": "q"}],
         "ability": "math", "reward_model": {"ground_truth": "1", "style": "rule"},
         "extra_info": {"index": 0}},
        {"data_source": "aime", "prompt": [{"role": "user", "content": "q"}],
         "ability": "math", "reward_model": {"ground_truth": "", "style": "rule"},
         "extra_info": {"index": 1}},
    ]
    pq.write_table(pa.Table.from_pylist(rows), bad / "data/aime-2024.parquet")
    ov = overrides(staged)
    ov["aime_2024"] = {"kind": "file", "path": str(bad), "size": 0}
    aime = f"{ASSETS}/data/dapo_math/aime-2024.parquet"
    before = sh(staged.members()[0].container, f"sha256sum {aime}")
    result = play(DATA, staged.inventory_dir, extravars={"a3rl_artifact_overrides": ov})
    assert not result.ok
    text = failure_text(result)
    assert "row 1" in text and "ground_truth" in text, text
    # Nothing placed: the nodes keep the good file.
    for node in staged.members():
        assert sh(node.container, f"sha256sum {aime}") == before
    # Back to the real source: the store takes its raw file again (a change on the
    # controller); the converted file was never replaced, so nothing else changes.
    restored = play(DATA, staged.inventory_dir)
    assert restored.ok, failure_text(restored)
    assert set(restored.stats["changed"]) <= {"node1"}, restored.stats["changed"]
    for node in staged.members():
        assert sh(node.container, f"sha256sum {aime}") == before


# ------------------------------------------------------------------ the stand-in hub


def _hub_process(root: Path, port: int = 0, rate: int | None = None,
                 token_file: Path | None = None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "a3rl.sim.hub", "--root", str(root), "--port", str(port)]
    if rate:
        cmd += ["--rate", str(rate)]
    if token_file:
        cmd += ["--token-file", str(token_file)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    endpoint = proc.stdout.readline().strip()
    assert endpoint.startswith("http://127.0.0.1:"), endpoint
    return proc, endpoint


def _requests(root: Path) -> list[dict]:
    path = root / ".requests"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_weights_download_resumes_and_a_rerun_asks_the_hub_nothing(staged, tmp_path):
    """ModelScope's client against the stand-in hub: killed mid-transfer, the play fails
    clearly; the next run resumes the partial file (a Range request), verifies and places
    it; a third run does not contact the hub at all. The token reaches the hub and no log."""
    root = tmp_path / "hub"
    hub.write_models(root, shard_bytes=8 << 20)
    token = "a3rl-test-token-5f1c"
    token_file = tmp_path / "token"
    token_file.write_text(token)
    store = tmp_path / "store"
    ov = overrides(staged)
    ov["qwen3_32b"] = {"kind": "modelscope", "dest": "models/Qwen3-32B-hub",
                       "size": 0, "revision": hub.commit_of(root, "models", "Qwen/Qwen3-32B")}
    proc, endpoint = _hub_process(root, rate=1 << 20, token_file=token_file)
    ov["qwen3_32b"]["endpoint"] = endpoint
    port = int(endpoint.rsplit(":", 1)[1])
    extravars = {"a3rl_artifact_overrides": ov, "a3rl_artifact_dir": str(store)}
    # The token from the controller's environment (the other way is Ansible Vault).
    env = {"MODELSCOPE_CACHE": str(tmp_path / "mscache"), "MODELSCOPE_API_TOKEN": token}
    box: dict = {}
    # One retry (not the client's five, 30 s of back-off) before the first run gives up.
    once = {**env, "MODELSCOPE_DOWNLOAD_MAX_RETRIES": "1"}
    runner = threading.Thread(
        target=lambda: box.update(r=play(WEIGHTS, staged.inventory_dir, extravars=extravars,
                                         extra_env=once)))
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = [r for r in _requests(root) if "safetensors" in json.dumps(r)]
            partial = sum(p.stat().st_size for p in store.rglob("*.incomplete")
                          if p.is_file()) if store.exists() else 0
            if got and partial > 1 << 20:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the download never started")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    runner.join(timeout=600)
    first = box["r"]
    assert not first.ok
    assert "What arrived is kept" in failure_text(first), failure_text(first)
    assert "qwen3_32b" not in json.loads((store / "manifest.json").read_text()
                                         if (store / "manifest.json").exists()
                                         else '{"artifacts": {}}')["artifacts"]
    (root / ".requests").unlink()
    proc, _ = _hub_process(root, port=port, rate=8 << 20, token_file=token_file)
    try:
        second = play(WEIGHTS, staged.inventory_dir, extravars=extravars, extra_env=env)
        assert second.ok, failure_text(second)
        ranges = [r.get("range") for r in _requests(root) if r.get("range")]
        assert any(int(r.split("=")[1].split("-")[0]) > 0 for r in ranges), ranges
        entry = json.loads((store / "manifest.json").read_text())["artifacts"]["qwen3_32b"]
        files = entry["files"]
        # The pinned commit is what the client asked for and what the store records.
        assert entry["revision"] == ov["qwen3_32b"]["revision"]
        assert {r["query"].get("Revision") for r in _requests(root)
                if r["path"].endswith("/repo/files")} == {entry["revision"]}
        big = max(files, key=lambda f: f["size"])
        assert big["size"] >= 8 << 20
        for node in staged.members():
            got = sh(node.container, f"sha256sum {ASSETS}/{big['path']}").split()[0]
            assert got == big["sha256"]
        (root / ".requests").unlink()
        third = play(WEIGHTS, staged.inventory_dir, extravars=extravars, extra_env=env)
        assert third.ok and third.changed == 0, third.stats.get("changed")
        assert _requests(root) == []
        # A wrong token is refused by the hub and the play says what to check.
        wrong = play(WEIGHTS, staged.inventory_dir, extra_env=env, extravars={
            **extravars, "a3rl_artifact_dir": str(tmp_path / "store2"),
            "modelscope_token": "wrong-token"})
        assert not wrong.ok and "401" in failure_text(wrong), failure_text(wrong)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for node in staged.members():
            sh(node.container, f"rm -rf {ASSETS}/models/Qwen3-32B-hub "
                               f"{ASSETS}/.a3rl/stamps/models/Qwen3-32B-hub")
    for result in (first, second, third):
        for f in result.record.rglob("*"):
            if f.is_file():
                assert token not in f.read_text(errors="ignore"), f


def test_disk_space_is_checked_before_anything_starts(staged, tmp_path):
    ov = overrides(staged)
    # The store: a model bigger than any disk here; nothing is fetched.
    ov["qwen3_32b"] = {**ov["qwen3_32b"], "dest": "models/Qwen3-32B-huge", "size": 10**16}
    store = tmp_path / "store"
    result = play(WEIGHTS, staged.inventory_dir,
                  extravars={"a3rl_artifact_overrides": ov, "a3rl_artifact_dir": str(store)})
    assert not result.ok
    text = failure_text(result)
    assert "needs 10000000.0 GB more" in text and "Nothing was fetched" in text, text
    assert not (store / "models").exists()
    # A node: a folder too small for the files; that node is named, nothing removed there.
    ov["qwen3_32b"] = {**ov["qwen3_32b"], "dest": "models/Qwen3-32B-small", "size": 0}
    node = staged.members()[1]
    target = f"{ASSETS}/models/Qwen3-32B-small"
    sh(node.container, f"mkdir -p {target} && mount -t tmpfs -o size=16k tmpfs {target} "
                       f"&& echo keep > {target}/keep")
    try:
        result = play(WEIGHTS, staged.inventory_dir, extravars={"a3rl_artifact_overrides": ov})
        assert not result.ok
        assert [h for h, _t, _m in result.failures] == [node.hostname], result.failures
        assert "free; the copies still to arrive need" in failure_text(result)
        assert sh(node.container, f"ls -A {target}").split() == ["keep"]
    finally:
        sh(node.container, f"umount {target}; rm -rf {target}", check=False)
        for n in staged.members():
            sh(n.container, f"rm -rf {target} {ASSETS}/.a3rl/stamps/models/Qwen3-32B-small")


def _converted(node: str, model_dir: str) -> dict:
    return json.loads(sh(node, f"cat {model_dir}-mcore/a3rl-conversion.json"))


def test_conversion_skipped_when_settings_match_and_redone_when_overlap_differs(staged):
    model_dir = f"{ASSETS}/models/Qwen3-235B-A22B"
    args = {"model": "qwen3_235b", "weights": "real"}
    first = play(WEIGHTS, staged.inventory_dir, extravars=args)
    assert first.ok, failure_text(first)
    for node in staged.members():
        rec = _converted(node.container, model_dir)
        assert rec["use_alltoall_overlap"] == "1" and rec["nproc_per_node"] == "16"
        standin = json.loads(sh(node.container,
                                f"cat {model_dir}-mcore/release/a3rl-standin.json"))
        assert standin["USE_ALLTOALL_OVERLAP"] == "1" and standin["num_hidden_layers"] == 94
        # Qwen3 is native to transformers: no Python from the model repository runs.
        assert standin["flags"] == ["--use_cpu_initialization"], standin["flags"]
    again = play(WEIGHTS, staged.inventory_dir, extravars=args)
    assert again.ok and again.changed == 0, again.stats.get("changed")
    # Too little disk for a conversion: refused before the old checkpoint is touched.
    tight = play(WEIGHTS, staged.inventory_dir, extravars={
        **args, "features": "no-alltoall_overlap", "mcore_checkpoint_space_factor": 1e9})
    assert not tight.ok and "Nothing was changed" in failure_text(tight)
    assert _converted(staged.members()[0].container, model_dir)["use_alltoall_overlap"] == "1"
    other = play(WEIGHTS, staged.inventory_dir,
                 extravars={**args, "features": "no-alltoall_overlap"})
    assert other.ok, failure_text(other)
    assert other.changed > 0
    for node in staged.members():
        assert _converted(node.container, model_dir)["use_alltoall_overlap"] == "0"
        standin = json.loads(sh(node.container,
                                f"cat {model_dir}-mcore/release/a3rl-standin.json"))
        assert standin["USE_ALLTOALL_OVERLAP"] == "0"
        # Nothing beside the checkpoint (a partial or old copy, a lock): a purge keeps
        # what no record names.
        assert sh(node.container, f"ls -d {model_dir}-mcore.* 2>/dev/null || true"
                  ).strip() == ""


def test_shared_storage_is_written_once_and_seen_by_every_node(staged):
    shared = "/shared/a3rl"
    extra = {"a3rl_shared_dir": shared}
    try:
        container = play("playbooks/training_container.yml", staged.inventory_dir,
                         extravars=extra)
        assert container.ok, failure_text(container)
        for playbook, more in ((DATA, {}), (WEIGHTS, {"model": "qwen3_235b"})):
            result = play(playbook, staged.inventory_dir, extravars={**extra, **more})
            assert result.ok, failure_text(result)
            # Only the first node wrote (sent files, converted); the second only looked.
            assert result.stats["changed"].get("node2", 0) == 0, result.stats["changed"]
            assert result.stats["changed"].get("node1", 0) > 0
        host = staged.state / "shared/a3rl"
        for rel in PARQUETS:
            assert (host / rel).is_file(), rel
        assert (host / "models/Qwen3-235B-A22B-mcore/a3rl-conversion.json").is_file()
        again = play(WEIGHTS, staged.inventory_dir, extravars={**extra, "model": "qwen3_235b"})
        assert again.ok and again.changed == 0, again.stats.get("changed")
    finally:
        restored = play("playbooks/training_container.yml", staged.inventory_dir)
        assert restored.ok, failure_text(restored)
