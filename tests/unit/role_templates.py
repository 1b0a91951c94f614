"""Render a role's template as the unit tests run it: plain Jinja with stand-ins for the
few Ansible filters the templates use (``comment``, ``quote``, ``dirname``), and
StrictUndefined, so a variable a template gains later fails the test instead of rendering
empty."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import jinja2

ROOT = Path(__file__).resolve().parents[2]


def render(role: str, template: str, **values: object) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "roles" / role / "templates"),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters.update(comment=lambda s: f"# {s}", quote=lambda s: shlex.quote(str(s)),
                       dirname=os.path.dirname)
    return env.get_template(template).render(values)
