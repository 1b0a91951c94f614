"""Framework staging on the simulated cluster: the artifact store, the distribution to the
nodes, the source trees, the recipe working directory and the patch series, against the
simulator's stand-in upstream repositories (verl's tree is the real verl 0.6.0 sdist)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from a3rl.paths import project_root
from a3rl.sim import image_workspace, podman, upstreams

from .conftest import events, failure_text, play, provision

# What this module asserts on is the same under either strategy: its plays run under
# Mitogen (conftest.play_strategy).
PLAY_STRATEGY = "mitogen"

PLAY = "playbooks/frameworks.yml"
WORKDIR = "/data/a3rl/llm_rl/qwen3"
NODE_STORE = "/var/cache/a3rl/artifacts"


def sh(node: str, script: str, check: bool = True) -> str:
    return podman.exec_(node, "sh", "-c", script, check=check).stdout


def overrides(sim) -> dict:
    data = yaml.safe_load((sim.inventory_dir / "group_vars/all.yml").read_text())
    return copy.deepcopy(data["a3rl_artifact_overrides"])


def with_recipe(sim, which: str) -> dict:
    ov = overrides(sim)
    ov["recipe"]["ref"] = upstreams.build().recipe_commits[which]
    return {"a3rl_artifact_overrides": ov}


@pytest.fixture(scope="module")
def staged(sim):
    """site.yml, whose framework stage this is (a no-op when an earlier test ran it)."""
    return provision(sim)


def test_sources_at_their_pins_and_series_applied(staged):
    up = upstreams.build()
    record = json.loads((staged.state / "store/manifest.json").read_text())["artifacts"]
    for node in staged.members():
        c = node.container
        for name in ("megatron", "mindspeed", "vllm", "vllm_ascend", "recipe"):
            head = sh(c, f"git -C /data/a3rl/src/{name} rev-parse HEAD").strip()
            assert head == record[name]["commit"] == up.commits[name], name
        # verl: the tag plus the cherry-pick, committed on top.
        assert sh(c, "git -C /data/a3rl/src/verl rev-parse HEAD^").strip() == up.commits["verl"]
        sub = "/data/a3rl/src/vllm_ascend/csrc/third_party/catlass"
        assert sh(c, f"git -C {sub} rev-parse HEAD").strip() == up.commits["vllm_ascend_sub"]
        # The build_project layout, patched: the config key the recipe's verl patch adds,
        # the plain file beside the patches edited there by its patch (not copied into
        # the trees), the converter at the top.
        assert "recompute_old_log_prob" in sh(
            c, f"cat {WORKDIR}/verl/trainer/config/actor/actor.yaml"
        )
        sh(
            c,
            f"grep -qx 'BINPACK = True' {WORKDIR}/{upstreams.HDP}"
            f" && test ! -e {WORKDIR}/verl/utils/hybrid_data_parallel"
            f" && test -f {WORKDIR}/converter_hf_to_mcore.py"
            f" && test -f {WORKDIR}/verl/trainer/config/dapo_megatron_trainer.yaml"
            f" && test -d {WORKDIR}/megatron/core && test -d {WORKDIR}/r1_ascend",
        )
        series = json.loads(sh(c, f"cat {WORKDIR}/.git/a3rl/series.json"))
        assert len(series["labels"]) >= 7
        # The frameworks are the training image's /workspace trees (issue 19 item 3), as
        # build_project.sh copies them: vLLM-Ascend's build products came along, tracked.
        ref, image_id = image_of_workdir(c)
        assert sh(c, f"docker image inspect --format '{{{{.Id}}}}' {ref}").strip() == image_id
        assert "compiled extension" in sh(c, f"cat {WORKDIR}/vllm_ascend/*.so")
        assert sh(c, f"git -C {WORKDIR} ls-files {image_workspace.EXTENSION} "
                     f"{image_workspace.CUSTOM_OPS}").split() == [
            f"{image_workspace.CUSTOM_OPS}/op_api/lib/STAND-IN", image_workspace.EXTENSION]
        assert sh(c, "docker ps -a -q --filter label=a3rl.workdir-copy").strip() == ""
        # The recipe's requirements, from the wheelhouse, where jobs run: the stand-in
        # sdist-only pin (built into a wheel by the store) and the open line kept to the
        # image's range (2.48.0, not the newest 2.58.0).
        version = sh(c, "docker exec a3rl-train python3 -c 'import codetiming, "
                        "a3rl_standin_sdist_only, a3rl_standin_ray as r; print(r.VERSION)'")
        assert version.strip() == "2.48.0"


def test_second_run_and_check_mode_change_nothing(staged):
    again = play(PLAY, staged.inventory_dir)
    assert again.ok and again.changed == 0, again.stats.get("changed")
    check = play(PLAY, staged.inventory_dir, check=True)
    assert check.ok and check.changed == 0, failure_text(check)


def test_conflict_leaves_the_previous_tree_and_names_the_patch(staged):
    """A new recipe whose series does not apply: the previous tree (patched), its series
    record and its pristine commit stay; the new composition waits, staged."""
    node = staged.members()[0].container
    state = (f"git -C {WORKDIR} rev-parse refs/a3rl/pristine; git -C {WORKDIR} ls-files -s "
             f"| sha256sum; git -C {WORKDIR} diff --stat; cat {WORKDIR}/.git/a3rl/series.json")
    before = sh(node, state)
    try:
        result = play(PLAY, staged.inventory_dir, extravars=with_recipe(staged, "conflict"))
        assert not result.ok
        text = failure_text(result)
        assert "patches/vllm_ascend/0002-" in text and "@@" in text, text
        assert sh(node, state) == before
        assert sh(node, f"git -C {WORKDIR} rev-parse refs/a3rl/staged").strip()
    finally:
        restored = play(PLAY, staged.inventory_dir)
        assert restored.ok, failure_text(restored)
    assert "recompute_old_log_prob" in sh(
        node, f"cat {WORKDIR}/verl/trainer/config/actor/actor.yaml"
    )


def image_of_workdir(node: str) -> tuple[str, str]:
    """(image name:tag, image id) the working directory's pristine commit was copied from."""
    msg = sh(node, f"git -C {WORKDIR} log -1 --format=%B refs/a3rl/pristine")
    images = [line.split()[1:] for line in msg.splitlines() if line.startswith("image ")]
    assert images, f"{node}: the working directory was not copied from an image:\n{msg}"
    ref, image_id = images[0]
    return ref, image_id


