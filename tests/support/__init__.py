"""Helpers shared by the test suites (no tests here); import as ``tests.support.<module>``."""
