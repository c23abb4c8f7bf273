"""Dynamo's caches emptied around every test of this folder (tests/support/dynamo_fixtures.py)."""

from support.dynamo_fixtures import fresh_dynamo  # noqa: F401 - registered as this folder's autouse fixture