def test_a_new_build_of_the_image_restages_the_working_directory(staged):
    """Issue 19 item 3: the image id is an input of the working directory. Another image
    (a rebuilt vLLM-Ascend) is reported by --check and restaged by a run, with the
    series on it; back on the site's image, the same pristine commit as before."""
    nodes = [m.container for m in staged.members()]
    ref, _ = image_of_workdir(nodes[0])
    pristine = sh(nodes[0], f"git -C {WORKDIR} rev-parse refs/a3rl/pristine").strip()
    rebuilt = "localhost/a3rl-test/workdir-rebuilt:1"
    for node in nodes:
        sh(node, f"printf 'FROM {ref}\\nRUN echo rebuilt > /workspace/vllm-ascend/"
                 f"{image_workspace.EXTENSION}\\n' | docker build -q -t {rebuilt} -")
    extravars = {"frameworks_image": rebuilt}
    try:
        check = play(PLAY, staged.inventory_dir, check=True, extravars=extravars)
        assert check.ok and check.changed > 0, failure_text(check)
        assert sh(nodes[0], f"git -C {WORKDIR} rev-parse refs/a3rl/pristine").strip() == pristine
        result = play(PLAY, staged.inventory_dir, extravars=extravars)
        assert result.ok and result.changed > 0, failure_text(result)
        for node in nodes:
            assert sh(node, f"cat {WORKDIR}/{image_workspace.EXTENSION}") == "rebuilt\n"
            assert "recompute_old_log_prob" in sh(
                node, f"cat {WORKDIR}/verl/trainer/config/actor/actor.yaml")
            assert image_of_workdir(node)[0] == rebuilt
    finally:
        restored = play(PLAY, staged.inventory_dir)
        for node in nodes:
            sh(node, f"docker rmi {rebuilt}", check=False)
        assert restored.ok, failure_text(restored)
    for node in nodes:
        assert sh(node, f"git -C {WORKDIR} rev-parse refs/a3rl/pristine").strip() == pristine
        assert "compiled extension" in sh(node, f"cat {WORKDIR}/{image_workspace.EXTENSION}")


