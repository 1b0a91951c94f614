"""The preflight rules, one behaviour each, on plain data shaped like Ansible's."""

from __future__ import annotations

import pytest

from a3rl.planning import preflight as pf

GROUPS = {"a3_nodes": ["n1", "n2", "n3"], "head": ["n1"], "workers": ["n2", "n3"]}
HOSTVARS = {
    "n1": {"cluster_ip": "10.0.0.1", "ansible_host": "10.0.0.1"},
    "n2": {"cluster_ip": "10.0.0.2", "ansible_host": "10.0.0.2"},
    "n3": {"cluster_ip": "10.0.0.3", "ansible_host": "10.0.0.3"},
}


def test_topology_good_inventory_has_no_problems():
    assert pf.topology_problems(GROUPS, HOSTVARS) == []


def test_topology_two_heads_named():
    groups = {**GROUPS, "head": ["n1", "n2"], "workers": ["n3"]}
    [msg] = pf.topology_problems(groups, HOSTVARS)
    assert "exactly one host (found 2: n1, n2)" in msg and "Fix:" in msg


def test_topology_no_head():
    groups = {**GROUPS, "head": [], "workers": ["n1", "n2", "n3"]}
    [msg] = pf.topology_problems(groups, HOSTVARS)
    assert "found 0: none" in msg


def test_topology_head_also_worker_and_orphan():
    groups = {"a3_nodes": ["n1", "n2", "n3"], "head": ["n1"], "workers": ["n1", "n2"]}
    problems = pf.topology_problems(groups, HOSTVARS)
    assert any(p.startswith("n1: is in both") for p in problems)
    assert any(p.startswith("n3: is in 'a3_nodes' but in neither") for p in problems)


def test_topology_duplicate_cluster_ip_names_both_hosts():
    hv = {**HOSTVARS, "n3": {"cluster_ip": "10.0.0.2", "ansible_host": "10.0.0.3"}}
    [msg] = pf.topology_problems(GROUPS, hv)
    assert msg.startswith("n3: cluster_ip 10.0.0.2 is also the cluster_ip of n2")


def test_topology_duplicate_ansible_host():
    hv = {**HOSTVARS, "n3": {"cluster_ip": "10.0.0.3", "ansible_host": "10.0.0.1"}}
    [msg] = pf.topology_problems(GROUPS, hv)
    assert "ansible_host 10.0.0.1 is also used by n1" in msg


@pytest.mark.parametrize("ip", [None, "", "10.0.0.300", "fe80::1"])
def test_topology_missing_or_bad_ip(ip):
    hv = {**HOSTVARS, "n2": {"cluster_ip": ip, "ansible_host": "10.0.0.2"}}
    [msg] = pf.topology_problems(GROUPS, hv)
    assert msg.startswith("n2: ")


def test_topology_empty_parent_group():
    [msg] = pf.topology_problems({"head": []}, {})
    assert "'a3_nodes' is empty" in msg


FACTS = {
    "interfaces": ["lo", "eth0", "enp189s0-f1"],
    "lo": {"device": "lo", "ipv4": {"address": "127.0.0.1"}},
    "eth0": {"device": "eth0", "ipv4": {"address": "10.0.0.1"},
             "ipv4_secondaries": [{"address": "10.0.0.100"}]},
    # Ansible stores interface facts under names with '-' turned into '_'.
    "enp189s0_f1": {"device": "enp189s0-f1", "ipv4": {"address": "192.168.5.1"}},
}


@pytest.mark.parametrize(
    ("ip", "nic"),
    [("10.0.0.1", "eth0"), ("10.0.0.100", "eth0"), ("192.168.5.1", "enp189s0-f1"),
     ("10.9.9.9", None)],
)
def test_nic_for_ip(ip, nic):
    assert pf.nic_for_ip(FACTS, ip) == nic


def test_nic_derived_when_not_named():
    assert pf.nic_problems("n1", FACTS, "192.168.5.1") == []


def test_nic_named_correctly():
    assert pf.nic_problems("n1", FACTS, "10.0.0.1", "eth0") == []


def test_wrong_nic_names_the_right_one():
    [msg] = pf.nic_problems("n1", FACTS, "10.0.0.1", "enp189s0-f1")
    assert "cluster_nic enp189s0-f1 does not hold cluster_ip 10.0.0.1" in msg
    assert "set cluster_nic: eth0" in msg


def test_nonexistent_nic():
    [msg] = pf.nic_problems("n1", FACTS, "10.0.0.1", "eth9")
    assert "eth9 does not exist" in msg


