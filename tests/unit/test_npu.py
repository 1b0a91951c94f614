"""Version ordering, install decisions and npu-smi parsing for the npu_driver role."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from a3rl.node import npu
from a3rl.sim.standins import NPU_SMI, driver_version_info


def test_container_devices():
    devs = npu.container_devices("3", ["/dev/davinci_manager"])
    assert devs == ["/dev/davinci0:/dev/davinci0:rwm", "/dev/davinci1:/dev/davinci1:rwm",
                    "/dev/davinci2:/dev/davinci2:rwm",
                    "/dev/davinci_manager:/dev/davinci_manager:rwm"]


def test_parse_kv_reads_version_info():
    kv = npu.parse_kv(driver_version_info("25.3.rc1") + "# comment=no\nnot a pair\n")
    assert kv["Version"] == "25.3.rc1"
    assert kv["package_version"] == "25.3.rc1"
    assert "# comment" not in kv


@pytest.mark.parametrize(
    ("older", "newer"),
    [("25.2.1", "25.3.rc1"), ("25.3.rc1", "25.3.rc2"), ("25.3.RC2", "25.3.0"),
     ("25.3.0", "25.3.1"), ("24.1.rc3", "25.3.rc1"), ("7.8.0.2.210", "7.8.0.2.212"),
     ("7.8.0.2.212", "7.8.0.3")],
)
def test_version_order(older, newer):
    assert npu.version_key(older) < npu.version_key(newer)


def test_version_equal_forms():
    assert npu.version_key("25.3.RC1") == npu.version_key("25.3.rc1")
    assert npu.version_key("25.3rc1") == npu.version_key("25.3.rc1")
    assert npu.version_key("25.3") == npu.version_key("25.3.0")
    # A build of the pinned version is that version: no upgrade on every run.
    assert npu.version_key("24.1.rc3.b020") == npu.version_key("24.1.rc3")
    assert npu.package_action("24.1.RC3.B020", "24.1.rc3") == "none"


def test_rc_without_separator_orders_after_older_release():
    assert npu.version_key("25.2.1") < npu.version_key("25.3rc1")


@pytest.mark.parametrize(
    ("installed", "wanted", "action"),
    [(None, "25.3.rc1", "install"), ("", "25.3.rc1", "install"),
     ("25.2.1", "25.3.rc1", "upgrade"), ("25.3.rc1", "25.3.rc1", "none")],
)
def test_package_action(installed, wanted, action):
    assert npu.package_action(installed, wanted) == action


def test_downgrade_refused_unless_allowed():
    assert npu.package_action("25.3.1", "25.3.rc1") == "refuse"
    assert npu.package_action("25.3.1", "25.3.rc1", allow_downgrade=True) == "downgrade"


def test_patch_level_of_the_pinned_release_is_compatible():
    # A3 guides ship HDK 25.3.RC1.2; version.info reads 25.3.rc1.2.
    assert npu.release_key("25.3.rc1.2") == npu.release_key("25.3.RC1")
    assert npu.package_action("25.3.rc1.2", "25.3.rc1") == "compatible"
    assert npu.package_action("25.3.RC1.3", "25.3.rc1.2") == "compatible"
    # An older patch level, or the release itself under a patch pin, is upgraded.
    assert npu.package_action("25.3.rc1", "25.3.rc1.2") == "upgrade"
    assert npu.package_action("25.3.rc1.1", "25.3.rc1.2") == "upgrade"
    # Another release is not a patch level: newer is refused, older upgraded.
    assert npu.package_action("25.3.rc2", "25.3.rc1") == "refuse"
    assert npu.package_action("25.3.0", "25.3.rc1.2") == "refuse"
    assert npu.package_action("25.2.rc1.2", "25.3.rc1") == "upgrade"
    # The explicit choice installs exactly the pin.
    assert npu.package_action("25.3.rc1.2", "25.3.rc1", allow_downgrade=True) == "downgrade"
    # Without rcN no patch level is known: firmware versions compare as whole versions.
    assert npu.package_action("7.8.0.2.213", "7.8.0.2.212") == "refuse"


def _standin_output(tmp_path: Path, devices: int, health: str = "") -> str:
    (tmp_path / "dev").mkdir()
    for i in range(devices):
        (tmp_path / "dev" / f"davinci{i}").touch()
    driver = tmp_path / "usr/local/Ascend/driver"
    driver.mkdir(parents=True)
    (driver / "version.info").write_text(driver_version_info("25.3.rc1"))
    (tmp_path / "etc/a3rl-sim").mkdir(parents=True)
    (tmp_path / "etc/a3rl-sim/npu-health").write_text(health)
    return subprocess.run([str(NPU_SMI), "info"], check=True, capture_output=True, text=True,
                          env={**os.environ, "A3RL_STANDIN_ROOT": str(tmp_path)}).stdout


def test_parse_a3_layout_from_the_standin(tmp_path):
    chips = npu.parse_npu_smi_info(_standin_output(tmp_path, 16))
    assert len(chips) == 16
    assert [(c["npu"], c["chip"], c["phy_id"]) for c in chips[:3]] == [
        (0, 0, 0), (0, 1, 1), (1, 0, 2)]
    assert all(c["health"] == "OK" for c in chips)
    assert npu.npu_health_problems("n1", chips, 16) == []


def test_unhealthy_chip_is_named(tmp_path):
    chips = npu.parse_npu_smi_info(_standin_output(tmp_path, 16, "3 Critical\n"))
    [msg] = npu.npu_health_problems("n1", chips, 16)
    assert msg.startswith("n1: NPU 1 chip 1 (/dev/davinci3) reports health Critical")


def test_missing_chips_counted(tmp_path):
    chips = npu.parse_npu_smi_info(_standin_output(tmp_path, 14))
    [msg] = npu.npu_health_problems("n1", chips, 16)
    assert "lists 14 NPU chips, expected 16" in msg


def test_extra_chips_counted(tmp_path):
    # More chips than the inventory says is a wrong inventory or a wrong node: a plan made
    # for 16 would leave cards idle or collide with another job's.
    chips = npu.parse_npu_smi_info(_standin_output(tmp_path, 18))
    assert len(chips) == 18
    [msg] = npu.npu_health_problems("n1", chips, 16)
    assert "lists 18 NPU chips, expected 16" in msg


# The older single-die layout (Atlas 800T A2), as published: no Phy-ID column.
A2_SAMPLE = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.6                   Version: 23.0.6                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 97.6        37                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3398 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | Warning       | 93.0        36                0    / 0             |
| 0                         | 0000:01:00.0  | 0           0    / 0          3397 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
+===========================+===============+====================================================+
"""


