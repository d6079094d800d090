"""Runs every function on one machine: embedded PostgreSQL, the local gateway, the scheduler."""
