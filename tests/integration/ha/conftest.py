"""The API fixtures of tests/integration/api, for the replica endpoints' tests."""

from tests.integration.api.conftest import abc, api, settings

__all__ = ["abc", "api", "settings"]
