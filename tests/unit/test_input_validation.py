"""Issue 25 and issue 21 (small items): nothing a mistake in the inventory can delete,
nothing half-written kept as whole, every bad value refused with the variable and fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from a3rl.node import artifacts
from a3rl.paths import project_root
from a3rl.planning import manifest
from a3rl.planning import preflight as pf

from .conftest import project_filters

# ----------------------------------------------------------- 25.1 artifact dest safety


@pytest.mark.parametrize(
    "dest, needle",
    [
        (".", "the store itself"),
        ("./", "the store itself"),
        ("a/..", "relative path inside the store"),
        ("manifest.json", "store's own file manifest.json"),
        (".lock", "store's own file .lock"),
        ("./manifest.json", "store's own file"),
        (5, "not a path string"),
        (["models"], "not a path string"),
    ],
)
def test_a_dest_that_is_the_store_or_its_own_files_is_refused(dest, needle):
    [msg] = artifacts.validate("m", {"kind": "file", "dest": dest})
    assert needle in msg and "artifact m" in msg and "Fix:" in msg


def test_a_dest_containing_another_entrys_dest_is_refused_naming_both():
    m = {
        "models": {"kind": "file", "dest": "models/", "path": "/x", "group": "w"},
        "big": {"kind": "modelscope", "id": "Qwen/Qwen3-32B", "dest": "models/Qwen3-32B",
                "group": "w", "revision": "a" * 40},
        "cfg": {"kind": "modelscope", "id": "Qwen/Qwen3-32B", "revision": "a" * 40,
                "dest": "models/Qwen3-32B-config", "group": "w"},
    }
    problems = manifest.artifact_problems(m, ["models", "big", "cfg"])
    assert len(problems) == 2, problems
    assert all("artifact models: dest 'models/' contains" in p and "Fix:" in p
               for p in problems)
    # the sibling with a common name prefix is not inside it
    assert manifest.artifact_problems(m, ["big", "cfg"]) != []  # still named via models
    del m["models"]
    assert manifest.artifact_problems(m, ["big", "cfg"]) == []
    same = {"a": {"kind": "file", "dest": "raw/x"}, "b": {"kind": "file", "dest": "raw//x/"}}
    assert "is the same path as" in artifacts.dest_overlap_problems(same)[0]


def test_preflight_refuses_overlapping_dests_before_any_fetch(tmp_path):
    m = {"all": {"kind": "file", "dest": "raw"}, "g": {"kind": "file", "dest": "raw/gsm8k"}}
    [msg] = pf.artifact_input_problems(m, str(tmp_path / "store"), probe=lambda _u: None)
    assert msg.startswith("controller: artifact all: dest 'raw' contains")


def test_a_folder_artifact_prunes_only_what_it_recorded_earlier(tmp_path):
    src = tmp_path / "gsm8k"
    (src / "main").mkdir(parents=True)
    (src / "main/a.parquet").write_text("a")
    store = tmp_path / "store"
    spec = {"kind": "file", "dest": "raw/gsm8k", "path": str(src)}
    artifacts.ensure(str(store), "g", spec)
    # a file put there by hand (or by another tool) is not this entry's to delete
    (store / "raw/gsm8k/vendor-notes.txt").write_text("kept")
    (src / "main/a.parquet").unlink()
    (src / "main/b.parquet").write_text("b")
    got = artifacts.ensure(str(store), "g", spec, refresh=True)["entry"]["files"]
    assert [f["path"] for f in got] == ["raw/gsm8k/main/b.parquet"]
    assert not (store / "raw/gsm8k/main/a.parquet").exists()
    assert (store / "raw/gsm8k/vendor-notes.txt").read_text() == "kept"


def test_a_folder_artifact_at_the_store_root_cannot_reach_the_manifest(tmp_path):
    store = tmp_path / "store"
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("f")
    artifacts.ensure(str(store), "a", {"kind": "file", "dest": "keep", "path": str(src)})
    with pytest.raises(artifacts.ArtifactError, match="the store itself"):
        artifacts.ensure(str(store), "b", {"kind": "file", "dest": ".", "path": str(src)})
    assert (store / "manifest.json").exists() and (store / "keep/f").exists()


# ------------------------------------------------------- 25.2 bundle tar cut short


REPO = Path(__file__).resolve().parents[2]


def _bundle_play(bundle: Path) -> str:
    import subprocess
    import sys

    proc = subprocess.run(
        # no inventory file: the implicit localhost, as on a connected machine's checkout
        [str(Path(sys.executable).with_name("ansible-playbook")),
         "-i", str(bundle.parent / "no-inventory"), str(REPO / "playbooks/bundle.yml"),
         "-e", '{"bundle_groups": []}',
         "-e", "bundle_tarball=true", "-e", f"a3rl_bundle_dir={bundle}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return proc.stdout


def test_a_bundle_tar_cut_short_is_packed_again(tmp_path):
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "manifest.json").write_text('{"version": 1, "artifacts": {}}')
    (bundle / "x").write_text("x" * 20000)
    _bundle_play(bundle)
    tar = tmp_path / "b.tar"
    whole = tar.stat().st_size
    assert "changed=0" in _bundle_play(bundle)
    with open(tar, "r+b") as f:
        f.truncate(whole // 2)
    assert "changed=1" in _bundle_play(bundle)
    assert tar.stat().st_size == whole and not (tmp_path / "b.tar.part").exists()


# ------------------------------------------------- 21.6 cache clean, symlinked parent


def test_cache_clean_refuses_a_path_under_a_symlinked_parent(tmp_path):
    from a3rl.node import cache_clean

    root = tmp_path / "root"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "kernel_meta").mkdir(parents=True)
    (elsewhere / "kernel_meta/precious").write_text("not a cache of this job")
    (root / "data").mkdir(parents=True)
    (root / "data/job").symlink_to(elsewhere)
    with pytest.raises(cache_clean.CacheError,
                       match=r"^'/data/job/kernel_meta': a folder above it is a symlink \(its "
                             r"real path is '.*/elsewhere/kernel_meta'\)"):
        cache_clean.clean(["/data/job/kernel_meta"], "/data/job", root=str(root))
    assert (elsewhere / "kernel_meta/precious").exists()
    (root / "data/real/kernel_meta").mkdir(parents=True)
    got = cache_clean.clean(["/data/real/kernel_meta"], "/data/real", root=str(root))
    assert got["changed"] and not (root / "data/real/kernel_meta").exists()


# ---------------------------------------------------------- 21.7 rsync --protect-args


@pytest.mark.parametrize("tasks", ["pull.yml", "send.yml"])
def test_every_rsync_of_the_store_protects_its_arguments(tasks):
    import yaml

    text = (REPO / "roles/artifact_store/tasks" / tasks).read_text()
    rsyncs = [t for t in yaml.safe_load(text)
              if "rsync" in str(t.get("ansible.builtin.command", {}).get("argv", ""))[:20]]
    assert rsyncs, f"no rsync task found in {tasks}"
    for task in rsyncs:
        assert "--protect-args" in str(task["ansible.builtin.command"]["argv"]), task["name"]


# ------------------------------------------------ 25.6 DAPO-Math-17k and AIME 2024 sources


def _shipped_manifest() -> dict:
    import yaml

    root = Path(__file__).resolve().parents[2]
    return yaml.safe_load((root / "group_vars/all/artifacts.yml").read_text())["a3rl_artifacts"]


def test_dapo_and_aime_default_to_a_site_provided_file_naming_where_it_comes_from():
    shipped = _shipped_manifest()
    for name, file in (("dapo_math_17k", "dapo-math-17k.parquet"),
                       ("aime_2024", "aime-2024.parquet")):
        spec = shipped[name]
        # No invented checksum, no hub id the project has not confirmed to exist.
        assert spec["kind"] == "file" and not spec.get("sha256") and not spec.get("path")
        assert "huggingface.co/datasets/" in spec["obtain"] and file in spec["obtain"]
        assert "prepare_dapo_data.sh" in spec["obtain"]


def test_a_missing_site_provided_file_is_refused_naming_the_variable_and_its_origin(tmp_path):
    spec = {"kind": "file", "group": "data", "dest": "raw/dapo_math_17k",
            "obtain": "https://example.org/dapo-math-17k.parquet (the recipe's URL)"}
    store = tmp_path / "store"
    [msg] = pf.artifact_input_problems({"dapo_math_17k": spec}, str(store), probe=lambda _u: None)
    assert msg.startswith("controller: artifact dapo_math_17k: the site provides this file")
    assert "https://example.org/dapo-math-17k.parquet" in msg
    assert "a3rl_artifact_overrides.dapo_math_17k.path" in msg and "Fix:" in msg
    # A run that leaves the dataset out is not refused for it.
    assert pf.artifact_input_problems({"dapo_math_17k": spec}, str(store),
                                      probe=lambda _u: None, unused=["dapo_math_17k"]) == []
    # Put in place by hand: accepted, and the fetch records it.
    (store / "raw/dapo_math_17k").mkdir(parents=True)
    (store / "raw/dapo_math_17k/dapo-math-17k.parquet").write_bytes(b"x")
    assert pf.artifact_input_problems({"dapo_math_17k": spec}, str(store),
                                      probe=lambda _u: None) == []


def test_the_fetch_of_a_missing_site_provided_file_names_its_origin(tmp_path):
    spec = {"kind": "file", "dest": "raw/aime_2024", "obtain": "https://example.org/aime"}
    with pytest.raises(artifacts.ArtifactError,
                       match="It comes from https://example.org/aime. Fix: .*overrides.aime_2024"):
        artifacts.fetch_file(str(tmp_path), "aime_2024", spec, lambda _m: None)


# ----------------------------------------- 25 values that crashed or passed silently


def _inv(**node2):
    groups = {"a3_nodes": ["node1", "node2"], "head": ["node1"], "workers": ["node2"]}
    hostvars = {"node1": {"cluster_ip": "10.0.0.1", "ansible_host": "192.168.0.1"},
                "node2": {"cluster_ip": "10.0.0.2", "ansible_host": "192.168.0.2", **node2}}
    return groups, hostvars


@pytest.mark.parametrize("value", ["²", "١٦", "16GB", "", " ", True, 0, -1, "1.5", None])
def test_npus_per_node_that_is_not_ascii_digits_is_refused_not_a_traceback(value):
    [msg] = pf.npus_per_node_problems("node2", {"npus_per_node": value})
    assert msg.startswith("node2: npus_per_node ") and "Fix:" in msg


@pytest.mark.parametrize("value", [16, "16", " 8 "])
def test_npus_per_node_as_digits_passes(value):
    assert pf.npus_per_node_problems("node2", {"npus_per_node": value}) == []


@pytest.mark.parametrize(("ip", "why"), [
    ("127.0.0.1", "loopback"), ("255.255.255.255", "broadcast"), ("224.0.0.1", "multicast"),
    ("169.254.3.4", "link-local"), ("0.0.0.0", "unspecified"), ("240.0.0.1", "reserved"),
])
def test_a_cluster_ip_no_other_node_can_reach_is_refused(ip, why):
    groups, hv = _inv(cluster_ip=ip)
    [msg] = pf.topology_problems(groups, hv)
    assert msg.startswith(f"node2: cluster_ip {ip} is ") and why in msg and "Fix:" in msg


def test_non_ascii_digits_in_a_cluster_ip_are_refused():
    groups, hv = _inv(cluster_ip="١٠.0.0.2")
    [msg] = pf.topology_problems(groups, hv)
    assert "is not an IPv4 address" in msg


def test_a_head_outside_a3_nodes_is_refused():
    groups, hv = _inv()
    groups["head"] = ["node9"]
    hv["node9"] = {"cluster_ip": "10.0.0.9"}
    problems = pf.topology_problems(groups, hv)
    assert any(p.startswith("node9: is in 'head' but not under 'a3_nodes'") and "Fix:" in p
               for p in problems), problems


def test_a_node_missing_from_the_host_variables_is_named_not_a_keyerror():
    groups, hv = _inv()
    del hv["node2"]
    assert "node2: has no host variables. Fix: define it in the inventory." in \
        pf.topology_problems(groups, hv)


@pytest.mark.parametrize(("name", "value"), [
    ("ray_cluster_gcs_port", "abc"), ("ray_cluster_gcs_port", 0), ("ray_cluster_gcs_port", 70000),
    ("a3rl_ray_dashboard_port", "٨٢٦٥"), ("ray_cluster_min_worker_port", -1),
    ("a3rl_fanout_port", "29470abc"), ("recipe_env_master_port", True),
    ("ray_cluster_metrics_export_port", 29455.5),
])
def test_a_port_that_is_not_a_tcp_port_is_refused_naming_the_hosts(name, value):
    groups, hv = _inv()
    hv["node1"][name] = hv["node2"][name] = value
    [msg] = pf.setting_problems(groups["a3_nodes"], hv)
    assert msg.startswith(f"node1, node2: {name} {value!r} is not a TCP port") and "Fix:" in msg


@pytest.mark.parametrize(("name", "value"), [
    ("artifact_store_fanout_min_bytes", "1GB"), ("artifact_store_fanout_min_bytes", -1),
    ("artifact_store_bwlimit", "10M"), ("artifact_store_fanout_connect_timeout", 0),
    ("artifact_store_fanout_io_timeout", "60s"), ("artifact_store_fanout_min_rate", "²"),
])
def test_a_size_or_count_with_a_unit_or_out_of_range_is_refused(name, value):
    groups, hv = _inv(**{name: value})
    [msg] = pf.setting_problems(groups["a3_nodes"], hv)
    assert msg.startswith(f"node2: {name} {value!r} is not a whole number") and "Fix:" in msg


def test_settings_as_the_inventory_writes_them_pass():
    groups, hv = _inv(ray_cluster_gcs_port="6379", a3rl_fanout_port=29470,
                      a3rl_hccl_base_port="64021",
                      artifact_store_fanout_min_bytes=0, artifact_store_bwlimit="0",
                      preflight_disk_requirements=[{"path": "/data", "min_free_gb": "1.5"}],
                      ray_cluster_firewall_allow=["10.0.0.0/24", "192.168.1.7"])
    assert pf.setting_problems(groups["a3_nodes"], hv) == []


@pytest.mark.parametrize(("value", "needle"), [
    ([{"path": "/data", "min_free_gb": "100GB"}], "[0].min_free_gb '100GB' is not a number"),
    ([{"path": "/data", "min_free_gb": -5}], "[0].min_free_gb -5 is not a number"),
    ([{"path": "/data", "min_free_gb": "nan"}], "min_free_gb 'nan'"),
    ([{"path": "/data"}], "min_free_gb None"),
    ([{"path": "data", "min_free_gb": 1}], "[0].path 'data' is not an absolute path"),
    ([{"path": "/data", "min_free_gb": 1}, "x"], "[1] is 'x', not a mapping"),
    ({"path": "/data"}, "not a list"),
])
def test_disk_requirements_that_would_crash_the_disk_check_are_refused(value, needle):
    groups, hv = _inv(preflight_disk_requirements=value)
    [msg] = pf.setting_problems(groups["a3_nodes"], hv)
    assert msg.startswith("node2: preflight_disk_requirements") and needle in msg, msg


def test_firewall_allow_everyone_is_warned_and_a_bad_source_refused():
    groups, hv = _inv(ray_cluster_firewall_allow=["0.0.0.0/0"])
    assert pf.setting_problems(groups["a3_nodes"], hv) == []
    [warning] = pf.firewall_allow_warnings(groups["a3_nodes"], hv)
    assert warning.startswith("WARNING node2: ray_cluster_firewall_allow 0.0.0.0/0 lets")
    groups, hv = _inv(ray_cluster_firewall_allow=["10.0.0.0/24"])
    assert pf.firewall_allow_warnings(groups["a3_nodes"], hv) == []
    for bad in (["10.0.0.300"], ["fe80::1"], "10.0.0.0/24", [5]):
        groups, hv = _inv(ray_cluster_firewall_allow=bad)
        [msg] = pf.setting_problems(groups["a3_nodes"], hv)
        assert "ray_cluster_firewall_allow" in msg and "Fix:" in msg


def test_two_entries_reaching_one_machine_by_name_and_ip_are_refused():
    facts = {"all_ipv4_addresses": ["10.0.0.1", "192.168.0.1", "127.0.0.1"], "machine_id": "m1"}
    hv = {"node1": {"ansible_facts": facts}, "node2": {"ansible_facts": dict(facts)},
          "node3": {"ansible_facts": {"all_ipv4_addresses": ["10.0.0.3"], "machine_id": "m3"}}}
    [msg] = pf.same_machine_problems(["node1", "node2", "node3"], hv)
    assert msg.startswith("node2: reaches the same machine as node1") and "Fix:" in msg
    # Same machine id (cloned images) but other addresses: distinct machines.
    hv["node2"]["ansible_facts"] = {**facts, "all_ipv4_addresses": ["10.0.0.2"]}
    assert pf.same_machine_problems(["node1", "node2"], hv) == []


REV = "0123456789abcdef0123456789abcdef01234567"  # a hub entry's commit (issue 21)


@pytest.mark.parametrize(("spec", "needle"), [
    ({"kind": "modelscope", "id": "Qwen/../etc", "dest": "models/x", "revision": REV},
     "id 'Qwen/../etc'"),
    ({"kind": "modelscope", "id": "../Qwen3-32B", "dest": "models/x", "revision": REV},
     "is not a hub id"),
    ({"kind": "modelscope", "id": "Qwen3-32B", "dest": "models/x", "revision": REV}, "owner/name"),
    ({"kind": "modelscope", "id": 5, "dest": "models/x", "revision": REV}, "id 5"),
    ({"kind": "git", "url": "--upload-pack=touch /tmp/x", "ref": "v1"}, "must not begin with '-'"),
    ({"kind": "git", "url": "https://x/y.git", "ref": "--all"}, "ref '--all' begins with '-'"),
    ({"kind": "http", "url": "file:///etc/passwd", "dest": "raw/x", "sha256": "a" * 64},
     "not an http(s) URL"),
    ({"kind": "http", "url": ["http://x"], "dest": "raw/x", "sha256": "a" * 64}, "is not a URL"),
])
def test_a_source_that_could_step_out_or_be_read_as_an_option_is_refused(spec, needle):
    [msg] = artifacts.validate("a", spec)
    assert needle in msg and msg.startswith("artifact a: ") and "Fix:" in msg


def test_git_is_never_handed_a_url_where_it_reads_options(tmp_path):
    """Even past validation, the fetch puts "--" before the URL: a URL that is an option
    makes git fail on a missing repository, it does not run what the option says."""
    repo = tmp_path / "r"
    artifacts._git(["init", "--quiet", "--bare", str(repo)])
    marker = tmp_path / "ran"
    with pytest.raises(artifacts.ArtifactError):
        artifacts._fetch_commit(str(repo), f"--upload-pack=touch {marker}", "v1", "t")
    assert not marker.exists()


@pytest.mark.parametrize("overrides", [[5], [None], [{"a": 1}], "data.train_batch_size=4"])
def test_overrides_that_are_not_strings_are_refused_by_the_plan(overrides):
    from a3rl.planning import plan as planmod

    root = Path(__file__).resolve().parents[2]
    with pytest.raises(planmod.PlanError) as e:
        planmod.plan_from_files(root, "grpo", "qwen3_32b", "real", None, 2, 16, "/data/a3rl",
                                "/data/a3rl/llm_rl/qwen3", extra_overrides=overrides)
    assert any("override" in p and ("not a 'key=value' string" in p or "not a list" in p)
               for p in e.value.problems), e.value.problems
    if not isinstance(overrides, str):
        word = {5: "a number", None: "null"}.get(overrides[0], "a mapping") \
            if not isinstance(overrides[0], dict) else "a mapping"
        assert any(f"({word})" in p for p in e.value.problems), e.value.problems


@pytest.mark.parametrize("npus", ["²", "١٦"])
def test_a_plan_with_non_ascii_digits_is_refused_not_a_traceback(npus):
    from a3rl.planning import plan as planmod

    root = Path(__file__).resolve().parents[2]
    with pytest.raises(planmod.PlanError) as e:
        planmod.plan_from_files(root, "grpo", "qwen3_32b", "real", None, 2, npus, "/data/a3rl",
                                "/data/a3rl/llm_rl/qwen3")
    assert any("npus_per_node must be a positive whole number" in p for p in e.value.problems)


@pytest.mark.parametrize(("nodes", "npus"), [(0, 16), (2, 0), ("", 16), (-1, 16), (2, "١٦")])
def test_a_model_env_for_no_nodes_is_refused(nodes, npus):
    from a3rl.planning import recipe_env

    model = {"name": "Qwen3-32B", "infer_tp": 4, "max_num_seqs": 64}
    with pytest.raises(recipe_env.RecipeEnvError, match="positive whole number of .*Fix:"):
        recipe_env.model_env(model, nodes, npus)


def _fan_nodes(*hosts):
    return [{"host": h, "ip": f"10.0.0.{i + 1}", "needed": ["a.bin"]} for i, h in enumerate(hosts)]


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"port": "29470abc"}, "a3rl_fanout_port '29470abc' is not a TCP port"),
    ({"port": 0}, "a3rl_fanout_port 0"),
    ({"min_bytes": "1GB"}, "artifact_store_fanout_min_bytes '1GB' is not a whole number"),
    ({"min_bytes": -1}, "artifact_store_fanout_min_bytes -1"),
])
def test_fanout_settings_are_refused_by_name_not_a_traceback(kwargs, needle):
    from a3rl.node import fanout

    files = [{"path": "a.bin", "sha256": "a" * 64, "size": 10}]
    with pytest.raises(fanout.FanoutError, match=re.escape(needle)):
        fanout.plan(_fan_nodes("node1", "node2"), files, **{"port": 29999, **kwargs})


def test_a_fanout_plan_with_a_negative_size_or_a_node_twice_is_refused():
    from a3rl.node import fanout

    files = [{"path": "a.bin", "sha256": "a" * 64, "size": 10}]
    with pytest.raises(fanout.FanoutError, match="names node1 more than once"):
        fanout.plan(_fan_nodes("node1", "node2", "node1"), files, port=29999)
    with pytest.raises(fanout.FanoutError, match="size -5 is not a whole number"):
        fanout.plan(_fan_nodes("node1", "node2"), [{**files[0], "size": -5}], port=29999)


@pytest.mark.parametrize(("name", "value"), [
    ("a3rl_data_root", "data/a3rl"), ("a3rl_data_root", "/"), ("a3rl_shared_dir", "//"),
    ("a3rl_workdir", "/data/../etc"), ("a3rl_data_root", 5),
])
def test_a_data_folder_that_is_relative_or_the_root_is_refused(name, value):
    groups, hv = _inv(**{name: value})
    [msg] = pf.setting_problems(groups["a3_nodes"], hv)
    assert msg.startswith(f"node2: {name} {value!r} is not an absolute folder") and "Fix:" in msg
    groups, hv = _inv(a3rl_shared_dir="", a3rl_data_root="/data/a3rl")
    assert pf.setting_problems(groups["a3_nodes"], hv) == []


# ------------------------------- 43: classes of input refused before any change


@pytest.mark.parametrize(("name", "value", "kind"), [
    ("ray_cluster_firewall_open_ports", "22", "list"),
    ("cache_clean_paths", "/root/.cache", "list"),
    ("artifact_store_groups", "frameworks", "list"),
    ("npu_device_ips", "10.214.0.1", "list"),  # handed on: npu_network_device_ips' default
    ("recipe_env_extra", '{"A": 1}', "mapping"),
    ("ray_cluster_firewall_allow", None, "list"),
])
def test_a_list_or_mapping_setting_given_as_a_string_is_refused_naming_it(name, value, kind):
    groups, hv = _inv()
    hv["node1"][name] = hv["node2"][name] = value
    [msg] = pf.setting_problems(groups["a3_nodes"], hv)
    assert msg.startswith(f"node1, node2: {name} is {value!r} ") and f"not a {kind}" in msg
    assert "Fix: give a" in msg


def test_a_string_list_gets_a_fix_that_is_the_list_it_meant():
    [msg] = pf.setting_problems(["n"], {"n": {"ray_cluster_firewall_open_ports": "22,2222"}})
    assert """-e '{"ray_cluster_firewall_open_ports": ["22", "2222"]}'""" in msg


def test_the_list_settings_are_the_roles_own_from_their_specs(tmp_path):
    found = pf.typed_settings()
    assert found["ray_cluster_firewall_open_ports"] == ("ray_cluster", "list")
    assert found["cache_clean_paths"] == ("cache_clean", "list")
    assert found["recipe_env_hccl"] == ("recipe_env", "dict")
    # A list variable a role adds later is checked without being listed anywhere else.
    spec = tmp_path / "roles/new_role/meta"
    spec.mkdir(parents=True)
    (spec / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      new_role_hosts:\n        type: list\n"
        "      new_role_name:\n        type: str\n")
    assert pf.typed_settings(str(tmp_path / "roles")) == {"new_role_hosts": ("new_role", "list")}


@pytest.mark.parametrize(("values", "needles"), [
    ({"a3rl_fanout_port": 29450},
     ["a3rl_fanout_port 29450 overlaps ray_cluster_node_manager_port 29450"]),
    ({"a3rl_ray_gcs_port": 8260, "a3rl_ray_dashboard_port": 8260},
     ["a3rl_ray_dashboard_port 8260 overlaps a3rl_ray_gcs_port 8260"]),
    ({"a3rl_hccl_base_port": 10000},
     ["the HCCL ports 10000-10031", "overlaps ray_cluster_client_server_port 10001, "
      "Ray's worker ports 10002-19999"]),
    ({"ray_cluster_metrics_export_port": 23500},
     ["Ray client's specific-server ports (fixed by Ray) overlaps "
      "ray_cluster_metrics_export_port 23500"]),
    ({"ray_cluster_min_worker_port": 20000, "ray_cluster_max_worker_port": 19999},
     ["ray_cluster_min_worker_port 20000 is above ray_cluster_max_worker_port 19999"]),
    ({"a3rl_hccl_base_port": 65530},
     ["a3rl_hccl_base_port 65530 with a3rl_hccl_port_count 32 is not a range"]),
    ({"a3rl_hccl_base_port": 64000, "a3rl_hccl_port_count": "x"},
     ["a3rl_hccl_base_port 64000 with a3rl_hccl_port_count 'x' is not a range"]),
    ({"ray_cluster_firewall_open_ports": ["22", "65536"]},
     ["ray_cluster_firewall_open_ports entry '65536' is not a port"]),
    ({"ray_cluster_firewall_open_ports": ["0"]}, ["entry '0' is not a port"]),
    ({"ray_cluster_firewall_peer_ports": ["-5"]}, ["entry '-5' is not a port"]),
    ({"ray_cluster_firewall_open_ports": ["22", "29440:29445"]},
     ["entry '29440:29445' opens a3rl_ray_gcs_port 29444 to every source"]),
])
def test_listeners_on_one_port_or_ports_out_of_range_are_refused(values, needles):
    hv = {"a3rl_ray_gcs_port": 29444, "a3rl_ray_dashboard_port": 8260, **values}
    [msg] = pf.setting_problems(["node1"], {"node1": hv})
    assert msg.startswith("node1: ") and "Fix:" in msg, msg
    assert all(n in msg for n in needles), msg


def test_the_shipped_ports_do_not_overlap():
    assert pf.listener_problems({}) == []
    assert pf.listener_problems({"ray_cluster_firewall_open_ports": ["22", 2222]}) == []


@pytest.mark.parametrize(("spec", "needle"), [
    ({"kind": "file", "dest": "raw/x", "size": "10GB"}, "size '10GB' is not a whole number"),
    ({"kind": "file", "dest": "raw/x", "size": -1}, "size -1 is not a whole number"),
    ({"kind": "wheelhouse", "requirements": {"artifact": "verl"}},
     "requirements {'artifact': 'verl'} lacks path"),
    ({"kind": "wheelhouse", "requirements": "ray==2.48.0"}, "is neither {artifact, path} nor"),
    ({"kind": "modelscope", "id": "Qwen/Qwen3-32B", "dest": "models/c", "revision": REV,
      "allow_patterns": "config.json"}, "`allow_patterns` is 'config.json'; expected a list"),
    ({"kind": "git", "url": "https://x/y.git", "ref": "v1", "cherry_picks": "448c6c3"},
     "cherry_picks '448c6c3' is not a list"),
])
def test_a_manifest_field_of_the_wrong_type_is_refused_by_name(spec, needle):
    [msg] = artifacts.validate("a", spec)
    assert msg.startswith("artifact a: ") and needle in msg and "Fix:" in msg, msg


def test_a_size_with_a_unit_is_an_artifact_error_not_a_traceback(tmp_path):
    src = tmp_path / "x.bin"
    src.write_bytes(b"x")
    spec = {"kind": "file", "dest": "raw/x.bin", "path": str(src), "size": "10GB"}
    with pytest.raises(artifacts.ArtifactError, match="size '10GB' is not a whole number"):
        artifacts.ensure(str(tmp_path / "store"), "a", spec)
    assert pf.artifact_input_problems({"a": spec}, str(tmp_path / "store"),
                                      probe=lambda _u: None)[0].startswith(
        "controller: artifact a: size '10GB'")


@pytest.mark.parametrize(("name", "value"), [
    ("a3rl_data_root", "/etc"), ("a3rl_data_root", "/usr/"), ("a3rl_data_root", "/var"),
    ("a3rl_shared_dir", "/home"), ("a3rl_workdir", "/boot"), ("a3rl_data_root", "/proc/a3rl"),
    ("a3rl_env_dir", "/etc"), ("a3rl_assets_dir", "/lib64"),
])
def test_a_data_folder_that_is_a_system_folder_is_refused(name, value):
    [msg] = pf.setting_problems(["node1"], {"node1": {name: value}})
    assert msg.startswith(f"node1: {name} {value!r} is a folder of the operating system")
    assert "Fix:" in msg
    assert pf.setting_problems(["node1"], {"node1": {name: "/data/a3rl",
                                                     "a3rl_env_dir": "/etc/a3rl/env"}}) == []


@pytest.mark.parametrize(("dest", "needle"), [
    ("git", "store's own folder git/"), ("git/verl.bundle", "store's own folder git/"),
    ("python/recipe_wheels.tar", "store's own folder python/"),
    ("./python", "store's own folder python/"),
])
def test_a_dest_in_the_stores_own_folders_is_refused(dest, needle):
    [msg] = artifacts.validate("m", {"kind": "file", "dest": dest})
    assert needle in msg and "Fix:" in msg
    assert artifacts.validate("m", {"kind": "file", "dest": "gitlab/x"}) == []


def test_a_group_no_artifact_has_is_refused_and_a_string_is_not_split():
    m = {"verl": {"kind": "git", "group": "frameworks"}, "w": {"kind": "file", "group": "data"}}
    [msg] = manifest.group_problems(m, ["frameworks", "framework"], "bundle_groups")
    assert msg.startswith("bundle_groups names 'framework', which no artifact") and "Fix:" in msg
    assert "groups: data, frameworks" in msg
    [msg] = manifest.group_problems(m, "frameworks", "bundle_groups")
    assert """-e '{"bundle_groups": ["frameworks"]}'""" in msg
    assert manifest.group_problems(m, "all", "bundle_groups") == []
    assert manifest.group_problems(m, ["data"], "bundle_groups") == []


def test_the_bundle_play_refuses_an_unknown_group_before_writing_anything(tmp_path):
    import subprocess
    import sys

    bundle = tmp_path / "b"
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")),
         "-i", str(tmp_path / "no-inventory"), str(REPO / "playbooks/bundle.yml"),
         "-e", '{"bundle_groups": ["nosuch"]}', "-e", f"a3rl_bundle_dir={bundle}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "bundle_groups names 'nosuch', which no artifact" in proc.stdout
    assert not bundle.exists()


def test_preflight_refuses_a_group_the_store_would_fetch_nothing_for():
    hv = {"artifact_store_groups": ["frameworks", "pyhton"],
          "a3rl_manifest": {"verl": {"kind": "git", "group": "frameworks"},
                            "wheels": {"kind": "wheelhouse", "group": "python"}}}
    [msg] = pf.setting_problems(["node1"], {"node1": hv})
    assert msg.startswith("node1: artifact_store_groups names 'pyhton', which no artifact")


@pytest.mark.parametrize(("host", "values", "needle"), [
    ("node 2", {}, "the host name 'node 2' holds a space"),
    ("node2\nrm -rf /", {}, "holds a newline"),
    ("node'2", {}, "holds a quote"),
    ("node2", {"a3rl_training_container_name": "a3rl train"},
     "a3rl_training_container_name 'a3rl train'"),
    ("node2", {"ray_cluster_container": "x;reboot"}, "ray_cluster_container 'x;reboot' is not"),
    ("node2", {"a3rl_env_dir": "/etc/a3rl/env\nreboot"}, "holds a newline"),
    ("node2", {"a3rl_workdir": "/data/my work"}, "a3rl_workdir '/data/my work' holds a space"),
    ("node2", {"a3rl_data_root": "/data/$(reboot)"}, "holds '$'"),
    ("node2", {"a3rl_default_model": "qwen3_32b\n"}, "is not a model profile key"),
    ("node2", {"a3rl_models": {"q": {"name": "Qwen3 32B"}}}, "a3rl_models.q.name 'Qwen3 32B'"),
    ("node2", {"recipe_env_extra": {"MY VAR": 1}}, "recipe_env_extra: 'MY VAR' is not a shell"),
    ("node2", {"recipe_env_hccl": {"HCCL_CONNECT_TIMEOUT": 7200, "X=1;": 2}}, "'X=1;' is not"),
    ("node2", {"recipe_env_hccl": {"HCCL_IF_BASE_PORT": 64021}},
     "recipe_env_hccl sets HCCL_IF_BASE_PORT, which is a3rl_hccl_base_port"),
    ("node2", {"recipe_env_extra": {"HCCL_IF_BASE_PORT": 64021}},
     "Fix: drop HCCL_IF_BASE_PORT from recipe_env_extra and set a3rl_hccl_base_port instead"),
])
def test_a_value_with_a_newline_quote_or_space_for_a_script_is_refused(host, values, needle):
    [msg] = pf.setting_problems([host], {host: values})
    assert msg.startswith(f"{host}: ") and needle in msg and "Fix:" in msg, msg


@pytest.mark.parametrize(("spec", "needle"), [
    ({"kind": "git", "url": "https://x/y.git", "ref": "v1; reboot"}, "ref 'v1; reboot' is not"),
    ({"kind": "git", "url": "https://x/y.git", "ref": "v1\n"}, "ref 'v1\\n' is not"),
    ({"kind": "git", "url": "https://x/y.git", "ref": "v1", "commit": "abc'"}, "commit \"abc'\""),
    ({"kind": "git", "url": "https://x/y.git", "ref": "v1",
      "cherry_picks": [{"commit": "448c6c3", "fetch": "refs/pull/1/head x"}]},
     "cherry_picks fetch 'refs/pull/1/head x'"),
    ({"kind": "file", "dest": "models/a b"}, "dest 'models/a b' holds a character"),
    ({"kind": "file", "dest": "raw/x'y"}, "dest \"raw/x'y\" holds a character"),
])
def test_a_git_ref_or_dest_with_a_space_quote_or_newline_is_refused(spec, needle):
    [msg] = artifacts.validate("a", spec)
    assert msg.startswith("artifact a: ") and needle in msg and "Fix:" in msg, msg
    ok = {"kind": "git", "url": "https://x/y.git", "ref": "refs/pull/3427/head",
          "commit": "448c6c3", "cherry_picks": [{"commit": "448c6c3", "fetch": "v0.6.0"}]}
    assert artifacts.validate("a", ok) == []


# ------------------------------------- 53: values checked where they enter, by every play

ROOT = project_root()


_filters = project_filters


def _firewall(**kw):
    """The Ray role's firewall filter, called as firewall.yml calls it."""
    ports = {"gcs": 29444, "dashboard": 8260, "client_server": 10001, "node_manager": 29450,
             "object_manager": 29451, "runtime_env_agent": 29452, "dashboard_agent_grpc": 29453,
             "dashboard_agent_http": 29454, "metrics_export": 29455, "min_worker": 10002,
             "max_worker": 19999}
    kw = {"open_ports": ["22"], "peer_ports": [], "ephemeral": ["32768:60999"],
          "allowed": [], **kw}
    rules = _filters()["a3rl_ray_firewall_rules"]
    return rules("A3RL-RAY", "10.0.0.1", "10.0.0.1", ["10.0.0.1", "10.0.0.2"], ports, **kw)


