"""Stand-in Ascend HDK ``.run`` packages (NPU driver, NPU firmware) for the simulator.

A simulated node has no NPU, so the vendor's packages cannot install there. The roles
must still be written against the vendor's real interface (file names, options, exit
codes, the files they leave behind), so these stand-ins reproduce that interface and
install placeholders plus the stand-in ``npu-smi`` and ``hccn_tool``. Every generated
file says it is a STAND-IN in its first lines. ``$A3RL_STANDIN_ROOT`` (empty on a node)
prefixes every path they read or write; it is a test hook so unit tests can use a
temporary root. The programs are files in ``files/hdk-standin/``: ``npu-smi``,
``hccn_tool``, the packages' ``install.sh`` and their makeself-style ``run-header.sh``;
this module packs them into ``.run`` archives.

What is taken from public material, and what is guessed
--------------------------------------------------------
Confirmed (Huawei docs, Huawei's own driver ``install.sh`` as published in 2025, public
install logs and Ascend's ascend-deployer):

* Names: HDK 25.3.RC1 for A3 ships ``Atlas-A3-hdk-npu-driver_25.3.rc1_linux-aarch64.run``
  / ``..._linux-x86-64.run`` and ``Atlas-A3-hdk-npu-firmware_7.8.0.2.212.run`` (the
  firmware has its own 7.x version and no arch). There is no public ``Ascend-hdk-910c-*``.
* makeself-style archives: ``--check`` prints ``Verifying archive integrity...  100%
  SHA256 checksums are OK. All good.``; a bad checksum aborts with exit 2 before anything
  runs; ``Uncompressing <LABEL>  100%``; ``--quiet``, ``--noexec --extract=<dir>``, ``--list``.
* makeself archives try to open an xterm when ``DISPLAY`` is set and there is no tty,
  unless ``--nox11`` is given (ascend-deployer always passes it). What happens next
  (which terminal, whether the install runs in it) is not modelled: the stand-in exits 1.
* Driver options and their rules: ``--full``/``--run``/``--upgrade`` (exactly one),
  ``--uninstall``, ``--version`` (``[INFO]driver version :<v>``), ``--quiet``,
  ``--install-for-all``, ``--install-path=`` (not with ``--upgrade``),
  ``--install-username=``/``--install-usergroup=`` (both, not with ``--upgrade``);
  ``version/uninstall/check`` alone; unknown options -> ``ERR_NO:0x0004 ... Unrecognized
  parameters``, exit 1; root only (0x0093).
* The run user (``HwHiAiUser:HwHiAiUser`` unless given or recorded) must exist in
  ``/etc/passwd`` and ``/etc/group`` for every install/upgrade, with or without
  ``--install-for-all`` (0x0091 / 0x0096); ``--install-for-all`` only widens permissions.
* ``--full`` on an installed driver is an overwrite install: it asks
  ``... has been installed on the path P, the version is X, and the version of this
  package is Y,do you want to continue?  [y/n]`` unless ``--quiet``, then reinstalls.
  It is NOT refused. ``--upgrade`` on a clean node installs (first-install path), and
  ``--upgrade`` to the same version reinstalls; both report success.
* Driver exit codes: 0 installed and hot reset done ("takes effect immediately"), 1
  failed, 2 installed but "Reboot needed for installation/upgrade to take effect!".
* Files: ``<path>/driver/version.info`` (keys below, from a public 25.3.rc1 file),
  ``/usr/local/sbin/npu-smi``, ``<path>/driver/tools/hccn_tool``,
  ``<path>/driver/script/uninstall.sh``,
  ``<path>/firmware/version.info``, ``/etc/ascend_install.info`` (``UserName``,
  ``UserGroup``, ``Driver_Install_Type``, ``Driver_Install_Path_Param``,
  ``Driver_Install_For_All``, ``Driver_Install_Mode``, ``Firmware_Install_Type``,
  ``Firmware_Install_Path_Param``), logs ``/var/log/ascend_seclog/ascend_install.log`` and
  ``operation.log``; the ``[Driver] [date] [INFO]...`` message texts.
* Firmware messages: ``base version is X.``, ``upgradePercentage: N%``, ``The firmware of
  [N] chips are successfully upgraded.``, ``Firmware package installed|upgraded
  successfully! Reboot now or after driver installation for the installation/upgrade to
  take effect.``, uninstall "takes effect immediately".

Guessed (no public source found; change here when one turns up):

* The firmware installer's rules: it needs an installed driver (documented order is
  driver first on a new node) and at least one ``/dev/davinciN``; ``--full`` on an
  installed firmware overwrites without asking; ``--upgrade`` to the installed version
  is a no-op with exit 0; ``--install-for-all`` is accepted and ignored; exit code 0.
* The firmware's ``compatible_version_drv`` value and the A3 firmware archive label.
* Driver payload beyond ``version.info``: ``lib64/`` and ``/usr/local/dcmi`` are empty
  placeholders; ``/usr/local/bin/npu-smi`` is a link to ``../sbin/npu-smi``.
* ``--help``/``--info`` texts; relative ``--install-path`` values are refused here.

Stand-in only (no real counterpart): ``ROOT/var/lib/a3rl-sim/reboot-required`` (one line
per package kind whose change waits for a reboot; the simulator's reboot clears it) and
the knob ``ROOT/etc/a3rl-sim/driver-hotreset`` (``success`` -> exit 0 instead of 2).
Without ``--quiet``, where the real installer would wait forever on its y/n question the
stand-in reads one answer from stdin and fails (exit 1) on end of input.
Not simulated: ``--devel``, ``--docker``, ``--vnpu_*``, ``--tar``, CRL/ version
compatibility checks, DKMS, file ownership by the run user, the package's CPU arch.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import os
import re
import shlex
import tarfile
from pathlib import Path
from typing import Literal

Kind = Literal["driver", "firmware"]

# The stand-in programs this module packs, as files.
FILES = Path(__file__).resolve().parent / "files" / "hdk-standin"
NPU_SMI = FILES / "npu-smi"
# Installed by the driver at <install path>/driver/tools/hccn_tool, as the vendor's is.
HCCN_TOOL = FILES / "hccn_tool"
# The installer inside the payload: one script for both kinds, driven by package.info.
INSTALLER = (FILES / "install.sh").read_text(encoding="utf-8")
# The archive's shell header (makeself's role). _build fills in @KIND@, @NAME@, @LABEL@,
# @VERSION@, @SHA256@ and @SKIP@ (the line the payload starts on).
HEADER = (FILES / "run-header.sh").read_text(encoding="utf-8")

# HDK 25.3.RC1, the release the recipe's CANN 8.5.0 image pairs with on A3.
DEFAULT_DRIVER_VERSION = "25.3.rc1"
DEFAULT_FIRMWARE_VERSION = "7.8.0.2.212"

_ARCH = {"x86_64": "x86-64", "x86-64": "x86-64", "amd64": "x86-64",
         "aarch64": "aarch64", "arm64": "aarch64"}
_LABEL = {"driver": "ASCEND DRIVER RUN PACKAGE",
          "firmware": "ATLAS-A3-HDK-NPU FIRMWARE RUN PACKAGE"}
# Versions end up in file names and shell assignments: digits, letters, dots only.
_VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.]*")


def _check_version(version: str) -> str:
    if not _VERSION_RE.fullmatch(version):
        raise ValueError(f"not a package version: {version!r}")
    return version


def standin_filename(kind: Kind, version: str, arch: str = "x86_64") -> str:
    """The vendor's file name for this package, so roles can match it by pattern.

    >>> standin_filename("driver", "25.3.rc1", "aarch64")
    'Atlas-A3-hdk-npu-driver_25.3.rc1_linux-aarch64.run'
    >>> standin_filename("firmware", "7.8.0.2.212")
    'Atlas-A3-hdk-npu-firmware_7.8.0.2.212.run'
    """
    _check_version(version)
    if arch not in _ARCH:
        raise ValueError(f"unknown arch {arch!r}; expected one of {sorted(_ARCH)}")
    if kind == "driver":
        return f"Atlas-A3-hdk-npu-driver_{version}_linux-{_ARCH[arch]}.run"
    if kind == "firmware":  # firmware runs on the NPU: the vendor's name has no host arch
        return f"Atlas-A3-hdk-npu-firmware_{version}.run"
    raise ValueError(f"unknown package kind {kind!r}")


def driver_version_info(version: str) -> str:
    """``driver/version.info``; all keys but the versions are a public 25.3.rc1 file's."""
    return (f"Version={version}\n"
            "ascendhal_version=7.35.23\naicpu_version=1.0\ntdt_version=1.0\n"
            "log_version=1.0\nprof_version=2.0\ndvppkernels_version=1.1\ntsfw_version=1.0\n"
            "Innerversion=V100R001C23SPC002B212\n"
            "compatible_version=[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C22],"
            "[V100R001C23]\n"
            "compatible_version_fw=[7.0.0,8.9.9]\n"
            f"package_version={version}\n")


