"""fedload: a federated load-management marketplace for stream processing."""

__version__ = "0.1.0"
