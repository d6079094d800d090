"""The durable surface's handler package."""
