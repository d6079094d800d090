"""The console surface's handler package."""
