"""Build the two images every simulated cluster needs, the node image and the CANN image
stand-in, before anything else is installed.

``make test`` starts this with the machine's own Python (``python -m a3rl.sim.base_images``,
``PYTHONPATH=tools``) before it creates the venv, so it imports only the standard library
(``tests/unit/test_base_images.py`` checks that). On a fresh machine the two builds are the
first thing every worker's cluster waits for; started here, they run while the venv is
installed and lint runs, much of it waiting on the network and the disk.

Each build holds its lock and is content-addressed, as when ``a3rl sim up`` builds it: a
worker that needs an image meanwhile waits for it, and an image that exists is reused. A
failure here is only reported: the first ``sim up`` then builds again and fails with its
own message.
"""

from __future__ import annotations

import sys
import time

from a3rl.sim import cann, image, podman


def main() -> int:
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"{time.monotonic() - t0:7.1f} {msg}", flush=True)

    problem = podman.available()
    if problem:
        say(f"not built: {problem}")
        return 0
    try:
        archive = cann.ensure_archive(image.ensure_image(image.ImageSpec(), say), say)
    except Exception as e:  # noqa: BLE001 - reported; the first `sim up` builds again
        say(f"FAILED: {e}")
        return 1
    say(f"done: {archive.ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
