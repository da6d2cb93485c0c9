"""The browser front end, shared by ``serve``'s dashboard (:mod:`live.dashboard`) and
``shockwave report`` (:mod:`replay.report`): plain scripts and a style sheet, no build step and
no third-party code. ``views.js`` draws (job table, cluster, timeline, market reasons, ρ CDF)
from plain data; ``dashboard.js`` feeds it from the live API, ``report.js`` from a replay's
results embedded in the report."""

from __future__ import annotations

from importlib import resources

#: file name -> content type, the only files served under ``/ui/``
ASSETS = {
    "dashboard.html": "text/html",
    "dashboard.js": "text/javascript",
    "views.js": "text/javascript",
    "report.js": "text/javascript",
    "style.css": "text/css",
}


def asset(name: str) -> str:
    """The text of one front-end file.

    Raises:
        KeyError: ``name`` is not one of :data:`ASSETS`.
    """
    if name not in ASSETS:
        raise KeyError(name)
    return resources.files(__name__).joinpath("static", name).read_text(encoding="utf-8")
