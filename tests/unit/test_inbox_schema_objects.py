"""ensure_schema skips its DDL when every object exists: the objects it checks are parsed from
the DDL itself, so each ``IF NOT EXISTS`` statement of the inbox and retry DDL must be in the
list (a new table, index or column left out would never be created on a running database)."""

from __future__ import annotations

import re

from casestream.consumer import inbox
from casestream.consumer.retries import RETRY_DDL


def test_every_if_not_exists_object_of_the_ddl_is_checked() -> None:
    ddl = inbox.INBOX_DDL + RETRY_DDL
    statements = re.findall(r"IF NOT EXISTS", ddl)
    assert len(inbox._RELATIONS) + len(inbox._COLUMNS) == len(statements)
    assert "consumer_inbox" in inbox._RELATIONS
    assert ("consumer_inbox", "payload_hash") in inbox._COLUMNS