@pytest.mark.parametrize(("arg", "value", "name"), [
    ("open_ports", "22", "ray_cluster_firewall_open_ports"),
    ("peer_ports", "29470", "ray_cluster_firewall_peer_ports"),
    ("allowed", "10.0.0.0/8", "ray_cluster_firewall_allow"),
    ("open_ports", {"22": None}, "ray_cluster_firewall_open_ports"),
])
def test_the_firewall_filter_refuses_a_port_list_that_is_not_a_list_naming_it(arg, value, name):
    """playbooks/ray.yml runs no preflight: -e ray_cluster_firewall_open_ports=22 reached
    the filter, which read "22" as ports 2 and 2 and left SSH (22) closed."""
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError) as e:
        _firewall(**{arg: value})
    assert str(e.value).startswith(f"{name} is {value!r} (a ") and "not a list" in str(e.value)
    assert "Fix: give a list" in str(e.value)
    assert "-A A3RL-RAY -p tcp -m multiport --dports 22 -j RETURN" in _firewall()["input"]


@pytest.mark.parametrize(("value", "shown"), [
    ("65536", "'65536'"), (65536, "65536"), ("0", "'0'"), (True, "True"), ("22:21", "'22:21'"),
])
def test_the_firewall_filter_refuses_an_entry_that_is_not_a_port_naming_it(value, shown):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError) as e:
        _firewall(open_ports=["22", value])
    assert str(e.value).startswith(f"ray_cluster_firewall_open_ports entry {shown} is not a "
                                   "port or a range a:b of ports 1-65535. Fix:"), str(e.value)
    assert "--dports 22,65535 -j RETURN" in " ".join(_firewall(open_ports=["22", 65535])["input"])


