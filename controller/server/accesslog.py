"""The access log of ``cubicle serve``, without query strings.

uvicorn logs each request's path with its query. The viewer's event stream carries its page key in
the query (an ``EventSource`` cannot send a header), and a client may put anything there, so the
access log prints the path alone: a log is read by more people than the token is given to.
"""

from __future__ import annotations

import copy
import logging
from typing import Any


class WithoutQuery(logging.Filter):
    """Cut the query string from an access record's path (uvicorn's args: client, method, path, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str) and "?" in args[2]:
            path, _, _ = args[2].partition("?")
            record.args = (args[0], args[1], f"{path}?…", args[3], args[4])
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration, with ``WithoutQuery`` on its access log."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["without_query"] = {"()": WithoutQuery}
    config["handlers"]["access"]["filters"] = ["without_query"]
    return config
