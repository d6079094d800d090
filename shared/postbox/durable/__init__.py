"""Durable Streams on the log engine: the open protocol's streams plus Ursula's extensions.

One module per job: `lifecycle` (create, fork, delete, retention, expiry), `writes` (the append,
one SQL call), `reads` (catch-up), `live` (long-poll and SSE windows), `snapshots`, `access` (who
may use which streams). `catalog` finds a stream, `store` holds the SQL, `model` the values;
`offsets` and `jsontext` are pure helpers. Nothing here knows HTTP.
"""