@pytest.mark.parametrize("port", [65536, "65536", 70000])
def test_a_port_setting_of_65536_is_refused_and_65535_passes(port):
    [msg] = pf.setting_problems(["node1"], {"node1": {"ray_cluster_gcs_port": port}})
    assert msg.startswith(f"node1: ray_cluster_gcs_port {port!r} is not a TCP port (a whole "
                          "number from 1 to 65535") and "Fix:" in msg
    assert pf.setting_problems(["node1"], {"node1": {"ray_cluster_gcs_port": 65535}}) == []


def test_the_ray_roles_extra_resources_as_a_string_is_refused_by_name():
    from a3rl.planning import ray

    with pytest.raises(ray.RayConfigError, match=r"^ray_cluster_extra_resources is 'cpu=1' "
                                                 r"\(a string\), not a mapping"):
        ray.start_args(False, "10.0.0.2", "10.0.0.1", {"gcs": 1}, 16, extra_resources="cpu=1")


@pytest.mark.parametrize(("name", "value", "choices"), [
    ("a3rl_ray_dashboard_bind", "0.0.0.0", "loopback, cluster, any"),
    ("a3rl_ray_dashboard_bind", "127.0.0.1", "loopback, cluster, any"),
    ("ray_cluster_auth", "tokn", "auto, token, none"),
    ("cann_image_source", "docker", "tarball, registry, build"),
    ("a3rl_ray_mode", "podman", "container, host"),
    ("artifact_fanout", None, "star, chain"),
])
def test_preflight_refuses_a_value_the_roles_spec_does_not_list(name, value, choices):
    """A value a role's argument spec refuses only when the role starts (the Ray role at
    the end of site.yml) is refused by preflight, before any stage."""
    [msg] = pf.setting_problems(["node1"], {"node1": {name: value}})
    assert msg.startswith(f"node1: {name} {value!r} is not one of {choices} (the role "), msg
    assert "Fix: set" in msg


