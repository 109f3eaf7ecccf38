"""The one template engine of the HTML reports: Jinja2 with autoescape, templates in ``templates/``.

Why two environments: the run page (``run.html.j2``) keeps its lines; the session report and the indexes
are one line each, as they always were, so their templates are read without line breaks or indentation
(:class:`_Spaceless`) and print every value in ``html.escape``'s form (``&#x27;``, ``&quot;``).
"""

from __future__ import annotations

import html
import re
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, Template
from markupsafe import Markup


class _Spaceless(PackageLoader):
    """A template read with each line break and the next line's indentation removed: indented for people,
    one line on the page. A space a line break should keep is written before it."""

    def get_source(self, environment: Environment, template: str) -> tuple[str, str, Any]:
        source, filename, uptodate = super().get_source(environment, template)
        return re.sub(r"\n[ \t]*", "", source), filename, uptodate


def _escaped(value: Any) -> Markup:
    """A value as ``html.escape`` writes it, the form the pages had before their templates; autoescape then
    leaves this Markup as it is."""
    return value if isinstance(value, Markup) else Markup(html.escape(str(value), quote=True))


@cache
def environment(spaceless: bool = True) -> Environment:
    if not spaceless:
        return Environment(loader=PackageLoader("pytest_rexmle.report", "templates"), autoescape=True,
                           undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env = Environment(loader=_Spaceless("pytest_rexmle.report", "templates"), autoescape=True,
                      undefined=StrictUndefined, finalize=_escaped)
    env.filters["joined"] = lambda items, sep: sep.join(str(i) for i in items)  # |join would escape as markupsafe
    return env


def template(name: str) -> Template:
    return environment(not name.startswith("run.")).get_template(name)
