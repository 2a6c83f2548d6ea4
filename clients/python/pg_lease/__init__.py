"""pg_lease clients for Python (psycopg2): a worker loop and a channel-rotation helper.

docs/clients/python.md shows a complete worker; docs/client-rules.md is what
the retries follow.  Install: pip install ./clients/python (pyproject.toml),
or the Debian package python3-pg-lease.  Logs to the "pg_lease" logger.
"""
from .channels import RotationResult, rotate_channel
from .session import Ambiguous, Fatal, Session, Unavailable
from .worker import (HANDED_OFF, LEASE_LOST, SHARD_END, SHARD_ENDED, WORKER_STOPPED,
                     Checkpoint, RecordProcessor, Worker)

__all__ = ["Worker", "RecordProcessor", "Checkpoint", "Session", "Ambiguous", "Unavailable", "Fatal",
           "rotate_channel", "RotationResult", "SHARD_END", "LEASE_LOST",
           "HANDED_OFF", "SHARD_ENDED", "WORKER_STOPPED"]
