"""The admin web UI, mounted at /admin on the service."""
