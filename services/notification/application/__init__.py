"""Notification use cases: record notice requests (:mod:`.requests`) and send pending notices
(:mod:`.sender`); ports in :mod:`.ports`."""