def test_the_choices_preflight_checks_come_from_the_specs_and_yaml_booleans_pass():
    found = pf.choice_settings()
    assert found["a3rl_ray_dashboard_bind"] == ("ray_cluster", ("loopback", "cluster", "any"))
    assert found["ray_action"] == found["ray_cluster_action"]  # handed on
    good = {"a3rl_ray_dashboard_bind": "cluster", "ray_cluster_auth": "none",
            "training_container_restart_policy": False, "mcore_checkpoint_alltoall_overlap": "1",
            "weights": "random"}
    assert pf.setting_problems(["node1"], {"node1": good}) == []


def test_every_play_that_reaches_the_job_api_refuses_an_address_as_the_bind():
    """train.yml runs no preflight and not the Ray role: a3rl_ray_dashboard_url was a
    KeyError for 0.0.0.0."""
    from ansible.errors import AnsibleFilterError

    url = _filters()["a3rl_ray_dashboard_url"]
    with pytest.raises(AnsibleFilterError, match=r"^a3rl_ray_dashboard_bind '0.0.0.0' "
                       r"is not one of loopback, cluster, any.*"
                       r"Fix: set a3rl_ray_dashboard_bind to loopback"):
        url("0.0.0.0", "10.0.0.1", 8260)
    assert url("any", "10.0.0.1", 8260) == "http://127.0.0.1:8260"


