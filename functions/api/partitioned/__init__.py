"""The partitioned surface's handler package."""