def test_parse_older_layout():
    chips = npu.parse_npu_smi_info(A2_SAMPLE)
    assert [(c["npu"], c["chip"], c["phy_id"], c["health"]) for c in chips] == [
        (0, 0, None, "OK"), (1, 0, None, "Warning")]
    [msg] = npu.npu_health_problems("n1", chips, 2)
    assert msg.startswith("n1: NPU 1 chip 0 reports health Warning")


PINS = {"driver": "25.3.rc1", "firmware": "7.8.0.2.212"}


def test_new_node_gets_the_driver_first_and_nothing_is_stopped():
    plan = npu.driver_plan({"driver": "", "firmware": ""}, PINS)
    assert plan["order"] == ["driver", "firmware"]
    assert plan["actions"] == {"driver": "install", "firmware": "install"}
    assert plan["changes"] and not plan["disrupts"]


@pytest.mark.parametrize("installed", [
    {"driver": "25.2.1", "firmware": "7.7.0.1.231"},  # both upgraded
    {"driver": "25.2.1", "firmware": "7.8.0.2.212"},  # the driver only
    {"driver": "25.3.rc1", "firmware": "7.7.0.1.231"},  # the firmware only
    {"driver": "25.3.rc1", "firmware": ""},  # firmware missing beside a driver
])
def test_upgrade_puts_the_firmware_first_and_stops_what_holds_the_devices(installed):
    plan = npu.driver_plan(installed, PINS)
    assert plan["order"] == ["firmware", "driver"]
    assert plan["changes"] and plan["disrupts"]


def test_current_or_compatible_node_changes_nothing():
    for have in ({"driver": "25.3.rc1", "firmware": "7.8.0.2.212"},
                 {"driver": "25.3.rc1.2", "firmware": "7.8.0.2.212"}):
        plan = npu.driver_plan(have, PINS)
        assert not plan["changes"] and not plan["disrupts"] and plan["refused"] == []


def test_a_refused_downgrade_is_named_before_anything_runs():
    plan = npu.driver_plan({"driver": "25.3.rc2", "firmware": "7.7.0.1.231"}, PINS, host="n2")
    assert plan["refused"] == [
        "n2: the installed driver 25.3.rc2 is newer than the pinned 25.3.rc1. Fix: pin "
        "25.3.rc2, or set npu_driver_allow_downgrade: true to install the older one."]
    allowed = npu.driver_plan({"driver": "25.3.rc2", "firmware": "7.8.0.2.212"}, PINS,
                              allow_downgrade=True)
    assert allowed["refused"] == [] and allowed["actions"]["driver"] == "downgrade"
    assert allowed["disrupts"]


# --- the upgrade's job check (roles/npu_driver/tasks/jobs.yml) ---------------------------


@pytest.fixture()
def job_api():
    """Ray's job API answering GET /api/jobs/ with the jobs the test sets."""
    import http.server
    import json
    import threading

    jobs: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802 - http.server's naming
            body = json.dumps(jobs).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", jobs
    srv.shutdown()


def test_a_pending_job_blocks_a_driver_upgrade_as_a_running_one_does(job_api):
    # A job Ray has accepted but not yet placed starts on the nodes the upgrade stops.
    from .conftest import run_module

    url, jobs = job_api
    jobs += [{"submission_id": s.lower(), "status": s, "entrypoint": "python3 -m x"}
             for s in ("PENDING", "SUCCEEDED", "STOPPED", "FAILED")]
    got = run_module("a3rl_ray_jobs", {"url": url, "reachable_only": True})
    # The role's assert refuses when this list is not empty.
    assert got["active"] == ["pending (PENDING: python3 -m x)"], got
    jobs[0]["status"] = "RUNNING"
    assert run_module("a3rl_ray_jobs", {"url": url, "reachable_only": True})["active"] == [
        "pending (RUNNING: python3 -m x)"]
