"""Compose a run's overrides with Hydra against verl's own config files, before submit.

A misspelled key otherwise fails the job minutes later, after Ray has placed it; here it
fails the play naming the key. Runs where verl's configs and Hydra are (in the training
container on the head, ``python3 - --json '{...}'`` on stdin) and prints one JSON line.
Hydra checks neither value types nor a ``+`` key that is new (it adds it): a3rl.planning.plan
checks the keys it generates; a user's ``+`` on a key the config has is refused here.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any


def compose(config_dir: str, config_name: str, overrides: list[str]) -> dict[str, Any]:
    """``{"ok": True}`` or ``{"ok": False, "key": <the key Hydra refused>, "error": ...}``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            hydra_compose(config_name=config_name, overrides=list(overrides))
    except Exception as e:  # Hydra raises several types; all mean "refused"
        text = f"{type(e).__name__}: {e}"
        cause = e.__cause__
        if cause is not None:
            text += f" ({type(cause).__name__}: {cause})"
        match = (re.search(r"Could not override '([^']+)'", text)
                 or re.search(r"Key '([^']+)' (?:is not in struct|not in)", text)
                 or re.search(r"An item is already at '([^']+)'", text))
        return {"ok": False, "key": match.group(1) if match else "",
                "exists": bool(match) and match.re.pattern.startswith("An item"),
                "error": text[:2000]}
    return {"ok": True}


def main(argv: list[str]) -> int:
    args = json.loads(argv[argv.index("--json") + 1])
    print(json.dumps(compose(args["config_dir"], args["config_name"], args["overrides"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
