"""The keyed_streams surface's handler package."""