def firmware_version_info(version: str, hdk_version: str = DEFAULT_DRIVER_VERSION) -> str:
    """``firmware/version.info``: keys as published; the compatibility range is a guess."""
    return (f"Version={version}\nfirmware_version=1.0\npackage_version={hdk_version}\n"
            "compatible_version_drv=[23.0.0,23.0.0.],[24.0,24.0.],[25.0,25.0.]\n")


def build_driver_run(version: str, out: Path, arch: str = "x86_64") -> Path:
    """Write the stand-in driver package; ``out`` is a folder (vendor name) or a file."""
    files = {"version.info": (driver_version_info(version).encode(), 0o444),
             "npu-smi": (NPU_SMI.read_bytes(), 0o755),
             "hccn_tool": (HCCN_TOOL.read_bytes(), 0o755)}
    return _build("driver", version, arch, Path(out), files)


def build_firmware_run(version: str, out: Path, arch: str = "x86_64",
                       hdk_version: str = DEFAULT_DRIVER_VERSION) -> Path:
    """Write the stand-in firmware package (``arch`` is recorded, the name has none)."""
    files = {"version.info": (firmware_version_info(version, _check_version(hdk_version))
                              .encode(), 0o444)}
    return _build("firmware", version, arch, Path(out), files)


def _build(kind: Kind, version: str, arch: str, out: Path,
           files: dict[str, tuple[bytes, int]]) -> Path:
    name = standin_filename(kind, version, arch)
    target = out / name if out.is_dir() else out
    package_info = "".join(f"{k}={shlex.quote(v)}\n" for k, v in (
        ("PKG_KIND", kind), ("PKG_VERSION", version), ("PKG_ARCH", _ARCH[arch]),
        ("PKG_FILE", name)))
    members = {"install.sh": (INSTALLER.encode(), 0o755),
               "package.info": (package_info.encode(), 0o644), **files}
    payload = base64.encodebytes(_targz(members))
    head = HEADER
    for key, value in (("KIND", kind), ("NAME", name), ("LABEL", _LABEL[kind]),
                       ("VERSION", version), ("SHA256", hashlib.sha256(payload).hexdigest())):
        head = head.replace(f"@{key}@", value)
    head = head.replace("@SKIP@", str(head.count("\n") + 1))
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(head.encode() + payload)
    tmp.chmod(0o755)
    os.replace(tmp, target)
    return target


def _targz(members: dict[str, tuple[bytes, int]]) -> bytes:
    """Byte-identical output for identical input, so re-building never looks changed."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for member, (data, mode) in sorted(members.items()):
            info = tarfile.TarInfo(member)
            info.size, info.mode, info.mtime, info.uname, info.gname = (
                len(data), mode, 0, "root", "root")
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)


def main(argv: list[str] | None = None) -> int:
    """``python -m a3rl.sim.standins OUTDIR``: write the driver and firmware stand-ins."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("out", type=Path)
    p.add_argument("--driver-version", default=DEFAULT_DRIVER_VERSION)
    p.add_argument("--firmware-version", default=DEFAULT_FIRMWARE_VERSION)
    p.add_argument("--arch", default="x86_64", choices=sorted(_ARCH))
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    for path in (build_driver_run(a.driver_version, a.out, a.arch),
                 build_firmware_run(a.firmware_version, a.out, a.arch,
                                    hdk_version=a.driver_version)):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
