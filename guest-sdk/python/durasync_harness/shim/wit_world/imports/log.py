# The harness twin of the `log` bindings componentize-py generates: the same
# names; messages go to `durasync harness` (the run's log budget, escaping)
# and are read back with Harness.logs().
"""
Messages for the operator. The host forwards them to its log with the
plugin's name, and caps their volume per run.
"""
from enum import Enum

import durasync_harness


class Level(Enum):
    """
    How important a message is.
    """
    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3


def log(level: Level, message: str) -> None:
    """
    Record one message.
    """
    durasync_harness.current().call("log", level=level.name.lower(), message=message)
