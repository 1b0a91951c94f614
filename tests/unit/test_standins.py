"""The simulator's stand-ins for the Ascend HDK packages and ``npu-smi``.

These run the generated ``.run`` files and the stand-in ``npu-smi`` for real, in a
temporary root (``A3RL_STANDIN_ROOT``), and check what the roles will rely on: the
vendor's file names, options, exit codes, messages and the files left behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
try:
    from a3rl.sim import standins
except ImportError:  # not installed into this interpreter: use the source tree
    sys.path.insert(0, str(REPO / "tools"))
    from a3rl.sim import standins

OLD_DRIVER, NEW_DRIVER = "25.2.0", "25.3.rc1"
OLD_FW, NEW_FW = "7.7.0.1.231", "7.8.0.2.212"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def pkgs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pkgs")
    return {
        "old": standins.build_driver_run(OLD_DRIVER, out),
        "new": standins.build_driver_run(NEW_DRIVER, out),
        "fw_old": standins.build_firmware_run(OLD_FW, out),
        "fw_new": standins.build_firmware_run(NEW_FW, out),
    }


DEVICES = [f"davinci{i}" for i in range(16)] + ["davinci_manager", "devmm_svm", "hisi_hdc"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A new node's root: the run user, and no NPU device files (the driver makes them)."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        "HwHiAiUser:x:1000:1000::/home/HwHiAiUser:/bin/bash\n")
    (tmp_path / "etc/group").write_text("root:x:0:\nHwHiAiUser:x:1000:\n")
    (tmp_path / "dev").mkdir()
    return tmp_path


def with_devices(root: Path) -> Path:
    """The device files a node with a loaded driver has (plain files here)."""
    for name in DEVICES:
        (root / "dev" / name).touch()
    return root


def run(cmd: list[str | Path], root: Path, stdin: str | None = None,
        display: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env["A3RL_STANDIN_ROOT"] = str(root)
    if display is not None:
        env["DISPLAY"] = display
    proc = subprocess.run([str(c) for c in cmd], env=env, text=True, capture_output=True,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                          timeout=60)
    proc.stdout = ANSI.sub("", proc.stdout)
    return proc


def smi(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run([root / "usr/local/bin/npu-smi", *args], root)


def kv(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def install_driver(pkg: Path, root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    proc = run([pkg, "--full", "--install-for-all", "--quiet", *extra], root)
    assert proc.returncode == 2, proc.stdout + proc.stderr  # 2 = installed, reboot needed
    return proc


DRIVER_INFO = Path("usr/local/Ascend/driver/version.info")
FW_INFO = Path("usr/local/Ascend/firmware/version.info")


# --- package files -------------------------------------------------------------------

def test_filenames_follow_the_vendor_scheme() -> None:
    assert (standins.standin_filename("driver", "25.3.rc1", "aarch64")
            == "Atlas-A3-hdk-npu-driver_25.3.rc1_linux-aarch64.run")
    assert (standins.standin_filename("driver", "25.3.rc1", "x86_64")
            == "Atlas-A3-hdk-npu-driver_25.3.rc1_linux-x86-64.run")
    assert (standins.standin_filename("firmware", "7.8.0.2.212", "aarch64")
            == "Atlas-A3-hdk-npu-firmware_7.8.0.2.212.run")
    for bad in (("cann", "8.5.0", "x86_64"), ("driver", "25.3 rc1", "x86_64"),
                ("driver", "25.3.rc1", "riscv64"), ("driver", "$(reboot)", "x86_64")):
        with pytest.raises(ValueError):
            standins.standin_filename(*bad)


def test_build_is_byte_identical_so_rebuilding_is_not_a_change(pkgs, tmp_path) -> None:
    again = standins.build_driver_run(NEW_DRIVER, tmp_path)
    assert again.name == pkgs["new"].name
    assert again.read_bytes() == pkgs["new"].read_bytes()
    assert os.access(again, os.X_OK)
    assert "STAND-IN" in "".join(again.read_text().splitlines(True)[:4])


def test_the_header_template_is_filled_in(pkgs) -> None:
    """files/hdk-standin/run-header.sh has @NAME@-style placeholders; none is left."""
    text = pkgs["new"].read_text()
    skip = int(re.search(r"^A3RL_SKIP=(\d+)$", text, re.M).group(1))
    header = "".join(text.splitlines(True)[:skip - 1])
    assert not re.findall(r"@[A-Z0-9]+@", header)
    assert f"A3RL_VERSION='{NEW_DRIVER}'" in header and pkgs["new"].name in header


def test_check_verifies_the_payload_checksum(pkgs, root, tmp_path) -> None:
    ok = run([pkgs["new"], "--check"], root)
    assert ok.returncode == 0
    assert "SHA256 checksums are OK. All good." in ok.stdout

    tampered = tmp_path / pkgs["new"].name
    lines = pkgs["new"].read_text().splitlines(True)
    lines[-2] = ("B" if lines[-2][0] != "B" else "C") + lines[-2][1:]  # one payload byte
    tampered.write_text("".join(lines))
    tampered.chmod(0o755)
    bad = run([tampered, "--check"], root)
    assert bad.returncode != 0
    assert "Error in SHA256 checksums" in bad.stderr
    # Nothing runs from a damaged archive.
    assert run([tampered, "--full", "--install-for-all", "--quiet"], root).returncode != 0
    assert not (root / DRIVER_INFO).exists()


@pytest.mark.parametrize("args", [["--check"], ["--full", "--install-for-all", "--quiet"]])
def test_display_without_a_tty_needs_nox11_like_makeself(pkgs, root, args) -> None:
    # No tty here (stdin is /dev/null): with DISPLAY set, makeself tries an xterm.
    bare = run([pkgs["new"], *args], root, display=":0")
    assert bare.returncode == 1
    assert "--nox11" in bare.stderr and "xterm" in bare.stderr
    assert not (root / DRIVER_INFO).exists()
    nox11 = run([pkgs["new"], "--nox11", *args], root, display=":0")
    assert nox11.returncode == (0 if args == ["--check"] else 2), nox11.stdout + nox11.stderr


# --- driver ---------------------------------------------------------------------------

def test_driver_full_installs_on_a_clean_root(pkgs, root) -> None:
    proc = install_driver(pkgs["new"], root)
    assert "Driver package installed successfully!" in proc.stdout
    assert "Reboot needed for installation/upgrade to take effect!" in proc.stdout

    info = kv(root / DRIVER_INFO)
    assert info["Version"] == NEW_DRIVER and info["package_version"] == NEW_DRIVER
    assert info["compatible_version_fw"] == "[7.0.0,8.9.9]"
    assert kv(root / "etc/ascend_install.info") == {
        "UserName": "HwHiAiUser", "UserGroup": "HwHiAiUser", "Driver_Install_Type": "full",
        "Driver_Install_Path_Param": "/usr/local/Ascend", "Driver_Install_For_All": "yes",
        "Driver_Install_Mode": "normal"}
    sbin = root / "usr/local/sbin/npu-smi"
    assert os.access(sbin, os.X_OK)
    assert (root / "usr/local/bin/npu-smi").resolve() == sbin.resolve()
    assert (root / "usr/local/Ascend/driver/lib64").is_dir()
    assert (root / "usr/local/dcmi").is_dir()
    assert os.access(root / "usr/local/Ascend/driver/script/uninstall.sh", os.X_OK)
    assert "driver 25.3.rc1 installed" in (root / "var/lib/a3rl-sim/reboot-required").read_text()
    oplog = (root / "var/log/ascend_seclog/operation.log").read_text()
    assert "Install SUGGESTION root" in oplog and "success install_type=full" in oplog
    assert "Start time" in (root / "var/log/ascend_seclog/ascend_install.log").read_text()


def test_driver_hot_reset_knob_gives_exit_0(pkgs, root) -> None:
    (root / "etc/a3rl-sim").mkdir(parents=True)
    (root / "etc/a3rl-sim/driver-hotreset").write_text("success\n")
    proc = run([pkgs["new"], "--full", "--quiet"], root)
    assert proc.returncode == 0, proc.stdout
    assert "takes effect immediately" in proc.stdout
    assert not (root / "var/lib/a3rl-sim/reboot-required").exists()


@pytest.mark.parametrize("extra", [[], ["--install-for-all"]])
def test_driver_needs_the_run_user_even_for_all(pkgs, root, extra) -> None:
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    proc = run([pkgs["new"], "--full", "--quiet", *extra], root)
    assert proc.returncode == 1
    assert "HwHiAiUser not exists! Please add HwHiAiUser" in proc.stdout
    assert not (root / DRIVER_INFO).exists()


def test_driver_run_user_can_be_chosen(pkgs, root) -> None:
    (root / "etc/passwd").write_text("ops:x:2000:2000::/home/ops:/bin/bash\n")
    (root / "etc/group").write_text("ops:x:2000:\n")
    assert run([pkgs["new"], "--full", "--quiet", "--install-username=ops"],
               root).returncode == 1  # both or neither
    proc = run([pkgs["new"], "--full", "--quiet", "--install-username=ops",
                "--install-usergroup=ops"], root)
    assert proc.returncode == 2, proc.stdout
    assert kv(root / "etc/ascend_install.info")["UserName"] == "ops"


def test_full_on_installed_driver_asks_and_never_blocks(pkgs, root) -> None:
    install_driver(pkgs["old"], root)
    prompt = (f"has been installed on the path /usr/local/Ascend, the version is {OLD_DRIVER}, "
              f"and the version of this package is {NEW_DRIVER},do you want to continue?")

    no_answer = run([pkgs["new"], "--full"], root)  # stdin at EOF
    assert no_answer.returncode == 1
    assert prompt in no_answer.stdout
    assert kv(root / DRIVER_INFO)["Version"] == OLD_DRIVER

    declined = run([pkgs["new"], "--full"], root, stdin="n\n")
    assert declined.returncode == 0 and "Stop installation!" in declined.stdout
    assert kv(root / DRIVER_INFO)["Version"] == OLD_DRIVER

    accepted = run([pkgs["new"], "--full"], root, stdin="maybe\ny\n")
    assert accepted.returncode == 2, accepted.stdout
    assert "input error, please input again!" in accepted.stdout
    assert kv(root / DRIVER_INFO)["Version"] == NEW_DRIVER


def test_full_quiet_overwrites_an_installed_driver(pkgs, root) -> None:
    install_driver(pkgs["old"], root)
    proc = install_driver(pkgs["new"], root)
    assert f"base version is {OLD_DRIVER}." in proc.stdout
    assert "do you want to continue" not in proc.stdout
    assert kv(root / DRIVER_INFO)["Version"] == NEW_DRIVER


def test_upgrade_changes_the_version_and_keeps_settings(pkgs, root) -> None:
    install_driver(pkgs["old"], root)
    proc = run([pkgs["new"], "--upgrade", "--quiet"], root)
    assert proc.returncode == 2, proc.stdout
    assert "Driver package upgraded successfully!" in proc.stdout
    assert kv(root / DRIVER_INFO)["Version"] == NEW_DRIVER
    assert kv(root / "etc/ascend_install.info")["Driver_Install_For_All"] == "yes"
    assert "Upgrade MINOR root" in (root / "var/log/ascend_seclog/operation.log").read_text()
    assert smi(root, "-v").stdout == f"  npu-smi version: {NEW_DRIVER}\n"


def test_upgrade_to_the_same_version_reinstalls(pkgs, root) -> None:
    install_driver(pkgs["new"], root)
    (root / "usr/local/Ascend/driver/lib64/A3RL-STANDIN").unlink()
    proc = run([pkgs["new"], "--upgrade", "--quiet"], root)
    assert proc.returncode == 2 and "upgraded successfully" in proc.stdout
    assert (root / "usr/local/Ascend/driver/lib64/A3RL-STANDIN").exists()


def test_upgrade_on_a_clean_root_is_a_first_install(pkgs, root) -> None:
    proc = run([pkgs["new"], "--upgrade", "--quiet"], root)
    assert proc.returncode == 2 and "Driver package installed successfully!" in proc.stdout
    assert kv(root / "etc/ascend_install.info")["Driver_Install_For_All"] == "no"


def test_version_option(pkgs, root) -> None:
    proc = run([pkgs["new"], "--version"], root)
    assert proc.returncode == 0
    assert f"[INFO]driver version :{NEW_DRIVER}" in proc.stdout
    assert not (root / DRIVER_INFO).exists()


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "Unrecognized parameters: --bogus."),
    (["--full", "--bogus"], "Unrecognized parameters: --bogus."),
    ([], "Unrecognized parameters."),
    (["--install-for-all"], "param need used with full/run/docker/upgrade/devel."),
    (["--full", "--upgrade"], "param need used with full/run/docker/upgrade/devel."),
    (["--full", "--run"], "only support one type"),
    (["--version", "--full"], "can't use with other parameters."),
    (["--upgrade", "--install-path=/opt/ascend"], "install-path param need used with"),
    (["--full", "--install-path=relative/dir"], "is invalid according to regular-expression"),
    (["--full", "--install-path=/no/such/parent/dir"], "only support create one level"),
])
def test_driver_rejects_bad_options(pkgs, root, args, message) -> None:
    proc = run([pkgs["new"], *args], root)
    assert proc.returncode == 1
    assert message in proc.stdout
    assert not (root / DRIVER_INFO).exists()


def test_install_path_is_recorded_and_used_by_npu_smi(pkgs, root) -> None:
    (root / "opt").mkdir()
    proc = run([pkgs["new"], "--full", "--quiet", "--install-path=/opt/ascend"], root)
    assert proc.returncode == 2, proc.stdout
    assert kv(root / "opt/ascend/driver/version.info")["Version"] == NEW_DRIVER
    assert kv(root / "etc/ascend_install.info")["Driver_Install_Path_Param"] == "/opt/ascend"
    assert f"Version: {NEW_DRIVER}" in smi(root, "info").stdout


def test_uninstall_removes_the_driver(pkgs, root) -> None:
    missing = run([pkgs["new"], "--uninstall"], root)
    assert missing.returncode == 1 and "Driver package is not installed" in missing.stdout

    install_driver(pkgs["new"], root)
    proc = run([pkgs["new"], "--uninstall"], root)
    assert proc.returncode == 0, proc.stdout
    assert "Driver package uninstalled successfully!" in proc.stdout
    assert not (root / "usr/local/Ascend").exists()
    assert not (root / "usr/local/sbin/npu-smi").exists()
    assert not (root / "usr/local/bin/npu-smi").is_symlink()
    assert not (root / "etc/ascend_install.info").exists()


def test_installed_uninstall_script(pkgs, root) -> None:
    install_driver(pkgs["new"], root)
    proc = run(["bash", root / "usr/local/Ascend/driver/script/uninstall.sh", "--quiet"], root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / DRIVER_INFO).exists()


# --- firmware -------------------------------------------------------------------------

def test_firmware_needs_the_driver(pkgs, root) -> None:
    proc = run([pkgs["fw_new"], "--full", "--quiet"], root)
    assert proc.returncode == 1 and "install the driver package first" in proc.stdout
    assert not (root / FW_INFO).exists()


def test_firmware_full_then_upgrade(pkgs, root) -> None:
    install_driver(pkgs["new"], root)
    marker = root / "var/lib/a3rl-sim/reboot-required"
    marker.unlink()

    proc = run([pkgs["fw_old"], "--full"], root)
    assert proc.returncode == 0, proc.stdout
    assert "The firmware of [16] chips are successfully upgraded." in proc.stdout
    assert ("Firmware package installed successfully! Reboot now or after driver installation "
            "for the installation/upgrade to take effect.") in proc.stdout
    fw = kv(root / FW_INFO)
    assert fw["Version"] == OLD_FW and fw["package_version"] == standins.DEFAULT_DRIVER_VERSION
    assert kv(root / "etc/ascend_install.info")["Firmware_Install_Path_Param"] == (
        "/usr/local/Ascend")
    assert marker.read_text().startswith(f"firmware {OLD_FW} installed")

    same = run([pkgs["fw_old"], "--upgrade", "--quiet"], root)
    assert same.returncode == 0 and "no upgrade is needed" in same.stdout

    new = run([pkgs["fw_new"], "--upgrade", "--quiet"], root)
    assert new.returncode == 0, new.stdout
    assert f"base version is {OLD_FW}." in new.stdout
    assert "Firmware package upgraded successfully!" in new.stdout
    assert kv(root / FW_INFO)["Version"] == NEW_FW
    fw_lines = [ln for ln in marker.read_text().splitlines() if ln.startswith("firmware ")]
    assert len(fw_lines) == 1 and fw_lines[0].startswith(f"firmware {NEW_FW} upgraded")
    assert run([pkgs["fw_new"], "--install-path=/opt"], root).returncode == 1

    gone = run([pkgs["fw_new"], "--uninstall"], root)
    assert gone.returncode == 0 and "Uninstallation takes effect immediately." in gone.stdout
    assert not (root / FW_INFO).exists()
    assert kv(root / DRIVER_INFO)["Version"] == NEW_DRIVER  # the driver stays


# --- npu-smi --------------------------------------------------------------------------

def chip_rows(text: str) -> list[tuple[int, int, int, str]]:
    """(NPU, Chip, Phy-ID, Health) for each die in ``npu-smi info``."""
    lines = text.splitlines()
    rows = []
    for first, second in zip(lines, lines[1:], strict=False):
        top = re.match(r"\| (\d+)\s+Ascend910\s+\| (\w+)\s+\|", first)
        bottom = re.match(r"\| (\d+)\s+(\d+)\s+\| 0000:", second)
        if top and bottom:
            rows.append((int(top[1]), int(bottom[1]), int(bottom[2]), top[2]))
    return rows


def test_npu_smi_shows_one_row_per_device_file(pkgs, root) -> None:
    install_driver(pkgs["new"], root)
    proc = smi(root, "info")
    assert proc.returncode == 0, proc.stderr
    rows = chip_rows(proc.stdout)
    assert rows == [(p // 2, p % 2, p, "OK") for p in range(16)]  # A3: 8 cards x 2 dies
    assert proc.stdout.count("No running processes found in NPU") == 8
    assert {len(line) for line in proc.stdout.splitlines()} == {98}
    assert f"| npu-smi {NEW_DRIVER}" in proc.stdout

    (root / "dev/davinci15").unlink()
    rows = chip_rows(smi(root, "info").stdout)
    assert len(rows) == 15 and (7, 1, 15, "OK") not in rows and (7, 0, 14, "OK") in rows
    assert "\tTotal Count                    : 8\n" in smi(root, "info", "-l").stdout
    assert "Chip Count                     : 1" in smi(root, "info", "-l").stdout


def test_npu_smi_health_knob(pkgs, root) -> None:
    install_driver(pkgs["new"], root)
    knob = root / "etc/a3rl-sim/npu-health"
    knob.parent.mkdir(parents=True)
    knob.write_text("# <davinci-number> <Health>\n3 Critical\n\n5 Warning 80E01801  # hot\n")
    rows = {r[2]: r[3] for r in chip_rows(smi(root, "info").stdout)}
    assert rows[3] == "Critical" and rows[5] == "Warning"
    assert {p for p, h in rows.items() if h != "OK"} == {3, 5}

    chip = smi(root, "info", "-t", "health", "-i", "1", "-c", "1")  # davinci3
    assert chip.returncode == 0
    assert "\tHealth Status                  : Critical\n" in chip.stdout
    assert "Error Code                     : 80E01801" in smi(
        root, "info", "-t", "health", "-i", "2", "-c", "1").stdout
    card = smi(root, "info", "-t", "health", "-i", "1").stdout
    assert re.search(r"Chip ID\s+: 0\n\tHealth\s+: OK\n\n\tChip ID\s+: 1\n\tHealth\s+: Critical",
                     card)
    assert "Health Status                  : OK" in smi(
        root, "info", "-t", "health", "-i", "0", "-c", "0").stdout

    knob.write_text("3 Broken\n")  # a typo must not read as healthy
    assert smi(root, "info").returncode != 0


@pytest.mark.parametrize("args", [["frobnicate"], ["info", "--bogus"], ["info", "-t", "board"],
                                  ["info", "-t", "health"], ["info", "-t", "health", "-i", "x"],
                                  ["info", "-t", "health", "-i", "9"], []])
def test_npu_smi_rejects_unknown_options(pkgs, root, args) -> None:
    install_driver(pkgs["new"], root)
    proc = smi(root, *args)
    assert proc.returncode != 0
    assert proc.stdout == "" and "Usage: npu-smi" in proc.stderr


def test_npu_smi_without_driver_or_devices_fails_like_the_real_one(root) -> None:
    tool = standins.NPU_SMI
    assert run([tool, "info"], root).stdout == "dcmi module initialize failed. ret is -8005\n"
    (root / DRIVER_INFO).parent.mkdir(parents=True)
    (root / DRIVER_INFO).write_text(f"Version={NEW_DRIVER}\n")
    with_devices(root)
    assert run([tool, "info", "-l"], root).returncode == 0
    for dev in (root / "dev").glob("davinci*"):
        dev.unlink()
    assert run([tool, "info"], root).returncode != 0


def test_npu_smi_exact_output_for_two_dies(root) -> None:
    for dev in with_devices(root).joinpath("dev").glob("davinci[0-9]*"):
        if dev.name not in ("davinci0", "davinci1"):
            dev.unlink()
    (root / DRIVER_INFO).parent.mkdir(parents=True)
    (root / DRIVER_INFO).write_text(f"Version={NEW_DRIVER}\n")
    assert run([standins.NPU_SMI, "info"], root).stdout == TWO_DIES


TWO_DIES = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 25.3.rc1                 Version: 25.3.rc1                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 165.0       36                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3180 / 65536         |
+------------------------------------------------------------------------------------------------+
| 0     Ascend910           | OK            | -           36                0    / 0             |
| 1     1                   | 0000:9F:00.0  | 0           0    / 0          2896 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
+===========================+===============+====================================================+
"""