BAD_FOLDERS = [
    ("/etc", "is a folder of the operating system"), ("/", "is not an absolute folder"),
    ("//", "is not an absolute folder"), ("/usr/lib", "is a folder of the operating system"),
    ("/proc/self", "is a folder of the operating system"),
    ("/data/../etc", "is not an absolute folder"), ("$(id)", "is not an absolute folder"),
    ("/data/$(id)", "holds '$'"), ("/data/a'b", "holds a quote"),
    ("/data/a\nb", "holds a newline"), ("/data/a b", "holds a space"),
    ("//data/a3rl", "is not an absolute folder"), ("/data//a3rl", "is not an absolute folder"),
    ("/data/./a3rl", "is not an absolute folder"), ("/etc/a3rl/ckpt", "is inside /etc"),
    ("/usr/local/a3rl", "is inside /usr"), ("/boot/x", "is inside /boot"),
    ("/sys/fs/x", "is a folder of the operating system"), ("", "is not an absolute folder"),
    (None, "is not an absolute folder"), (5, "is not an absolute folder"),
]
GOOD_FOLDERS = ["/shared/checkpoints", "/data/a3rl/checkpoints", "/data/a3rl/checkpoints/",
                "/mnt/nfs/a3rl", "/var/lib/a3rl/supervise"]