def test_added_patch_and_project_patch_reapply_the_series_in_order(staged, tmp_path):
    node = staged.members()[0].container
    extra = tmp_path / "patches"
    extra.mkdir()
    own = upstreams.extra_patches(extra)
    extravars = {**with_recipe(staged, "extra"), "frameworks_extra_patch_dir": str(extra)}
    try:
        result = play(PLAY, staged.inventory_dir, extravars=extravars)
        assert result.ok, failure_text(result)
        # Recipe drift, reported before staging (not strict): the release's new patch.
        assert "verl/0003-" in json.dumps([e["event_data"].get("res") for e in events(result)
                                           if "recipe drift" in e["event_data"].get("task", "")])
        labels = json.loads(sh(node, f"cat {WORKDIR}/.git/a3rl/series.json"))["labels"]
        recipe_labels = [lb for lb in labels if lb.startswith("patches/")]
        # The recipe's own ordering, by the node's `sort -V`.
        expected = sh(node, f"cd {WORKDIR} && find ./patches -type f -name '*.patch' | sort -V")
        assert recipe_labels == [line[2:] for line in expected.split()]
        assert any("/verl/0003-" in lb for lb in recipe_labels)
        assert [lb.rsplit("/", 1)[-1] for lb in labels[-len(own) :]] == [p.name for p in own]
        again = play(PLAY, staged.inventory_dir, extravars=extravars)
        assert again.ok and again.changed == 0, again.stats.get("changed")
    finally:
        restored = play(PLAY, staged.inventory_dir)
        assert restored.ok, failure_text(restored)
    labels = json.loads(sh(node, f"cat {WORKDIR}/.git/a3rl/series.json"))["labels"]
    assert not any("/verl/0003-" in lb for lb in labels)


def test_damaged_copy_on_one_node_is_sent_again(staged):
    """A damaged bundle copy is sent again, and a cut wheelhouse unpack is redone, on
    node2 only: one play run for both faults, to save CI time."""
    node1, node2 = (n.container for n in staged.members())
    bundle = f"{NODE_STORE}/git/verl.bundle"
    sh(node2, f"printf 'X' | dd of={bundle} bs=1 seek=100 conv=notrunc status=none")
    # An unpack cut after requirements.txt (the tar is in name order; tabulate's wheel
    # comes later), as an earlier version left it in place, and a scratch folder of a
    # cut unpack by this one.
    record = json.loads((staged.state / "store/manifest.json").read_text())["artifacts"]
    wheels = f"/data/a3rl/wheels/{record['recipe_wheels']['files'][0]['sha256'][:16]}"
    sh(node2, f"rm -f {wheels}/tabulate-* {wheels}/.a3rl-unpacked"
              f" && mkdir -p {wheels}.partial && touch {wheels}.partial/junk")
    result = play(PLAY, staged.inventory_dir)
    assert result.ok, failure_text(result)
    assert sh(node2, f"ls {wheels}/.a3rl-unpacked {wheels}/tabulate-*.whl"
                     f" && test ! -e {wheels}.partial && echo ok").split()[-1] == "ok"
    assert result.stats["changed"].get("node1", 0) == 0
    assert result.stats["changed"]["node2"] > 0
    store = staged.state / "store/git/verl.bundle"
    assert (
        sh(node2, f"sha256sum {bundle}").split()[0] == sh(node1, f"sha256sum {bundle}").split()[0]
    )
    assert (
        sh(node2, f"sha256sum {bundle}").split()[0]
        == hashlib.sha256(store.read_bytes()).hexdigest()
    )


