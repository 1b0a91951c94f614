"""Build the simulated node image, once per content.

The image is debootstrapped from Debian packages and pinned PyPI wheels; its tag is a
hash of everything that goes into it (suite, package list, the files baked in, the
wheel pins, this builder's version), so a second ``sim up`` reuses it and any change to
those inputs builds a new one. The build happens in a scratch folder under ``.cache/``
and leaves nothing behind.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from a3rl.paths import cache_dir
from a3rl.sim import podman

HERE = Path(__file__).resolve().parent
FILES = HERE / "files" / "rootfs"
NODE_REQUIREMENTS = HERE / "node-requirements.txt"
# Bump when the build steps below change in a way the inputs do not show.
BUILDER_VERSION = "3"
IMAGE_REPO = "localhost/a3rl-sim-node"
RAY_VENV = "/opt/a3rl/ray"

# What a real Debian/Ubuntu A3 node has that matters to the roles: systemd, sshd,
# python3 for Ansible, iproute2 for NIC facts. `netavark` must be named or debootstrap
# fails on the virtual `container-network-stack` (sim-notes).
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-venv",
    "python3-apt",
    "iproute2",
    "iputils-ping",
    "procps",
    "sudo",
    "ca-certificates",
    "curl",
    "iptables",
    # The framework staging: checkouts from git bundles, resumable transfers.
    "git",
    "rsync",
    "kmod",
    "gnupg",
    "lsb-release",
)

# Units that make a container node noisy or slow to boot and that a real node would not
# run in the simulator's role anyway.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
    "systemd-remount-fs.service",
    "getty@tty1.service",
)


def default_mirror() -> str:
    """The Debian mirror the host itself uses (deb822 or one-line sources)."""
    override = os.environ.get("A3RL_SIM_MIRROR")
    if override:
        return override
    candidates = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for src in candidates:
        if not src.is_file():
            continue
        for line in src.read_text().splitlines():
            line = line.strip()
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
            if line.startswith("deb ") and "debian" in line and "security" not in line:
                parts = [p for p in line.split() if p.startswith("http")]
                if parts:
                    return parts[0]
    return "http://deb.debian.org/debian"


@dataclass(frozen=True)
class ImageSpec:
    """Everything that decides the image's content."""

    suite: str = "bookworm"
    packages: tuple[str, ...] = PACKAGES
    masked_units: tuple[str, ...] = MASKED_UNITS
    files_root: Path = FILES
    requirements: Path = NODE_REQUIREMENTS
    mirror: str = field(default_factory=default_mirror, compare=False)

    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(f"builder={BUILDER_VERSION}\nsuite={self.suite}\n".encode())
        h.update(("packages=" + ",".join(sorted(self.packages)) + "\n").encode())
        h.update(("masked=" + ",".join(sorted(self.masked_units)) + "\n").encode())
        for path in sorted(p for p in self.files_root.rglob("*") if p.is_file()):
            rel = path.relative_to(self.files_root).as_posix()
            mode = path.stat().st_mode & 0o777
            h.update(f"file={rel}:{mode:o}\n".encode())
            h.update(path.read_bytes())
        h.update(self.requirements.read_bytes())
        return h.hexdigest()[:16]

    @property
    def ref(self) -> str:
        return f"{IMAGE_REPO}:{self.digest()}"


def _sh(cmd: list[str], log: Callable[[str], None], **kw) -> None:
    log("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"image build step failed: {' '.join(cmd)}\n{tail}")


def _download_wheels(spec: ImageSpec, log: Callable[[str], None]) -> Path:
    """Fetch the pinned wheels once into .cache (a later build of another spec reuses them)."""
    wheels = cache_dir() / "sim-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    _sh(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--only-binary=:all:", "--python-version", "3.11",
         "-d", str(wheels), "-r", str(spec.requirements)],
        log,
    )
    return wheels


def ensure_image(spec: ImageSpec | None = None, log: Callable[[str], None] = print) -> str:
    """Return the image reference, building it only when no image of this content exists."""
    spec = spec or ImageSpec()
    ref = spec.ref
    if podman.image_exists(ref):
        log(f"node image {ref} exists (content-addressed): reused")
        return ref
    lock_path = cache_dir() / "sim-image.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent `sim up` waits, then reuses
        if podman.image_exists(ref):
            return ref
        _build(spec, ref, log)
    return ref


def _build(spec: ImageSpec, ref: str, log: Callable[[str], None]) -> None:
    for tool in ("debootstrap", "chroot", "tar"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is missing: run `make host-deps`")
    wheels = _download_wheels(spec, log)
    scratch = Path(tempfile.mkdtemp(prefix="sim-image-", dir=cache_dir()))
    rootfs = scratch / "rootfs"
    try:
        log(f"building node image {ref} (debootstrap {spec.suite} from {spec.mirror})")
        _sh(
            ["debootstrap", "--variant=minbase", "--include=" + ",".join(spec.packages),
             spec.suite, str(rootfs), spec.mirror],
            log,
        )
        shutil.copytree(spec.files_root, rootfs, dirs_exist_ok=True, symlinks=True)
        # Each node generates its own host keys at boot; the simulator records them.
        for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        (rootfs / "etc/machine-id").write_text("")
        (rootfs / "etc/hostname").write_text("")
        chroot_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        _sh(["chroot", str(rootfs), "systemctl", "enable", "a3rl-sim-devices.service"],
            log, env=chroot_env)
        _sh(["chroot", str(rootfs), "systemctl", "mask", *spec.masked_units], log, env=chroot_env)
        # Ray from pinned wheels, offline inside the chroot.
        stage = rootfs / "tmp/wheels"
        shutil.copytree(wheels, stage)
        shutil.copy(spec.requirements, stage / "requirements.txt")
        _sh(["chroot", str(rootfs), "python3", "-m", "venv", RAY_VENV], log, env=chroot_env)
        _sh(
            ["chroot", str(rootfs), f"{RAY_VENV}/bin/pip", "install", "--quiet", "--no-index",
             "--no-cache-dir", "--find-links", "/tmp/wheels", "-r", "/tmp/wheels/requirements.txt"],
            log, env=chroot_env,
        )
        shutil.rmtree(stage)
        # A record of exactly what went in, for anyone comparing two builds.
        manifest = subprocess.run(
            ["chroot", str(rootfs), "dpkg-query", "-W", "-f", "${Package}=${Version}\n"],
            capture_output=True, text=True, env=chroot_env, check=True,
        ).stdout
        record = rootfs / "usr/local/lib/a3rl-sim/image-manifest.txt"
        record.write_text(
            f"# a3rl simulated node image {ref}\n# debian packages\n{manifest}"
            f"# python wheels in {RAY_VENV}\n{spec.requirements.read_text()}"
        )
        for junk in ("var/lib/apt/lists", "var/cache/apt/archives"):
            for p in (rootfs / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        log("importing the root filesystem into podman")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
                               stdout=subprocess.PIPE)
        imp = subprocess.run(
            ["podman", "import",
             "--change", 'CMD ["/sbin/init"]',
             "--change", "STOPSIGNAL=SIGRTMIN+3",
             "--change", f"LABEL a3rl.sim.image={spec.digest()}",
             "-", ref],
            stdin=tar.stdout, capture_output=True, text=True, env=podman.env(),
        )
        assert tar.stdout is not None
        tar.stdout.close()  # so tar gets SIGPIPE, not a hang, if the import failed
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise RuntimeError(f"podman import failed: {imp.stderr.strip()}")
        log(f"node image {ref} built")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
