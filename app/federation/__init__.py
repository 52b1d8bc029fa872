"""Contracts as code: the federation document (YAML) and its loader. Pure: no ORM, no web."""