def test_ip_on_no_interface_lists_addresses():
    [msg] = pf.nic_problems("n1", FACTS, "10.9.9.9")
    assert "not on any interface" in msg and "eth0=10.0.0.1/10.0.0.100" in msg
    assert "127.0.0.1" not in msg


MGMT = ["davinci_manager", "devmm_svm", "hisi_hdc"]


def _devs(n: int, skip: tuple[int, ...] = ()) -> list[str]:
    return [f"/dev/davinci{i}" for i in range(n) if i not in skip] + [f"/dev/{m}" for m in MGMT]


def test_devices_complete():
    assert pf.npu_device_problems("n1", _devs(16), 16, MGMT) == []


def test_device_missing_is_named():
    [msg] = pf.npu_device_problems("n1", _devs(16, skip=(7,)), 16, MGMT)
    assert "found 15 NPU devices" in msg and "/dev/davinci7" in msg


def test_more_devices_than_declared():
    [msg] = pf.npu_device_problems("n1", _devs(16), 8, MGMT)
    assert "found 16 NPU devices, expected npus_per_node=8" in msg


def test_devices_are_not_checked_where_the_driver_is_not_installed():
    # A new node: no driver, no device nodes; the npu_driver role checks them afterwards.
    assert pf.npu_device_problems("n1", [], 16, MGMT, driver_installed=False) == []
    assert pf.npu_device_problems("n1", _devs(8), 16, MGMT, driver_installed=False) == []
    # Where the driver is installed its device nodes must be there.
    [msg, mgmt] = pf.npu_device_problems("n1", [], 16, MGMT, driver_installed=True)
    assert "found 0 NPU devices, expected npus_per_node=16" in msg
    assert "/dev/davinci_manager" in mgmt


def test_management_device_missing():
    paths = [p for p in _devs(16) if not p.endswith("hisi_hdc")]
    [msg] = pf.npu_device_problems("n1", paths, 16, MGMT)
    assert "/dev/hisi_hdc" in msg


DF = """Filesystem     1-blocks         Used    Available Capacity Mounted on
overlay    270000000000  20000000000  80000000000      24% /
/dev/vda   270000000000  20000000000  80000000000      24% /var/lib/docker
/dev/sdb  2000000000000 100000000000 500000000000       5% /data
tmpfs        1000000000            0   1000000000       0% /dev/shm
"""


def test_parse_df():
    mounts = pf.parse_df(DF)
    assert [m["mount"] for m in mounts] == ["/", "/var/lib/docker", "/data", "/dev/shm"]
    assert mounts[2]["size_available"] == 500000000000


def test_mount_for_longest_prefix():
    mounts = pf.parse_df(DF)
    assert pf.mount_for(mounts, "/data/a3rl/weights")["mount"] == "/data"
    assert pf.mount_for(mounts, "/datastore")["mount"] == "/"
    assert pf.mount_for(mounts, "/var/lib/docker")["mount"] == "/var/lib/docker"


def test_disk_enough():
    reqs = [{"path": "/data/a3rl", "min_free_gb": 400, "what": "weights"}]
    assert pf.disk_problems("n1", pf.parse_df(DF), reqs) == []


def test_disk_short_names_path_and_amounts():
    reqs = [{"path": "/data/a3rl", "min_free_gb": 600, "what": "weights"}]
    [msg] = pf.disk_problems("n1", pf.parse_df(DF), reqs)
    assert msg.startswith("n1: filesystem /data has 465.7 GB free, 600 GB needed")


def test_disk_needs_on_one_filesystem_add_up():
    reqs = [{"path": "/srv/a", "min_free_gb": 50, "what": "a"},
            {"path": "/srv/b", "min_free_gb": 50, "what": "b"}]
    [msg] = pf.disk_problems("n1", pf.parse_df(DF), reqs)
    assert "100 GB needed" in msg and "/srv/a (a); /srv/b (b)" in msg


def test_disk_free_space_at_the_edge():
    # Issue 26 (mutation): every case was hundreds of GB away from its need.
    mounts = [{"device": "/dev/sdb", "size_total": 2 * 1024**4, "mount": "/data",
               "size_available": 100 * 1024**3}]
    reqs = [{"path": "/data/a3rl", "min_free_gb": 100, "what": "weights"}]
    assert pf.disk_problems("n1", mounts, reqs) == []
    mounts[0]["size_available"] -= 1024**2  # one MiB short
    [msg] = pf.disk_problems("n1", mounts, reqs)
    assert msg.startswith("n1: filesystem /data has 100.0 GB free, 100 GB needed")