@pytest.mark.parametrize("name", ["a3rl_checkpoint_dir", "train_job_checkpoint_dir",
                                  "a3rl_supervise_dir"])
@pytest.mark.parametrize(("value", "needle"), BAD_FOLDERS)
def test_preflight_refuses_a_checkpoint_or_supervisor_folder_that_is_no_folder_of_its_own(
        name, value, needle):
    [msg] = pf.setting_problems(["node1"], {"node1": {name: value}})
    assert msg.startswith(f"node1: {name} {value!r} {needle}"), msg
    assert "Fix: set " in msg and "an absolute folder of its own, such as /" in msg


@pytest.mark.parametrize("name", ["a3rl_supervise_dir", "a3rl_checkpoint_dir",
                                  "npu_driver_stage_dir", "frameworks_src_dir"])
@pytest.mark.parametrize("value", ["/tmp", "/tmp/a3rl", "/var/tmp/a3rl/supervise"])
def test_a_root_written_folder_is_not_in_a_world_writable_folder(name, value):
    [msg] = pf.setting_problems(["node1"], {"node1": {name: value}})
    assert msg.startswith(f"node1: {name} {value!r} is ") and "Fix:" in msg
    assert "every user may write to" in msg or "folder of the operating system" in msg


def test_good_checkpoint_and_supervisor_folders_pass():
    for value in GOOD_FOLDERS:
        hv = {"a3rl_checkpoint_dir": value, "train_job_checkpoint_dir": value,
              "a3rl_supervise_dir": value}
        assert pf.setting_problems(["node1"], {"node1": hv}) == [], value
    # A folder another play may set itself (a role default, not a cluster-wide value).
    assert pf.setting_problems(["node1"], {"node1": {"artifact_store_node_dir": "/tmp/a"}}) \
        == ["node1: artifact_store_node_dir '/tmp/a' is inside /tmp, which every user may "
            "write to: another user could place a link there first, and root would write "
            "through it. Fix: set artifact_store_node_dir to an absolute folder of its own, "
            "such as /var/cache/a3rl/stage, written with letters, digits and . _ - + @ = "
            "between single slashes (no '..' or '.')."]