def test_driver_reports_a_patch_level_version(root, tmp_path) -> None:
    # A3 guides ship HDK 25.3.RC1.2; its version.info reads Version=25.3.rc1.2.
    (tmp_path / "patch").mkdir()
    pkg = standins.build_driver_run("25.3.rc1.2", tmp_path / "patch")
    assert pkg.name == "Atlas-A3-hdk-npu-driver_25.3.rc1.2_linux-x86-64.run"
    install_driver(pkg, root)
    assert kv(root / DRIVER_INFO)["Version"] == "25.3.rc1.2"
    assert "driver version :25.3.rc1.2" in run([pkg, "--version"], root).stdout


# --- device nodes: none before the driver; in use, the driver refuses ------------------

BOOT_DEVICES = REPO / "tools/a3rl/sim/files/rootfs/usr/local/lib/a3rl-sim/standin-devices"


def devices(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "dev").iterdir())


def test_driver_makes_the_device_nodes_a_new_node_lacks(pkgs, root) -> None:
    assert devices(root) == []
    assert not (root / "usr/local/sbin/npu-smi").exists()
    (root / "etc/a3rl-sim").mkdir()
    (root / "etc/a3rl-sim/node.conf").write_text("NPUS=4\n")
    install_driver(pkgs["new"], root)
    assert devices(root) == sorted([f"davinci{i}" for i in range(4)]
                                   + ["davinci_manager", "devmm_svm", "hisi_hdc"])
    assert (root / "usr/local/sbin/npu-smi").exists()