def test_os_supported():
    facts = {"distribution": "openEuler", "architecture": "aarch64"}
    assert pf.os_problems("n1", facts, ["openEuler", "Ubuntu"], ["aarch64"]) == []


def test_os_and_arch_unsupported():
    facts = {"distribution": "CentOS", "distribution_version": "7", "architecture": "x86_64"}
    problems = pf.os_problems("n1", facts, ["openEuler"], ["aarch64"])
    assert len(problems) == 2
    assert "OS CentOS 7 is not supported" in problems[0]
    assert "architecture x86_64" in problems[1]


# --- npus_per_node, checked with the inventory ---

@pytest.mark.parametrize("value", ["sixteen", -16, 0, "1.5", True])
def test_npus_per_node_must_be_a_positive_whole_number(value):
    hv = {**HOSTVARS, "n2": {**HOSTVARS["n2"], "npus_per_node": value}}
    [msg] = pf.topology_problems(GROUPS, hv)
    assert msg.startswith(f"n2: npus_per_node {value!r} is not a positive whole number")
    assert "Fix:" in msg


@pytest.mark.parametrize("value", [16, "16", 8])
def test_npus_per_node_accepted(value):
    hv = {**HOSTVARS, "n1": {**HOSTVARS["n1"], "npus_per_node": value}}
    assert pf.topology_problems(GROUPS, hv) == []


# --- controller inputs: the manifest, the files and URLs it names, secrets ---

SHA_OF_HELLO = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"  # "hello\n"


def _never(url):  # a probe that fails the test if any URL is reached
    raise AssertionError(f"{url} was probed")


def test_good_file_entry_hashed_once_then_from_the_cache(tmp_path, monkeypatch):
    f = tmp_path / "driver.run"
    f.write_text("hello\n")
    m = {"npu_driver": {"kind": "file", "dest": "driver.run", "path": str(f),
                        "sha256": SHA_OF_HELLO}}
    cache = tmp_path / "cache"
    assert pf.artifact_input_problems(m, str(tmp_path / "store"), cache_dir=str(cache),
                                      probe=_never) == []
    calls = []
    monkeypatch.setattr(pf.artifacts, "sha256_file", lambda p: calls.append(p) or "x")
    assert pf.artifact_input_problems(m, str(tmp_path / "store"), cache_dir=str(cache),
                                      probe=_never) == []
    assert calls == []  # same size and mtime: not read again
    f.write_text("hello, changed\n")
    [msg] = pf.artifact_input_problems(m, str(tmp_path / "store"), cache_dir=str(cache),
                                       probe=_never)
    assert calls and "has sha256 x, the manifest says" in msg


def test_wrong_checksum_names_file_both_hashes_and_fix(tmp_path):
    f = tmp_path / "fw.run"
    f.write_text("hello\n")
    m = {"npu_firmware": {"kind": "file", "dest": "fw.run", "path": str(f), "sha256": "0" * 64}}
    [msg] = pf.artifact_input_problems(m, str(tmp_path / "store"), probe=_never)
    assert msg.startswith(f"controller: artifact npu_firmware: {f} has sha256 {SHA_OF_HELLO}")
    assert "says " + "0" * 64 in msg and "Fix:" in msg


def test_file_put_by_hand_into_the_store_is_checked_when_there(tmp_path):
    store = tmp_path / "store"
    m = {"cann_image": {"kind": "file", "dest": "images/cann.tar", "sha256": "1" * 64}}
    # Not there (yet): a stage that needs it says so; nothing to refuse here.
    assert pf.artifact_input_problems(m, str(store), probe=_never) == []
    (store / "images").mkdir(parents=True)
    (store / "images" / "cann.tar").write_text("hello\n")
    [msg] = pf.artifact_input_problems(m, str(store), probe=_never)
    assert "images/cann.tar has sha256" in msg


def test_missing_path_is_named(tmp_path):
    m = {"gsm8k": {"kind": "file", "dest": "raw/gsm8k", "path": "/nonexistent/gsm8k"}}
    [msg] = pf.artifact_input_problems(m, str(tmp_path), probe=_never)
    assert msg.startswith("controller: artifact gsm8k: path /nonexistent/gsm8k does not exist")
    assert "Fix:" in msg