@pytest.mark.parametrize(("value", "needle"), BAD_FOLDERS[:15])
def test_the_training_plays_plan_refuses_the_checkpoint_folder_itself(value, needle):
    """train.yml runs no preflight: its plan (the checkpoint policy) refuses the folder
    with the same rule."""
    from a3rl.planning import plan

    ck = {"enabled": True, "root": value, "shared": True, "max_lost_minutes": 60, "keep": 2}
    with pytest.raises(plan.PlanError) as e:
        plan.plan_from_files(ROOT, "grpo", "qwen3_32b", "real", None, 2, 16, "/data/a3rl",
                             "/data/a3rl/llm_rl/qwen3", checkpointing=ck)
    assert any(p.startswith(f"train_job_checkpoint_dir {value!r} {needle}")
               and "Fix: set a3rl_checkpoint_dir (or train_job_checkpoint_dir)" in p
               for p in e.value.problems), e.value.problems


def test_the_training_play_checks_the_supervisors_folder_with_the_same_rule():
    check = _filters()["a3rl_data_folder_problems"]
    assert check("a3rl_supervise_dir", "/var/lib/a3rl/supervise") == []
    [msg] = check("a3rl_supervise_dir", "/tmp")
    assert msg.startswith("a3rl_supervise_dir '/tmp' is a folder of the operating system")
    tasks = (ROOT / "roles/train_job/tasks/check.yml").read_text()
    assert "'a3rl_supervise_dir' | a3rl_data_folder_problems(a3rl_supervise_dir)" in tasks


