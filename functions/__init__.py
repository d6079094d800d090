"""Lambda entry points for Postbox: thin handlers over the `postbox` domain package."""
