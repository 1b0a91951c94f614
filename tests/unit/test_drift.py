"""Recipe drift (a3rl.planning.drift) on the simulator's stand-in recipe: no drift at its pin, a
changed script value and a new patch reported, the scripts' own arithmetic read, the
deviations subtracted only while the recipe keeps their value."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from a3rl.controller import cli
from a3rl.planning import drift
from a3rl.sim import inventory, upstreams

ROOT = Path(__file__).resolve().parents[2]
WORKDIR = "/data/a3rl/llm_rl/qwen3"
G32 = "internal/train_grpo_qwen3_32b_32die_true_weight.sh"
D32 = "internal/train_dapo_qwen3_32b_32die_true_weight.sh"


@pytest.fixture(scope="module")
def up():
    return upstreams.build(log=lambda _m: None)


def sim_vars(up) -> dict:
    """The project's variables as the frameworks play sees them on the simulator: the
    group_vars and role defaults, the stand-in wheelhouse entry and the sim inventory's
    drift settings (its reviewed patches, its open-files deviation)."""
    v = drift.project_vars(ROOT, a3rl_workdir=WORKDIR, a3rl_assets_dir="/data/a3rl")
    wheels = v["a3rl_artifacts"]["recipe_wheels"]
    wheels.update(upstreams.wheelhouse_overrides(up, wheels["constraints"]))
    fake = SimpleNamespace(key="k", known_hosts="h", standin_dir="s")
    gv = inventory.group_vars(fake)
    v.update({k: val for k, val in gv.items()
              if k.startswith("a3rl_recipe_") or k == "recipe_env_open_files"})
    return v


@pytest.fixture()
def tree(up, tmp_path):
    """A copy of the stand-in recipe folder at its pin, to edit."""
    with drift.recipe_tree(up.url("recipe"), up.recipe_commits["clean"],
                           upstreams.RECIPE_SUBDIR) as src:
        dest = tmp_path / "qwen3"
        shutil.copytree(src, dest)
    return dest


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def keys(report: drift.Report) -> set[tuple[str, str]]:
    return {(f.area, f.key) for f in report.drift}


def test_no_drift_at_the_standin_pin(up, tree):
    report = drift.drift_report(tree, sim_vars(up))
    assert report.ok, "\n".join(report.lines())
    # What the deviations covered, each with its reason: paths, the loopback dashboard,
    # and the simulator's own open-files limit.
    covered = {f.key: f.reason for f in report.deviated}
    assert "actor_rollout_ref.model.path" in covered
    assert "loopback" in covered["--dashboard-host"]
    assert "podman" in covered["ulimit -n"]
    assert all(reason for reason in covered.values())


def test_a_changed_script_value_is_reported_with_the_scripts_arithmetic(up, tree):
    edit(tree / G32, "MAX_NUM_SEQS=128\n", "MAX_NUM_SEQS=96\n")
    report = drift.drift_report(tree, sim_vars(up))
    found = {(f.area, f.key): f for f in report.drift}
    assert set(found) == {("plan", "actor_rollout_ref.rollout.max_num_seqs"),
                          ("env", "VLLM_SPECULATIVE_BATCH_SIZE_THRE")}, report.lines()
    seqs = found[("plan", "actor_rollout_ref.rollout.max_num_seqs")]
    assert (seqs.recipe, seqs.project, seqs.where, seqs.run) == (
        96, 128, G32, "grpo-qwen3_32b-real")
    # The threshold is the script's own $((MAX_NUM_SEQS / 4)), not a copied value.
    thre = found[("env", "VLLM_SPECULATIVE_BATCH_SIZE_THRE")]
    assert (thre.recipe, thre.project) == ("24", "32")
    assert not report.ok
    assert any("max_num_seqs: recipe 96, project 128" in line for line in report.lines())


def test_a_key_only_the_project_sets_is_drift(up, tree):
    # The recipe's script stops passing one value; the project's plan still sets it.
    edit(tree / G32, "    trainer.val_before_train=False \\\n", "")
    report = drift.drift_report(tree, sim_vars(up))
    found = [(f.key, f.recipe, f.project, f.run) for f in report.drift]
    assert found == [("trainer.val_before_train", None, False, "grpo-qwen3_32b-real")], \
        report.lines()
    assert any("trainer.val_before_train: recipe (not set), project False" in line
               for line in report.lines())


@pytest.mark.parametrize("scope, covered", [
    ({"runs": ["grpo-qwen3_32b-real"]}, True),
    ({"runs": ["dapo-qwen3_32b-real"]}, False),
    ({"where": "internal/train_grpo_*"}, True),
    ({"where": "internal/train_dapo_*"}, False),
])
def test_a_deviation_scoped_by_runs_or_where_covers_only_those(up, tree, scope, covered):
    edit(tree / G32, "MAX_NUM_SEQS=128\n", "MAX_NUM_SEQS=96\n")
    v = sim_vars(up)
    v["a3rl_recipe_site_deviations"] = [*v.get("a3rl_recipe_site_deviations", []), *(
        {"area": area, "key": key, "reason": "a site's own batch cap", **scope}
        for area, key in (("plan", "actor_rollout_ref.rollout.max_num_seqs"),
                          ("env", "VLLM_SPECULATIVE_BATCH_SIZE_THRE")))]
    report = drift.drift_report(tree, v)
    assert report.ok == covered, [f.as_dict() for f in report.drift]
    reasons = {f.key: f.reason for f in report.deviated}
    assert (reasons.get("actor_rollout_ref.rollout.max_num_seqs") == "a site's own batch cap"
            ) == covered


def test_a_new_patch_in_the_series_is_reported(up):
    with drift.recipe_tree(up.url("recipe"), up.recipe_commits["extra"],
                           upstreams.RECIPE_SUBDIR) as tree:
        report = drift.drift_report(tree, sim_vars(up))
    assert keys(report) == {("patches", upstreams.EXTRA_PATCH.path)}, report.lines()
    assert "not reviewed" in report.drift[0].line()


def test_a_new_train_script_is_reported(up, tree):
    shutil.copy(tree / G32, tree / "internal/train_grpo_qwen3_32b_resampler_example.sh")
    report = drift.drift_report(tree, sim_vars(up))
    assert keys(report) == {("scripts", "internal/train_grpo_qwen3_32b_resampler_example.sh")}


def test_other_node_counts_follow_the_scripts_formulas(up, tree):
    job = drift.read_train_script(tree, D32, nodes=4, workdir=WORKDIR)
    cp = job.overrides["actor_rollout_ref.actor.megatron.context_parallel_size"][1]
    tokens = job.overrides["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"][1]
    assert (cp, tokens) == (4, 9216)
    # Hydra's last value of the key the script passes twice.
    assert job.overrides["algorithm.kl_ctrl.kl_coef"][1] == 0.001
    assert "algorithm.kl_ctrl.kl_coef" in job.repeated
    # The project's plans follow the same formulas at 4 nodes (the 235B runs need 8).
    v = sim_vars(up)
    v["a3rl_recipe_drift"]["train_scripts"] = {
        k: r for k, r in v["a3rl_recipe_drift"]["train_scripts"].items() if "32b" in k}
    v["a3rl_recipe_drift"]["env_scripts"] = {"ray_start_npu.sh": "cluster"}
    v["a3rl_recipe_deviations"].append({"area": "scripts", "key": "internal/*235b*",
                                        "reason": "not read at 4 nodes in this test"})
    report = drift.drift_report(tree, v, nodes=4)
    assert report.ok, report.lines()
    # A formula the recipe changes is drift at that node count.
    edit(tree / G32, "TRAIN_CP=$((NODES * 16 / TRAIN_TP / TRAIN_PP))", "TRAIN_CP=2")
    found = keys(drift.drift_report(tree, v, nodes=4))
    assert ("plan", "actor_rollout_ref.actor.megatron.context_parallel_size") in found


def test_a_different_hydra_prefix_is_reported(up, tree):
    key = "actor_rollout_ref.actor.megatron.override_transformer_config.seq_length"
    edit(tree / G32, f"    +{key}=", f"    {key}=")
    report = drift.drift_report(tree, sim_vars(up))
    assert [(f.recipe, f.project) for f in report.drift] == [(key, f"+{key}")]


def test_a_deviation_covers_only_the_recipes_value_it_names(up, tree):
    edit(tree / "ray_start_npu.sh", "--dashboard-host=0.0.0.0", "--dashboard-host=10.0.0.9")
    report = drift.drift_report(tree, sim_vars(up))
    assert [(f.key, f.recipe, f.project) for f in report.drift] == [
        ("--dashboard-host", "10.0.0.9", "127.0.0.1")]


def test_env_script_changes_are_reported(up, tree):
    edit(tree / "internal/qwen3_235b_env.sh", "export VLLM_ENABLE_EPLB=0",
         "export VLLM_ENABLE_EPLB=1\nexport VLLM_DP_SIZE=32")
    edit(tree / "ray_start_npu.sh", "export HCCL_BUFFSIZE=300", "export HCCL_BUFFSIZE=400")
    edit(tree / "ray_start_npu.sh", "ulimit -n 32768", "ulimit -n 65536")
    report = drift.drift_report(tree, sim_vars(up))
    found = {(f.where, f.key): (f.recipe, f.project) for f in report.drift}
    assert found == {
        ("internal/qwen3_235b_env.sh", "VLLM_ENABLE_EPLB"): ("1", "0"),
        ("internal/qwen3_235b_env.sh", "VLLM_DP_SIZE"): ("32", None),
        ("ray_start_npu.sh", "HCCL_BUFFSIZE"): ("400", "300"),
        # The simulator's deviation names the recipe's 32768: a new value is drift again.
        ("ray_start_npu.sh", "ulimit -n"): ("65536", "16384"),
    }, report.lines()


def test_requirements_a_new_unpinned_line_and_a_lost_sdist_pin(up, tree):
    req = tree / "requirements.txt"
    text = req.read_text()
    sdist = upstreams.SDIST_ONLY[0]
    assert f"{sdist}==" in text
    req.write_text(text.replace(f"{sdist}==", f"{sdist}>=") + "newpackage\n")
    found = keys(drift.drift_report(tree, sim_vars(up)))
    assert found == {("requirements", "newpackage"), ("requirements", sdist)}


def test_the_reader_runs_no_command_of_the_script(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "t").mkdir()
    (tmp_path / "t/run.sh").write_text(
        f"pkill -9 python\ntouch {marker}\nsource /etc/profile\nulimit -n 10\n"
        "export X=$((3 * 4))\nN=2\n"
        "python3 -m verl.trainer.main_ppo --config-path=\"$(pwd)/c\" --config-name='p.yaml' "
        "a.b=1 +c.d='[[1],[2]]' a.b=2 e=\"x y\"\n")
    ran = drift.run_script(tmp_path / "t", "run.sh", workdir="/wd")
    assert not marker.exists()
    assert [c.argv[0] for c in ran.calls] == ["pkill", "touch", "python3"]
    assert ran.outside == ["/etc/profile"] and ran.ulimits == [["-n", "10"]]
    assert ran.exports == {"X": "12"}
    job = drift.read_train_script(tmp_path / "t", "run.sh", workdir="/wd")
    assert (job.module, job.config_path, job.config_name) == ("verl.trainer.main_ppo", "/wd/c",
                                                              "p")
    assert job.overrides == {"a.b": ("", 2), "c.d": ("+", [[1], [2]]), "e": ("", "x y")}
    assert job.repeated == ["a.b"] and job.env == {"X": "12"}


def test_a_script_without_a_trainer_is_unreadable(up, tree):
    edit(tree / G32, "python3 -m verl.trainer.main_ppo", "echo verl.trainer.main_ppo")
    report = drift.drift_report(tree, sim_vars(up))
    assert not report.ok and report.errors and G32 in report.errors[0]


def test_the_store_report_reads_the_stored_bundle(up, tmp_path):
    """What the frameworks play's filter does: the recipe's bundle at the recorded commit,
    the play's variables over the project's files."""
    store = tmp_path / "store"
    (store / "git").mkdir(parents=True)
    # As the artifact store makes it: one ref, refs/a3rl/pinned (a3rl.artifacts).
    repo = tmp_path / "recipe.git"
    subprocess.run(["git", "clone", "-q", "--bare", up.url("recipe"), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "update-ref", "refs/a3rl/pinned",
                    up.recipe_commits["extra"]], check=True)
    subprocess.run(["git", "-C", str(repo), "bundle", "create", "-q",
                    str(store / "git/recipe.bundle"), "refs/a3rl/pinned"], check=True)
    record = {"artifacts": {"recipe": {"kind": "git", "commit": up.recipe_commits["extra"],
                                       "files": [{"path": "git/recipe.bundle"}]}}}
    v = sim_vars(up)
    v["a3rl_manifest"] = {**v["a3rl_artifacts"],
                          "recipe": {**v["a3rl_artifacts"]["recipe"],
                                     "subdir": upstreams.RECIPE_SUBDIR}}
    data = drift.store_report(v, record, str(store), ROOT)
    assert not data["ok"] and [d["key"] for d in data["drift"]] == [upstreams.EXTRA_PATCH.path]
    json.dumps(data)  # plain data for the play
    data = drift.store_report(v, {"artifacts": {}}, str(store), ROOT)
    assert "not in the store" in data["errors"][0]


def test_cli_exit_codes(up, tree, capsys):
    args = ["drift", "--recipe", str(tree), "--workdir", WORKDIR]
    # The group_vars' reviewed patches are the real recipe's: the stand-in's differ.
    assert cli.main(args) == 1
    assert "not reviewed" in capsys.readouterr().out
    assert cli.main(["drift", "--recipe", str(tree / "nowhere")]) == 2