def _plan(features=None, extra=None):
    from a3rl.planning import plan

    return plan.plan_from_files(ROOT, "grpo", "qwen3_32b", "real", features, 2, 16,
                                "/data/a3rl", "/data/a3rl/llm_rl/qwen3", extra_overrides=extra)


def _refused(**kw) -> list[str]:
    from a3rl.planning import plan

    with pytest.raises(plan.PlanError) as e:
        _plan(**kw)
    return e.value.problems


@pytest.mark.parametrize(("value", "needle"), [
    ("0", "trainer.total_training_steps must be at least 1 (or null: the epochs' steps), not 0"),
    ("-3", "must be at least 1 (or null: the epochs' steps), not -3"),
    ("ten", "trainer.total_training_steps must be a whole number or null, not ten"),
    ("2.5", "trainer.total_training_steps must be a whole number or null, not 2.5"),
])
def test_a_run_of_no_training_steps_is_refused(value, needle):
    """trainer.total_training_steps=0 was accepted: the job loaded the model and trained
    nothing."""
    problems = _refused(extra=[f"trainer.total_training_steps={value}"])
    assert any(needle in p for p in problems), problems
    assert "trainer.total_training_steps=3" in _plan(
        extra=["trainer.total_training_steps=3"]).overrides
    assert "trainer.total_training_steps=null" in _plan(
        extra=["trainer.total_training_steps=null"]).overrides


@pytest.mark.parametrize("features", [["sam", "no-sam"], "no-sam,sam", ["sam", " no-sam "]])
def test_a_feature_both_asked_for_and_turned_off_is_refused(features):
    """--feature sam --feature no-sam was accepted silently: the later one won."""
    problems = _refused(features=features)
    assert problems == ["features sam and no-sam are both asked for: sam would be on or off "
                        "by their order. Fix: keep one of them"], problems
    assert "sam" in _plan(features=["sam"]).features
    assert "sam" not in _plan(features=["no-sam"]).features


@pytest.mark.parametrize("override", [
    "+trainer.a3rl_note=${oc.env:RAY_AUTH_TOKEN}",
    "trainer.experiment_name='run-${oc.env:RAY_AUTH_TOKEN}'",
    "trainer.experiment_name=${ oc.env:HOME}",
    "+trainer.a3rl_list=[a,${oc.env:RAY_AUTH_TOKEN,x}]",
    "+trainer.a3rl_note=${oc.decode:'${oc.env:RAY_AUTH_TOKEN}'}",
    "+trainer.wandb_api_key=${oc.env:WANDB_API_KEY}",
])
def test_an_override_that_reads_the_jobs_environment_is_refused(override):
    """An override carrying ${oc.env:NAME} became a config value verl prints and its
    loggers send, unmasked (RAY_AUTH_TOKEN is in the job's environment)."""
    problems = _refused(extra=[override])
    assert len(problems) == 1 and problems[0].startswith(
        f"extra override {override!r}: a value read from the job's environment"), problems
    assert "Fix: give the value itself; a secret goes in an override whose key ends" \
        in problems[0]


def test_the_secret_override_path_still_reads_the_environment():
    """The plan's own reference for a secret override (issue 43) is the one way in."""
    made = _plan(extra=["+trainer.wandb_api_key=s3cr3t", "trainer.experiment_name=x-$HOME"])
    assert "+trainer.wandb_api_key='${oc.env:A3RL_SECRET_TRAINER_WANDB_API_KEY}'" \
        in made.overrides
    assert made.job()["secret_env"] == ["A3RL_SECRET_TRAINER_WANDB_API_KEY"]