def test_entry_the_store_holds_as_specified_is_not_looked_at_again(tmp_path):
    from a3rl.node import artifacts

    spec = {"kind": "http", "url": "http://unreachable.invalid/x", "dest": "x", "sha256": "2" * 64}
    artifacts.write_manifest(str(tmp_path), {"version": 1, "artifacts": {
        "x": {"spec_digest": artifacts.spec_digest(spec), "files": []}}})
    assert pf.artifact_input_problems({"x": spec}, str(tmp_path), probe=_never) == []
    # A changed entry (here: its sha256) is no longer what the store holds: checked.
    changed = {**spec, "sha256": "3" * 64}
    [msg] = pf.artifact_input_problems({"x": changed}, str(tmp_path),
                                       probe=lambda url: "Name or service not known")
    assert "http://unreachable.invalid/x cannot be reached from the controller" in msg
    assert "(Name or service not known)" in msg and "Fix:" in msg


def test_a_refused_url_never_shows_its_credential(tmp_path):
    """The two refusals that name an artifact's URL mask its userinfo (issue 43)."""
    http = {"kind": "http", "url": "https://bob:s3cret@hub.invalid/x", "dest": "x",
            "sha256": "2" * 64}
    git = {"kind": "git", "url": f"file://bob:s3cret@{tmp_path}/missing.git", "dest": "g",
           "ref": "main"}
    for name, spec in (("x", http), ("g", git)):
        msgs = pf.artifact_input_problems({name: spec}, str(tmp_path),
                                          probe=lambda url: f"refused by {url}")
        assert msgs and "s3cret" not in "".join(msgs) and "***@" in "".join(msgs), msgs


def test_urls_are_not_probed_offline_or_from_a_stager(tmp_path):
    m = {"x": {"kind": "http", "url": "http://a.invalid/x", "dest": "x", "sha256": "2" * 64},
         "g": {"kind": "git", "url": "/nonexistent/repo.git", "ref": "main"}}
    assert pf.artifact_input_problems(m, str(tmp_path), offline=True, probe=_never) == []
    assert pf.artifact_input_problems(m, str(tmp_path), fetch_on_controller=False,
                                      probe=_never) == []
    problems = pf.artifact_input_problems(m, str(tmp_path), probe=lambda u: "refused")
    assert len(problems) == 2
    assert any("git url /nonexistent/repo.git does not exist" in p for p in problems)


@pytest.mark.parametrize(("spec", "needle"), [
    ({"kind": "svn", "url": "x"}, "kind is 'svn'"),
    ({"kind": "file", "dest": "../../etc/x"}, "must be a relative path inside the store"),
    ({"kind": "file", "dest": "/etc/x"}, "must be a relative path inside the store"),
    ({"kind": "file", "dest": "x", "sha256": "abc"}, "is not 64 lowercase hex digits"),
    ({"kind": "http", "url": "http://x/y", "dest": "y"}, "`sha256` is not set"),
    ("not a mapping", "the entry is not a mapping"),
])
def test_malformed_entries_are_refused_with_the_fix(tmp_path, spec, needle):
    [msg] = pf.artifact_input_problems({"a": spec}, str(tmp_path), probe=_never)
    assert msg.startswith("controller: artifact a") and needle in msg and "Fix:" in msg


def test_url_problem_against_a_real_server(tmp_path):
    import functools
    import http.server
    import threading

    (tmp_path / "f").write_text("x")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert pf.url_problem(f"{base}/f") is None
        assert "404" in pf.url_problem(f"{base}/missing")
    finally:
        server.shutdown()
        server.server_close()
    # Nothing listens on a closed port: refused, quickly.
    assert "refused" in pf.url_problem(f"http://127.0.0.1:{server.server_address[1]}/f",
                                       timeout=2).lower()


@pytest.mark.parametrize(("source", "user", "has", "bad"), [
    ("registry", "robot", False, True),
    ("registry", "robot", True, False),
    ("registry", "", False, False),  # anonymous pull
    ("tarball", "robot", False, False),
])
def test_registry_password_needed_only_for_a_registry_login(source, user, has, bad):
    problems = pf.registry_secret_problems(source, user, has)
    assert bool(problems) == bad
    if bad:
        assert "cann_image_registry_password" in problems[0] and "Fix:" in problems[0]


def test_token_auth_needs_a_ray_that_has_it():
    [msg] = pf.ray_auth_problems("token", "2.48.0")
    assert msg.startswith("controller: ray_cluster_auth is 'token' but Ray 2.48.0")
    assert "Fix:" in msg
    assert pf.ray_auth_problems("auto", "2.48.0") == []
    assert pf.ray_auth_problems("token", "2.60.0") == []
    assert "must be auto, token or none" in pf.ray_auth_problems("yes", "2.48.0")[0]
