"""The flows surface's handler package."""
