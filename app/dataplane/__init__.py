"""The data plane's authorization: tokens the registry signs for agents' Flight calls."""