def test_boot_makes_the_devices_only_where_the_driver_is_installed(pkgs, root) -> None:
    boot = run([BOOT_DEVICES], root)
    assert boot.returncode == 0 and "no Ascend driver installed" in boot.stdout
    assert devices(root) == []
    install_driver(pkgs["new"], root, "--install-path=/opt")
    for dev in (root / "dev").iterdir():  # a reboot: the device nodes are gone ...
        dev.unlink()
    assert run([BOOT_DEVICES], root).returncode == 0
    assert devices(root) == sorted(DEVICES)  # ... and the installed driver makes them again


@pytest.fixture
def holder(root: Path):
    """A process with /dev/davinci3 open, as a training process has on a real node."""
    def hold(name: str = "davinci3") -> subprocess.Popen:
        proc = subprocess.Popen(["sh", "-c", f"exec 3<'{root}/dev/{name}'; echo held; sleep 60"],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        started.append(proc)
        return proc
    started: list[subprocess.Popen] = []
    yield hold
    for proc in started:
        proc.kill()
        proc.wait()


OCCUPIED = ("[ERROR]The davinci nodes are occupied by some processes, please stop processes "
            "and install or uninstall again, details in : "
            "/var/log/ascend_seclog/ascend_install.log")


@pytest.mark.parametrize("args", [["--upgrade", "--quiet"], ["--full", "--quiet"],
                                  ["--uninstall"]])
def test_driver_refuses_while_a_process_holds_a_device(pkgs, root, holder, args) -> None:
    install_driver(pkgs["old"], root)
    proc = holder()
    refused = run([pkgs["new"], *args], root)
    assert refused.returncode == 1
    assert OCCUPIED in refused.stdout
    assert "add the force parameter" in refused.stdout
    log = (root / "var/log/ascend_seclog/ascend_install.log").read_text()
    assert f"[WARNING]NPU device files have user process: {proc.pid}" in log
    assert kv(root / DRIVER_INFO)["Version"] == OLD_DRIVER  # nothing was replaced
    assert "failed" in (root / "var/log/ascend_seclog/operation.log").read_text().splitlines()[-1]


def test_driver_goes_on_when_forced_or_when_nothing_is_installed(pkgs, root, holder) -> None:
    with_devices(root)
    holder()
    install_driver(pkgs["old"], root)  # a first install replaces nothing: not checked
    forced = run([pkgs["new"], "--upgrade", "--quiet", "--force"], root)
    assert forced.returncode == 2, forced.stdout
    assert kv(root / DRIVER_INFO)["Version"] == NEW_DRIVER


def test_driver_refuses_while_a_running_container_has_the_devices(pkgs, root, tmp_path) -> None:
    """The vendor's checkUserDocker: `docker inspect` of the running containers names a
    management device (a `docker` stand-in on PATH answers like the engine)."""
    install_driver(pkgs["old"], root)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(
        "#!/bin/sh\ncase \"$1\" in\n  ps) echo 0123abcd ;;\n"
        "  inspect) echo '[{\"HostConfig\": {\"Devices\": [{\"PathOnHost\": "
        "\"/dev/davinci_manager\"}]}}]' ;;\nesac\n")
    (bin_dir / "docker").chmod(0o755)
    env_path = f"{bin_dir}:{os.environ['PATH']}"
    proc = subprocess.run([str(pkgs["new"]), "--upgrade", "--quiet"], text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=60,
                          env={**os.environ, "PATH": env_path, "A3RL_STANDIN_ROOT": str(root)})
    assert proc.returncode == 1 and OCCUPIED in ANSI.sub("", proc.stdout)
    log = (root / "var/log/ascend_seclog/ascend_install.log").read_text()
    assert "[WARNING]/dev/davinci_manager has used by docker" in log
    assert kv(root / DRIVER_INFO)["Version"] == OLD_DRIVER