def _ansible_playbook(inventory: Path, extravars: dict) -> subprocess.Popen:
    root = project_root()
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
        "ANSIBLE_HOST_KEY_CHECKING": "True",
    }
    return subprocess.Popen(
        ["ansible-playbook", "-i", str(inventory), PLAY, "-e", json.dumps(extravars)],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def test_interrupted_transfer_resumes(staged):
    """A transfer killed halfway leaves a partial file; the next run appends the rest to
    it (same file, the first part not sent again) and verifies it."""
    node = staged.members()[1].container
    bundle = f"{NODE_STORE}/git/verl.bundle"
    full = (staged.state / "store/git/verl.bundle").stat().st_size
    sh(node, f"rm -f {bundle} {bundle}.sha256")
    proc = _ansible_playbook(staged.inventory_dir, {"artifact_store_bwlimit": 32})
    try:
        deadline = time.monotonic() + 120
        size = 0
        while time.monotonic() < deadline:
            out = sh(node, f"stat -c %s {bundle} 2>/dev/null || echo 0", check=False).strip()
            size = int(out or 0)
            if size > 64 * 1024:
                break
            time.sleep(0.5)
        assert 0 < size < full, f"no partial transfer seen ({size} of {full} bytes)"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    time.sleep(1)
    partial = int(sh(node, f"stat -c %s {bundle}").strip())
    inode = sh(node, f"stat -c %i {bundle}").strip()
    head = sh(node, f"head -c {partial} {bundle} | sha256sum").split()[0]
    assert 0 < partial < full
    assert sh(node, f"test -e {bundle}.sha256 || echo none").strip() == "none"
    result = play(PLAY, staged.inventory_dir)
    assert result.ok, failure_text(result)
    assert int(sh(node, f"stat -c %s {bundle}").strip()) == full
    assert sh(node, f"stat -c %i {bundle}").strip() == inode, (
        "the partial file was replaced, not resumed"
    )
    assert sh(node, f"head -c {partial} {bundle} | sha256sum").split()[0] == head
    assert sh(node, f"test -f {bundle}.sha256 && echo ok").strip() == "ok"


def test_bundle_round_trip_reaches_no_network(staged, tmp_path):
    """A bundle made from upstreams served over HTTP; then site.yml from the unpacked
    bundle with artifact_source=bundle: the server sees no request at all."""
    up = upstreams.build()
    bundle = tmp_path / "bundle"
    with upstreams.serve(up.root) as served:
        ov = overrides(staged)
        for name, spec in upstreams.manifest_overrides(up, served.base_url).items():
            ov[name]["url"] = spec["url"]
        bundle_vars = {
            "a3rl_artifact_overrides": ov,
            "a3rl_bundle_dir": str(bundle),
            "bundle_tarball": True,
        }
        made = play("playbooks/bundle.yml", staged.inventory_dir, extravars=bundle_vars)
        assert made.ok, failure_text(made)
        assert any("/info/refs" in p for p in served.requests), served.requests[:5]
        served.requests.clear()
        remade = play("playbooks/bundle.yml", staged.inventory_dir, extravars=bundle_vars)
        assert remade.ok and remade.changed == 0, remade.stats.get("changed")
        assert served.requests == []
        sums = (bundle / "SHA256SUMS").read_text()
        for needed in (
            "git/verl.bundle",
            "git/vllm_ascend--csrc_third_party_catlass.bundle",
            "python/recipe_wheels.tar",
            "images/",
            "Atlas-A3-hdk-npu-driver",
            "raw/deepscaler/deepscaler.json",
            "models/Qwen3-32B/config.json",
        ):
            assert needed in sums, needed
        offline = tmp_path / "offline"
        offline.mkdir()
        with tarfile.open(f"{bundle}.tar") as tar:
            assert not any(
                m.name.endswith(".git") or "/.git/" in m.name
                for m in tar.getmembers()
                if m.name.startswith("./git/") and m.isdir()
            )
            tar.extractall(offline, filter="data")
        subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=offline, check=True)
        served.requests.clear()
        result = play(
            "site.yml",
            staged.inventory_dir,
            extravars={
                "a3rl_artifact_overrides": ov,
                "artifact_source": "bundle",
                "a3rl_artifact_dir": str(offline),
            },
        )
        assert result.ok, failure_text(result)
        assert served.requests == []
        # A damaged bundle is refused before anything on the nodes changes.
        victim = offline / "git/verl.bundle"
        data = bytearray(victim.read_bytes())
        data[200] ^= 0xFF
        victim.write_bytes(bytes(data))
        refused = play(
            PLAY,
            staged.inventory_dir,
            extravars={
                "a3rl_artifact_overrides": ov,
                "artifact_source": "bundle",
                "a3rl_artifact_dir": str(offline),
            },
        )
        assert not refused.ok
        assert "git/verl.bundle does not have its recorded sha256" in failure_text(refused)
        assert "make the bundle again" in failure_text(refused)
        assert served.requests == []


