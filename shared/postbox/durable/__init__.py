"""Durable Streams on the log engine: the open protocol's streams plus Ursula's extensions.

`service` is the entry point; `offsets` and `jsontext` are pure helpers; `store` holds the SQL.
"""