def test_a_stager_node_fetches_and_the_controller_gets_its_store(staged, tmp_path):
    """a3rl_fetch_host: a node fetches (here from copies of the upstreams on
    it), the controller pulls its store and verifies it, the nodes stage from that."""
    up = upstreams.build()
    stager = staged.members()[0].container
    sh(stager, f"mkdir -p {up.root.parent}")
    podman.run(["cp", str(up.root), f"{stager}:{up.root}"])
    store = tmp_path / "store"
    extravars = {
        "a3rl_fetch_host": staged.members()[0].hostname,
        "artifact_store_stager_dir": "/var/cache/a3rl/stager-test",
        "artifact_store_groups": ["frameworks", "recipe"],
        "frameworks_install_requirements": False,
        "a3rl_artifact_dir": str(store),
    }
    try:
        result = play(PLAY, staged.inventory_dir, extravars=extravars)
        assert result.ok, failure_text(result)
        record = json.loads((store / "manifest.json").read_text())["artifacts"]
        assert sorted(record) == ["megatron", "mindspeed", "recipe", "verl", "vllm", "vllm_ascend"]
        on_stager = json.loads(sh(stager, "cat /var/cache/a3rl/stager-test/manifest.json"))
        assert on_stager["artifacts"]["verl"]["commit"] == record["verl"]["commit"]
        assert not (store / "git/verl.git").exists()  # fetch caches stay on the stager
        for node in staged.members():
            head = sh(node.container, "git -C /data/a3rl/src/verl rev-parse HEAD").strip()
            assert head == record["verl"]["commit"]
        again = play(PLAY, staged.inventory_dir, extravars=extravars)
        assert again.ok and again.changed == 0, again.stats.get("changed")
    finally:
        sh(stager, f"rm -rf /var/cache/a3rl/stager-test {up.root.parent}", check=False)


def test_hand_edits_on_one_node_rerun_the_role_and_a_no_op_skips_it(staged):
    """The probe's watch list (roles/frameworks/vars/main.yml): a hand edit to a checkout
    and to a tracked file of the working directory on node2 runs the role again, which
    repairs both; the run after it finds every node converged and stages nothing."""
    node2 = staged.members()[1].container
    tracked = f"{WORKDIR}/verl/trainer/config/actor/actor.yaml"
    src = "/data/a3rl/src/megatron"
    state = f"sha256sum {tracked}; git -C {src} status --porcelain; git -C {src} rev-parse HEAD"
    before = sh(node2, state)
    first = sh(node2, f"git -C {src} ls-files | head -1").strip()
    sh(node2, f"echo hand-edit >> {tracked}; echo hand-edit >> {src}/{first}")
    result = play(PLAY, staged.inventory_dir)
    assert result.ok, failure_text(result)
    assert result.stats["changed"]["node2"] > 0
    assert sh(node2, state) == before
    again = play(PLAY, staged.inventory_dir)
    assert again.ok and again.changed == 0, again.stats.get("changed")
    ran = {e["event_data"].get("task", "") for e in events(again)
           if e.get("event") in ("runner_on_ok", "runner_on_skipped")}
    assert any(t.startswith("Frameworks | Probe whether") for t in ran), sorted(ran)
    assert not any(t.startswith("Frameworks | Check out each source") for t in ran), sorted(ran)
